"""Rack-aware replica placement at topic creation (Kafka's rack-aware assignment): brokers
listed rack by rack in turn, each partition's replicas over as many racks as it has replicas."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from wherry.controller.assignment import MixedRackInformation, assign_replicas, rack_alternated

RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_rack_alternated_broker_list() -> None:
    assert rack_alternated(RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]


def test_placement_is_kafkas() -> None:
    """The placement Kafka's tool makes for these racks, start index 0."""
    got = assign_replicas(list(RACKS), 7, 3, rng=random.Random(0), fixed_start_index=0,
                          racks=RACKS)
    assert got == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
                   5: [2, 0, 3], 6: [0, 4, 2]}


@pytest.mark.parametrize("seed", range(20))
def test_every_partition_spans_the_racks_and_load_spreads(seed: int) -> None:
    racks = {0: "a", 1: "b", 2: "b", 3: "c", 4: "c", 5: "a"}
    got = assign_replicas(list(racks), 6, 3, rng=random.Random(seed), racks=racks)
    for replicas in got.values():
        assert len(set(replicas)) == 3
        assert {racks[b] for b in replicas} == {"a", "b", "c"}
    assert set(Counter(r[0] for r in got.values()).values()) == {1}  # a leader each
    assert set(Counter(b for r in got.values() for b in r).values()) == {3}


def test_fewer_racks_than_replicas_fill_every_rack_first() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    got = assign_replicas(list(racks), 8, 3, rng=random.Random(3), racks=racks)
    for replicas in got.values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_three_racks_one_broker_each() -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    got = assign_replicas([1, 2, 3], 3, 3, rng=random.Random(5), racks=racks)
    assert all(sorted(r) == [1, 2, 3] for r in got.values())
    assert sorted(r[0] for r in got.values()) == [1, 2, 3]


def test_without_racks_rack_unaware_and_mixed_refused() -> None:
    plain = assign_replicas([1, 2, 3], 6, 2, rng=random.Random(1), fixed_start_index=1)
    assert assign_replicas([1, 2, 3], 6, 2, rng=random.Random(1), fixed_start_index=1,
                           racks={1: None, 2: None, 3: None}) == plain
    with pytest.raises(MixedRackInformation, match="Not all brokers have rack information"):
        assign_replicas([1, 2, 3], 3, 2, rng=random.Random(1), racks={1: "a", 2: "b", 3: None})
