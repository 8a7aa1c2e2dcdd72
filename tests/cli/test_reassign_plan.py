"""The pure parts of `wherry reassign` / `wherry elect`: the planner (balance bounds, fewest moves
against a brute force, errors), the throttle values and the JSON formats."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

import pytest

from wherry.cli.common import CommandError
from wherry.cli.reassign_json import (
    format_reassignment,
    parse_broker_list,
    parse_election_partitions,
    parse_reassignment,
    parse_reassignment_with_dirs,
    parse_topics_to_move,
)
from wherry.cli.reassign_plan import (
    TP,
    PlanError,
    counts,
    follower_throttles,
    leader_throttles,
    move_map,
    plan_reassignment,
    plan_stats,
    reassigning_brokers,
)

Assign = Mapping[TP, Sequence[int]]


def spread(values: Mapping[int, int]) -> int:
    return max(values.values()) - min(values.values())


def check_valid(current: Assign, proposed: Assign, brokers: Sequence[int]) -> None:
    assert set(proposed) == set(current)
    for tp, replicas in proposed.items():
        assert len(replicas) == len(current[tp]), tp
        assert len(set(replicas)) == len(replicas), tp
        assert set(replicas) <= set(brokers), tp


def check_balanced(proposed: Assign, brokers: Sequence[int], all_leaders: bool = True) -> None:
    """Within 1 per broker: replicas and leaders per topic, replicas over the whole plan and,
    if `all_leaders`, leaders over the whole plan."""
    for topic in {t for t, _ in proposed}:
        part = {tp: r for tp, r in proposed.items() if tp[0] == topic}
        assert spread(counts(part, brokers)) <= 1, (topic, counts(part, brokers))
        assert spread(counts(part, brokers, leaders_only=True)) <= 1, topic
    assert spread(counts(proposed, brokers)) <= 1
    if all_leaders:
        assert spread(counts(proposed, brokers, leaders_only=True)) <= 1


def brute_force_min_moves(current: Assign, brokers: Sequence[int]) -> int:
    """The fewest moved replicas over every balanced plan."""
    tps = sorted(current)
    options = [list(itertools.permutations(brokers, len(current[tp]))) for tp in tps]
    best: int | None = None
    for choice in itertools.product(*options):
        plan = {tp: list(c) for tp, c in zip(tps, choice, strict=True)}
        if spread(counts(plan, brokers)) > 1:
            continue
        if spread(counts(plan, brokers, leaders_only=True)) > 1:
            continue
        moved = plan_stats(current, plan).moved_replicas
        best = moved if best is None or moved < best else best
    assert best is not None
    return best


# --------------------------------------------------------------------------------------------
# Planner


def test_balanced_cluster_stays_as_it_is() -> None:
    current = {("t", p): [p % 3, (p + 1) % 3] for p in range(6)}
    proposed = plan_reassignment(current, [0, 1, 2])
    assert proposed == current
    assert plan_stats(current, proposed).moved_replicas == 0


def test_adding_a_broker_moves_only_its_share() -> None:
    current = {("t", p): [p % 3 + 1, (p + 1) % 3 + 1] for p in range(6)}
    proposed = plan_reassignment(current, [1, 2, 3, 4])
    check_valid(current, proposed, [1, 2, 3, 4])
    check_balanced(proposed, [1, 2, 3, 4])
    assert counts(proposed, [1, 2, 3, 4]) == {1: 3, 2: 3, 3: 3, 4: 3}
    stats = plan_stats(current, proposed)
    assert stats.moved_replicas == 3  # broker 4's three replicas, nothing else
    # 6 leaders over 4 brokers: broker 4 must lead one; nobody else's leadership changes
    assert stats.leader_changes == 1


def test_decommissioning_a_broker_moves_only_its_replicas() -> None:
    current = {("t", p): [p % 4, (p + 1) % 4] for p in range(8)}
    proposed = plan_reassignment(current, [0, 1, 2])
    check_valid(current, proposed, [0, 1, 2])
    check_balanced(proposed, [0, 1, 2])
    on_3 = sum(1 for r in current.values() if 3 in r)
    assert plan_stats(current, proposed).moved_replicas == on_3


@pytest.mark.parametrize("seed", range(30))
def test_fewest_moves_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    old_brokers = list(range(rng.randint(2, 4)))
    brokers = sorted(rng.sample(range(5), rng.randint(2, 4)))
    rf = rng.randint(1, min(len(brokers), len(old_brokers), 2))
    current = {("t", p): rng.sample(old_brokers, rf) for p in range(rng.randint(2, 4))}
    proposed = plan_reassignment(current, brokers)
    check_valid(current, proposed, brokers)
    check_balanced(proposed, brokers)
    # Fewest moves, exactly. (Leader changes are minimal only given the replica sets chosen:
    # the two are planned one after the other, not jointly.)
    assert plan_stats(current, proposed).moved_replicas == brute_force_min_moves(current, brokers)


@pytest.mark.parametrize("seed", range(20))
def test_balance_bounds_hold_for_many_topics(seed: int) -> None:
    rng = random.Random(1000 + seed)
    brokers = sorted(rng.sample(range(12), rng.randint(2, 9)))
    current: dict[TP, list[int]] = {}
    for t in range(rng.randint(1, 6)):
        rf = rng.randint(1, len(brokers))
        for p in range(rng.randint(1, 25)):
            current[(f"topic-{t}", p)] = rng.sample(range(12), rf)
    proposed = plan_reassignment(current, brokers)
    check_valid(current, proposed, brokers)
    # Over all topics, leaders are balanced where the replica sets allow it (a broker holding
    # few replicas cannot lead many partitions): checked where every topic has RF >= 2.
    check_balanced(proposed, brokers, all_leaders=False)


@pytest.mark.parametrize("seed", range(10))
def test_leaders_balance_over_all_topics(seed: int) -> None:
    rng = random.Random(2000 + seed)
    brokers = list(range(rng.randint(3, 7)))
    current = {(f"t{t}", p): rng.sample(range(8), 3)
               for t in range(rng.randint(2, 6)) for p in range(rng.randint(1, 7))}
    proposed = plan_reassignment(current, brokers)
    check_valid(current, proposed, brokers)
    check_balanced(proposed, brokers)


def test_many_single_partition_topics_spread_over_the_cluster() -> None:
    current = {(f"t{i}", 0): [1] for i in range(9)}
    proposed = plan_reassignment(current, [1, 2, 3])
    assert counts(proposed, [1, 2, 3]) == {1: 3, 2: 3, 3: 3}
    assert plan_stats(current, proposed).moved_replicas == 6


def test_keeps_the_order_of_the_replicas_it_keeps() -> None:
    current = {("t", 0): [2, 0, 1]}
    assert plan_reassignment(current, [0, 1, 2]) == {("t", 0): [2, 0, 1]}


def _rack_counts(replicas: Sequence[int], racks: Mapping[int, str]) -> list[int]:
    names = sorted(set(racks.values()))
    return [sum(1 for b in replicas if racks[b] == n) for n in names]


@pytest.mark.parametrize("seed", range(15))
def test_rack_aware_plan_spreads_every_partition_over_the_racks(seed: int) -> None:
    rng = random.Random(seed)
    racks = {b: "abc"[b % 3] for b in range(rng.randint(3, 7))}
    brokers = sorted(racks)
    rf = rng.randint(1, 3)
    # every partition starts in one rack where it can (the worst placement)
    current = {("t", p): sorted(brokers, key=lambda b: (racks[b], b))[:rf]
               for p in range(rng.randint(2, 8))}
    proposed = plan_reassignment(current, brokers, racks)
    check_valid(current, proposed, brokers)
    for replicas in proposed.values():
        per_rack = _rack_counts(replicas, racks)
        assert max(per_rack) - min(per_rack) <= 1, (replicas, per_rack)
    # where the racks allow it, balance holds as without racks
    if all(sum(1 for b in brokers if racks[b] == n) == len(brokers) // 3 for n in "abc"):
        check_balanced(proposed, brokers, all_leaders=False)


def test_rack_aware_plan_keeps_a_rack_spread_assignment() -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    current = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(6)}
    assert plan_reassignment(current, [1, 2, 3], racks) == current


def test_rack_aware_plan_puts_a_replica_in_each_rack_before_balance() -> None:
    """Rack a has one broker, rack b three: with RF 2 every partition keeps a replica on the
    lone rack-a broker (as Kafka's rack-aware placement would), unbalanced as that is."""
    racks = {1: "a", 2: "b", 3: "b", 4: "b"}
    current = {("t", p): [2 + p % 3, 2 + (p + 1) % 3] for p in range(6)}
    proposed = plan_reassignment(current, [1, 2, 3, 4], racks)
    assert all(1 in r for r in proposed.values())
    assert plan_reassignment(current, [1, 2, 3, 4]) != proposed  # without racks: balance


def test_replication_factor_above_the_broker_count_is_an_error() -> None:
    with pytest.raises(PlanError, match="Replication factor: 3 larger than available brokers: 2"):
        plan_reassignment({("t", 0): [0, 1, 2]}, [0, 1])


@pytest.mark.parametrize("brokers, message", [
    ([], "broker list is empty"),
    ([1, 2, 1], "duplicate entries: 1"),
])
def test_bad_broker_lists(brokers: list[int], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan_reassignment({("t", 0): [1]}, brokers)


def test_a_thousand_partitions_plan_in_reasonable_time() -> None:
    rng = random.Random(7)
    current = {("big", p): rng.sample(range(10), 3) for p in range(300)}
    proposed = plan_reassignment(current, list(range(12)))
    check_balanced(proposed, list(range(12)))
    # brokers 10 and 11 need 75 replicas each (900 / 12); the rest stay where they are
    assert plan_stats(current, proposed).moved_replicas == 150


# --------------------------------------------------------------------------------------------
# Throttles


def test_throttle_values_are_kafkas() -> None:
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("u", 0): [1]}
    proposed = {("t", 0): [3, 4], ("t", 1): [2, 3], ("u", 0): [2]}
    moves = move_map({}, proposed, current)
    assert leader_throttles(moves) == {"t": "0:1,0:2,1:2,1:3", "u": "0:1"}
    assert follower_throttles(moves) == {"t": "0:3,0:4", "u": "0:2"}
    assert reassigning_brokers(moves) == [1, 2, 3, 4]


def test_an_ongoing_move_keeps_its_sources() -> None:
    # t-0 is moving from [1,2] to [3,4] (AR [3,4,1,2], adding 3,4); resubmitted as [5,6]
    moves = move_map({("t", 0): ((3, 4, 1, 2), (3, 4))}, {("t", 0): [5, 6]},
                     {("t", 0): [3, 4, 1, 2]})
    assert leader_throttles(moves) == {"t": "0:1,0:2"}
    assert follower_throttles(moves) == {"t": "0:5,0:6"}


def test_a_partition_without_replicas_cannot_move() -> None:
    with pytest.raises(PlanError, match="with 0 replicas"):
        move_map({}, {("t", 0): [1]}, {})


# --------------------------------------------------------------------------------------------
# JSON formats


def test_reassignment_json_is_kafkas_compact_format() -> None:
    text = format_reassignment({("t", 1): [3, 1], ("t", 0): [1, 2, 3]})
    assert text == ('{"version":1,"partitions":['
                    '{"topic":"t","partition":0,"replicas":[1,2,3],'
                    '"log_dirs":["any","any","any"]},'
                    '{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}')
    assert parse_reassignment(text) == {("t", 0): [1, 2, 3], ("t", 1): [3, 1]}


@pytest.mark.parametrize("text, message", [
    ("{not json", "The input string is not a valid JSON"),
    ('{"version":1,"partitions":[]}', "Partition reassignment list cannot be empty"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
     "Partition replica list cannot be empty"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
     '{"topic":"t","partition":0,"replicas":[2]}]}',
     "Partition reassignment contains duplicate topic partitions: t-0"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,1]}]}',
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
     "entries for 1"),
    ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
    ('{"version":1,"partitions":[{"topic":"t","replicas":[1]}]}', "`partition`"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}',
     "must be broker ids"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],'
     '"log_dirs":["any","any"]}]}',
     "Size of replicas list [1] is different from size of log dirs list [any, any] for "
     "partition t-0"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
     '"log_dirs":["/data/a"]}]}',
     "Size of replicas list [1, 2] is different from size of log dirs list [/data/a] for "
     "partition t-0"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
     '"log_dirs":["any","data/b"]}]}',
     'Invalid log dir "data/b" for replica 2 of partition t-0: a log dir must be either '
     '"any" or the absolute path of the log directory on the broker'),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],'
     '"log_dirs":[7]}]}', "Field `log_dirs` of partition t-0 must be an array of strings"),
])
def test_bad_reassignment_json(text: str, message: str) -> None:
    with pytest.raises(CommandError) as e:
        parse_reassignment(text)
    assert message in str(e.value)


