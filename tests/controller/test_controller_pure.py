import random
from collections import Counter

import pytest

from wherry.controller.assignment import InvalidReplicationFactor, assign_replicas
from wherry.controller.election import offline_partition_election, preferred_replica_election


def test_preferred_replicas_and_replicas_spread_evenly() -> None:
    a = assign_replicas([1, 2, 3], 12, 3, rng=random.Random(7))
    assert Counter(r[0] for r in a.values()) == {1: 4, 2: 4, 3: 4}
    assert Counter(b for r in a.values() for b in r) == {1: 12, 2: 12, 3: 12}
    assert all(len(set(r)) == 3 for r in a.values())


def test_rf_larger_than_brokers_rejected() -> None:
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas([0], 1, 2, rng=random.Random(0))


def test_added_partitions_continue_the_pattern() -> None:
    rng = random.Random(1)
    first = assign_replicas([0, 1, 2], 3, 2, rng=rng, fixed_start_index=0)
    more = assign_replicas([0, 1, 2], 3, 2, rng=rng, start_partition=3, fixed_start_index=0)
    assert sorted(more) == [3, 4, 5]
    assert Counter(r[0] for r in {**first, **more}.values()) == {0: 2, 1: 2, 2: 2}


def test_offline_election_prefers_live_isr_in_assignment_order() -> None:
    e = offline_partition_election([1, 2, 3], [3, 2], live={2, 3}, unclean_allowed=False)
    assert (e.leader, e.isr, e.unclean) == (2, (3, 2), False)


def test_offline_election_unclean_only_when_allowed() -> None:
    assert offline_partition_election([1, 2], [1], live={2}, unclean_allowed=False).leader is None
    e = offline_partition_election([1, 2], [1], live={2}, unclean_allowed=True)
    assert (e.leader, e.isr, e.unclean) == (2, (2,), True)
    assert offline_partition_election([1, 2], [1], live=set(), unclean_allowed=True).leader is None


def test_preferred_election_needs_alive_and_in_isr() -> None:
    assert preferred_replica_election([1, 2], [1, 2], {1, 2}).leader == 1
    assert preferred_replica_election([1, 2], [2], {1, 2}).leader is None
    assert preferred_replica_election([1, 2], [1, 2], {2}).leader is None
