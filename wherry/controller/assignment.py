"""Replica assignment for new topics and partitions, pure.

Kafka's rack-unaware algorithm: the first replica of partition p goes to broker
(start + p) mod n, the others follow with a shift that grows every n partitions, so
preferred replicas and all replicas spread evenly. Randomness is passed in.

When the brokers have racks (`broker.rack`), Kafka's rack-aware algorithm: the same walk over
the brokers listed rack by rack in turn (one of rack a, one of rack b, ..., then the second of
each), a replica skipped while its rack already holds one of the partition and some rack holds
none, or its broker does while some broker holds none; so a partition's replicas span
min(replication factor, racks) racks and leaders still spread over the brokers. Some brokers
with a rack and some without is refused, as Kafka refuses it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class InvalidReplicationFactor(ValueError):
    pass


class MixedRackInformation(ValueError):
    """Some brokers have a rack and some have none."""

    def __init__(self) -> None:
        super().__init__(
            "Not all brokers have rack information for replica rack aware assignment."
        )


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers rack by rack in turn, racks and brokers in order: with racks a: 1 2,
    b: 3, c: 4 5 -> 1 3 4 2 5 (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out


def assign_replicas(
    brokers: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    *,
    rng: random.Random,
    start_partition: int = 0,
    fixed_start_index: int = -1,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Map partition id → replica list (first = preferred leader). With `racks` (broker id
    → rack or None) the brokers' racks are used when every broker has one (MixedRackInformation
    when only some have)."""
    if num_partitions <= 0:
        raise ValueError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("replication factor must be larger than 0")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor: {replication_factor} larger than available brokers: {n}"
        )
    known = {b: r for b in ids if (r := (racks or {}).get(b))}
    if known and len(known) < n:
        raise MixedRackInformation()
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    if known:
        return _rack_aware(
            known, num_partitions, replication_factor, start_index, shift, start_partition
        )
    out: dict[int, list[int]] = {}
    pid = start_partition
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[pid] = replicas
        pid += 1
    return out


def _rack_aware(
    racks: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    start_index: int,
    shift: int,
    start_partition: int,
) -> dict[int, list[int]]:
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    pid = max(0, start_partition)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        k = 0
        while len(replicas) < replication_factor:
            # the k-th candidate after the first replica, as the rack-unaware walk steps
            broker = arranged[(first + 1 + (shift * num_racks + k) % (n - 1)) % n]
            rack = racks[broker]
            k += 1
            if rack in used_racks and len(used_racks) < num_racks:
                continue  # a rack without a replica of the partition is left
            if broker in replicas and len(replicas) < n:
                continue  # a broker without one is left
            replicas.append(broker)
            used_racks.add(rack)
        out[pid] = replicas
        pid += 1
    return out
