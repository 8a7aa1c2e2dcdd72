"""Reconciliation of a KIP-848 member towards its target assignment (Kafka's
CurrentAssignmentBuilder): revocation before assignment.

A member in STABLE whose epoch is behind the target assignment epoch computes its next
assignment: the partitions it keeps (current ∩ target), those it must revoke (current -
target) and those it may get (target - current) -- only the ones no other member still owns.

* Something to revoke: UNREVOKED_PARTITIONS; the member keeps its epoch and is told to keep
  only the kept partitions. It stays there until a heartbeat reports owned partitions without
  any of the revoked ones (or the rebalance timeout fences it).
* Otherwise the member moves to the target epoch with kept + free partitions, in
  UNRELEASED_PARTITIONS while some target partitions are still owned by others (it retries on
  each heartbeat), else STABLE.

Pure: ownership of other members comes in as `is_free(topic_id, partition)`.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["MemberAssignment", "MemberState", "next_assignment", "reconcile"]

Parts = Mapping[uuid.UUID, frozenset[int]]


class MemberState(enum.IntEnum):
    """Kafka's MemberState (the byte stored in ConsumerGroupCurrentMemberAssignmentValue)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: Parts
    pending_revocation: Parts


def _clean(d: Mapping[uuid.UUID, frozenset[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: p for t, p in d.items() if p}


def next_assignment(
    current: MemberAssignment,
    target_epoch: int,
    target: Parts,
    is_free: Callable[[uuid.UUID, int], bool],
) -> MemberAssignment:
    """Kafka's computeNextAssignment from the member's current assigned partitions."""
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for t in set(target) | set(current.assigned):
        want = target.get(t, frozenset())
        have = current.assigned.get(t, frozenset())
        kept[t] = have & want
        revoke[t] = have - want
        missing = want - have
        free = frozenset(p for p in missing if is_free(t, p))
        add[t] = free
        unreleased = unreleased or len(free) < len(missing)
    kept, revoke, add = _clean(kept), _clean(revoke), _clean(add)
    if revoke:
        return MemberAssignment(
            MemberState.UNREVOKED_PARTITIONS,
            current.member_epoch,
            current.previous_member_epoch,
            kept,
            revoke,
        )
    new_assigned = {
        t: kept.get(t, frozenset()) | add.get(t, frozenset()) for t in set(kept) | set(add)
    }
    return MemberAssignment(
        MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        target_epoch,
        current.member_epoch
        if target_epoch != current.member_epoch
        else current.previous_member_epoch,
        _clean(new_assigned),
        {},
    )


def _owns_any(owned: Parts, revoked: Parts) -> bool:
    return any(owned.get(t, frozenset()) & parts for t, parts in revoked.items())


def reconcile(
    current: MemberAssignment,
    target_epoch: int,
    target: Parts,
    owned: Parts | None,
    is_free: Callable[[uuid.UUID, int], bool],
) -> MemberAssignment:
    """The member's assignment after a heartbeat (Kafka's CurrentAssignmentBuilder.build).

    `owned` is what the heartbeat says the member owns (None: not sent, unchanged).
    """
    match current.state:
        case MemberState.STABLE:
            if current.member_epoch != target_epoch:
                return next_assignment(current, target_epoch, target, is_free)
            return current
        case MemberState.UNREVOKED_PARTITIONS:
            if owned is not None and not _owns_any(owned, current.pending_revocation):
                done = MemberAssignment(
                    MemberState.STABLE,
                    current.member_epoch,
                    current.previous_member_epoch,
                    current.assigned,
                    {},
                )
                return next_assignment(done, target_epoch, target, is_free)
            return current
        case _:
            # UNRELEASED_PARTITIONS (or UNKNOWN): try again for the missing partitions.
            return next_assignment(current, target_epoch, target, is_free)