def test_log_dirs_name_the_replicas_to_move() -> None:
    text = ('{"version":1,"partitions":['
            '{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["/data/a","any"]},'
            '{"topic":"t","partition":1,"replicas":[2,3]},'
            '{"topic":"u","partition":0,"replicas":[3],"log_dirs":["/data/b"]}]}')
    assert parse_reassignment_with_dirs(text) == (
        {("t", 0): [1, 2], ("t", 1): [2, 3], ("u", 0): [3]},
        {("t", 0, 1): "/data/a", ("u", 0, 3): "/data/b"})


def test_topics_to_move_and_broker_list() -> None:
    assert parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == [
        "a", "b"]
    with pytest.raises(CommandError, match="duplicate entries: a"):
        parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    assert parse_broker_list("1,2,3") == [1, 2, 3]
    with pytest.raises(CommandError, match="Broker list contains duplicate entries: 2"):
        parse_broker_list("1,2,2")
    with pytest.raises(CommandError, match="Invalid broker list"):
        parse_broker_list("1,x")


def test_election_json() -> None:
    assert parse_election_partitions(
        '{"partitions":[{"topic":"b","partition":1},{"topic":"a","partition":0}]}'
    ) == [("a", 0), ("b", 1)]
    with pytest.raises(CommandError, match='missing "partitions" field'):
        parse_election_partitions('{"version":1}')
    with pytest.raises(CommandError, match="contains duplicate partitions: a-0"):
        parse_election_partitions(
            '{"partitions":[{"topic":"a","partition":0},{"topic":"a","partition":0}]}')
