"""Leader election rules (pure): clean from the live ISR, unclean only when enabled (topic
override, else the broker default), no leader when nothing eligible is alive, and the last ISR
member coming back."""

from __future__ import annotations

import pytest

from wherry.controller.election import (
    live_isr,
    offline_partition_election,
    unclean_election_enabled,
)


def test_clean_election_takes_the_first_live_isr_member_in_assignment_order() -> None:
    e = offline_partition_election([3, 1, 2], [1, 2, 3], live={1, 2}, unclean_allowed=False)
    assert (e.leader, e.isr, e.unclean) == (1, (1, 2), False)
    # the ISR order does not matter, the assignment order does
    e = offline_partition_election([2, 1], [1, 2], live={1, 2}, unclean_allowed=True)
    assert (e.leader, e.isr, e.unclean) == (2, (1, 2), False)


def test_unclean_election_only_when_allowed() -> None:
    off = offline_partition_election([1, 2, 3], [1], live={2, 3}, unclean_allowed=False)
    assert (off.leader, off.isr) == (None, (1,))
    on = offline_partition_election([1, 3, 2], [1], live={2, 3}, unclean_allowed=True)
    assert (on.leader, on.isr, on.unclean) == (3, (3,), True)


def test_no_live_replica_means_no_leader() -> None:
    for unclean in (False, True):
        e = offline_partition_election([1, 2], [1, 2], live={7}, unclean_allowed=unclean)
        assert e.leader is None and e.isr == (1, 2) and not e.unclean


def test_the_last_isr_member_returning_is_elected_cleanly() -> None:
    # All replicas died; the ISR kept its last member, 3. Replica 1 returning is not enough...
    assert offline_partition_election([1, 2, 3], [3], {1}, unclean_allowed=False).leader is None
    # ...3 returning is.
    e = offline_partition_election([1, 2, 3], [3], {1, 3}, unclean_allowed=False)
    assert (e.leader, e.isr, e.unclean) == (3, (3,), False)


def test_live_isr() -> None:
    assert live_isr([3, 1, 2], {1, 2, 3}, {2, 3}) == [3, 2]
    assert live_isr([1, 2], {1}, {2}) == []


@pytest.mark.parametrize(
    "config,default,expected",
    [
        ({}, False, False),
        ({}, True, True),
        ({"unclean.leader.election.enable": "true"}, False, True),
        ({"unclean.leader.election.enable": "TRUE "}, False, True),
        ({"unclean.leader.election.enable": "false"}, True, False),
        ({"retention.ms": "5"}, True, True),
    ],
)
def test_unclean_setting_topic_override_else_broker_default(
    config: dict[str, str], default: bool, expected: bool
) -> None:
    assert unclean_election_enabled(config, default) is expected
