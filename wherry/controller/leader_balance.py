"""Leader imbalance (Kafka's checkAndTriggerAutoLeaderRebalance), pure.

A broker's imbalance is the share of the partitions whose preferred replica (first assigned)
it is that some other broker leads. When it exceeds `leader.imbalance.per.broker.percentage`,
the partitions it should lead go back to it by preferred election -- those whose preferred
replica can lead now (alive, not shutting down, in the ISR).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from wherry.common.topic_partition import TopicPartition
from wherry.controller.election import preferred_replica_election

DEFAULT_IMBALANCE_PERCENTAGE = 10
DEFAULT_CHECK_INTERVAL_S = 300


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    replicas: Sequence[int]
    leader: int
    isr: Sequence[int]


@dataclass(frozen=True, slots=True)
class BrokerImbalance:
    broker: int
    preferred: int  # partitions whose preferred replica is this broker
    led_elsewhere: tuple[TopicPartition, ...]

    @property
    def ratio(self) -> float:
        return len(self.led_elsewhere) / self.preferred if self.preferred else 0.0


def imbalance(partitions: Mapping[TopicPartition, PartitionLeadership]) -> list[BrokerImbalance]:
    """Per preferred broker, in broker order."""
    by_broker: dict[int, list[TopicPartition]] = {}
    for tp, p in partitions.items():
        if p.replicas:
            by_broker.setdefault(p.replicas[0], []).append(tp)
    return [
        BrokerImbalance(
            b,
            len(tps),
            tuple(sorted(tp for tp in tps if partitions[tp].leader != b)),
        )
        for b, tps in sorted(by_broker.items())
    ]


def rebalance_candidates(
    partitions: Mapping[TopicPartition, PartitionLeadership],
    live: Collection[int],
    percentage: int,
) -> list[TopicPartition]:
    """The partitions to give back to their preferred replicas now: of the brokers whose
    imbalance exceeds `percentage` %, those whose preferred replica can lead."""
    out: list[TopicPartition] = []
    for b in imbalance(partitions):
        if b.ratio <= percentage / 100:
            continue
        for tp in b.led_elsewhere:
            p = partitions[tp]
            if preferred_replica_election(p.replicas, p.isr, live).leader is not None:
                out.append(tp)
    return sorted(out)
