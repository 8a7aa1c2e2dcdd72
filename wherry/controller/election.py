"""Leader election rules, pure functions of the partition's state.

Kafka's `PartitionLeaderElectionAlgorithms` (ZooKeeper mode): the offline election (new and
offline partitions), the reassignment election (a leader from the target replicas), the
preferred replica election and the controlled-shutdown election. `live` is always the brokers
that may lead: registered and not shutting down.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"


@dataclass(frozen=True, slots=True)
class Election:
    leader: int | None  # None: no eligible replica, the partition goes (or stays) offline
    isr: tuple[int, ...]
    unclean: bool = False


def live_isr(assigned: Sequence[int], isr: Collection[int], live: Collection[int]) -> list[int]:
    """The ISR members that are alive, in assignment order (the clean candidates)."""
    return [r for r in assigned if r in isr and r in live]


def offline_partition_election(
    assigned: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    *,
    unclean_allowed: bool,
) -> Election:
    """Kafka's offlinePartitionLeaderElection: the first live ISR member in assignment order,
    the new ISR being the live ISR; else, only if unclean election is allowed, the first live
    replica in assignment order, alone in the ISR (possible data loss); else no leader."""
    clean = live_isr(assigned, isr, live)
    if clean:
        return Election(clean[0], tuple(r for r in isr if r in live))
    if unclean_allowed:
        live_assigned = [r for r in assigned if r in live]
        if live_assigned:
            return Election(live_assigned[0], (live_assigned[0],), unclean=True)
    return Election(None, tuple(isr))


def unclean_election_enabled(topic_config: Mapping[str, str], broker_default: bool) -> bool:
    """`unclean.leader.election.enable` of a topic: its override, else the broker default."""
    value = topic_config.get(UNCLEAN_LEADER_ELECTION_ENABLE)
    if value is None:
        return broker_default
    return value.strip().lower() == "true"


def preferred_replica_election(
    assigned: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Election:
    """The preferred (first assigned) replica, only if it is alive and in the ISR."""
    if assigned and assigned[0] in live and assigned[0] in isr:
        return Election(assigned[0], tuple(isr))
    return Election(None, tuple(isr))


def reassign_partition_election(
    target: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Election:
    """The first target replica that is alive and in the ISR; the ISR stays."""
    for r in target:
        if r in live and r in isr:
            return Election(r, tuple(isr))
    return Election(None, tuple(isr))


def controlled_shutdown_election(
    assigned: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> Election:
    """The first assigned replica that is alive, in the ISR and not shutting down; the new
    ISR leaves out the shutting-down brokers."""
    remaining = tuple(r for r in isr if r not in shutting_down)
    for r in assigned:
        if r in live and r in remaining:
            return Election(r, remaining)
    return Election(None, tuple(isr))


class ElectionStrategy(enum.Enum):
    OFFLINE = "offline"  # unclean only where the topic (or the broker default) allows it
    UNCLEAN = "unclean"  # the offline election, unclean allowed whatever the topic says
    REASSIGN = "reassign"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled shutdown"
