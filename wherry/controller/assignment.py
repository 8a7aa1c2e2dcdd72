"""Replica assignment for new topics and partitions, pure.

Kafka's rack-unaware algorithm: the first replica of partition p goes to broker
(start + p) mod n, the others follow with a shift that grows every n partitions, so
preferred replicas and all replicas spread evenly. Randomness is passed in.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class InvalidReplicationFactor(ValueError):
    pass


def assign_replicas(
    brokers: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    *,
    rng: random.Random,
    start_partition: int = 0,
    fixed_start_index: int = -1,
) -> dict[int, list[int]]:
    """Map partition id → replica list (first = preferred leader)."""
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
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
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
