"""The group state table is Kafka's `validPreviousStates`, and nothing else is allowed."""

from __future__ import annotations

import itertools

import pytest

from wherry.group.group import GroupMetadata
from wherry.group.state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransition,
    can_transition,
    transition,
)

E = GroupState.EMPTY
P = GroupState.PREPARING_REBALANCE
C = GroupState.COMPLETING_REBALANCE
S = GroupState.STABLE
D = GroupState.DEAD

# (from, to) pairs Kafka 3.9 allows (GroupMetadata.scala).
ALLOWED = {
    (S, P), (C, P), (E, P),
    (P, C),
    (C, S),
    (S, D), (P, D), (C, D), (E, D), (D, D),
    (P, E),
}


@pytest.mark.parametrize("src,dst", list(itertools.product(GroupState, GroupState)))
def test_transition_table(src: GroupState, dst: GroupState) -> None:
    assert can_transition(src, dst) == ((src, dst) in ALLOWED)
    if (src, dst) in ALLOWED:
        assert transition("g", src, dst) is dst
    else:
        with pytest.raises(IllegalStateTransition, match="should be in the"):
            transition("g", src, dst)


def test_table_covers_every_state() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


def test_state_names_are_kafkas() -> None:
    assert [str(s) for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert GroupState.parse("stable") is S
    assert GroupState.parse("COMPLETINGREBALANCE") is C
    assert GroupState.parse("nope") is None


def test_group_refuses_illegal_transition_and_keeps_state() -> None:
    g = GroupMetadata("g", E, 1000)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(S, 2000)
    assert g.state is E and g.current_state_timestamp_ms == 1000
    g.transition_to(P, 3000)
    assert g.state is P and g.current_state_timestamp_ms == 3000
    assert not g.can_rebalance
