"""Classic consumer-group states and the transitions between them (Kafka's GroupState).

The table is Kafka's `validPreviousStates`: a group may move to a state only from one of the
states listed for it. `transition` refuses anything else, so an illegal move is a loud bug
rather than silently corrupted group state.

* Empty: no members; offsets may still be stored (also the state of "simple" groups that only
  commit offsets). A join from a new member starts a rebalance.
* PreparingRebalance: waiting for the known members to (re)join; heartbeats answer
  REBALANCE_IN_PROGRESS.
* CompletingRebalance: joined; waiting for the leader's assignment in SyncGroup.
* Stable: assignment distributed; heartbeats answer normally.
* Dead: the group was deleted, expired, or unloaded because the coordinator moved.
"""

from __future__ import annotations

from collections.abc import Mapping

from wherry.common.state_enum import StateEnum

__all__ = [
    "VALID_PREVIOUS_STATES",
    "GroupState",
    "IllegalStateTransition",
    "can_transition",
    "transition",
]


class GroupState(StateEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """Case-insensitive lookup by Kafka's state name ("Stable", "stable"); None if unknown."""
        lowered = name.lower()
        for s in cls:
            if s.value.lower() == lowered:
                return s
        return None


_E = GroupState.EMPTY
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_D = GroupState.DEAD

VALID_PREVIOUS_STATES: Mapping[GroupState, frozenset[GroupState]] = {
    _P: frozenset({_S, _C, _E}),
    _C: frozenset({_P}),
    _S: frozenset({_C}),
    _D: frozenset({_S, _P, _C, _E, _D}),
    _E: frozenset({_P}),
}


class IllegalStateTransition(Exception):
    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        allowed = ",".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
        super().__init__(
            f"Group {group_id} should be in the {allowed} states before moving to {target} "
            f"state. Instead it is in {current} state"
        )
        self.group_id = group_id
        self.current = current
        self.target = target


def can_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


def transition(group_id: str, current: GroupState, target: GroupState) -> GroupState:
    """Return `target` if the move from `current` is legal; raise IllegalStateTransition if not."""
    if not can_transition(current, target):
        raise IllegalStateTransition(group_id, current, target)
    return target
