"""Replication quotas (KIP-73; Kafka's ReplicationQuotaManager): pure, time passed in.

A broker has two: the *leader* quota bounds the bytes it sends to followers of throttled
partitions, the *follower* quota the bytes it fetches for them. Each is a byte rate measured
over a sampled window (`replication.quota.window.num` samples of
`replication.quota.window.size.seconds`, Kafka's 11 × 1 s) against an upper bound
(`leader.replication.throttled.rate` / `follower.replication.throttled.rate`, bytes/s,
default Long.MAX_VALUE: unlimited). Which partitions are throttled comes from the topic
configs `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`
(`p:b,p:b` or `*`), of which a broker keeps the partitions listed with its own id.

The rate is Kafka's `SimpleRate` over a `SampledStat`: the samples' sum divided by the time
since the oldest sample started (at least one window), samples older than the whole window
reset. Recording happens after bytes moved; the check (`is_quota_exceeded`) happens before
the next move, so a move may overshoot by one fetch, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable

from wherry.common.topic_partition import TopicPartition
from wherry.quotas.rate import SampledRate

__all__ = [
    "ALL_REPLICAS",
    "DEFAULT_QUOTA_WINDOW_NUM",
    "DEFAULT_QUOTA_WINDOW_SIZE_SECONDS",
    "UNLIMITED_RATE",
    "ReplicationQuotaManager",
    "throttled_partitions",
]

UNLIMITED_RATE = 2**63 - 1  # Kafka's QuotaBytesPerSecondDefault, Long.MAX_VALUE
DEFAULT_QUOTA_WINDOW_NUM = 11  # replication.quota.window.num: 10 whole windows + the current
DEFAULT_QUOTA_WINDOW_SIZE_SECONDS = 1  # replication.quota.window.size.seconds


class _AllReplicas:
    """`*`: every partition of the topic is throttled."""

    def __contains__(self, partition: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL_REPLICAS"


ALL_REPLICAS = _AllReplicas()
Throttled = frozenset[int] | _AllReplicas


def throttled_partitions(replicas: Iterable[str], broker_id: int) -> Throttled:
    """The partitions a `*.replication.throttled.replicas` value throttles on `broker_id`:
    all for `*`, else those listed as `partition:broker_id` (the value is validated by the
    topic config, `log.config`)."""
    items = [r.strip() for r in replicas if r.strip()]
    if items == ["*"]:
        return ALL_REPLICAS
    out: set[int] = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuotaManager:
    """One replication quota: a byte rate, its upper bound and the throttled partitions."""

    def __init__(
        self,
        *,
        samples: int = DEFAULT_QUOTA_WINDOW_NUM,
        window_ms: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS * 1000,
        bound: int = UNLIMITED_RATE,
    ) -> None:
        self._rate = SampledRate(samples, window_ms)
        self.bound = bound
        self._throttled: dict[str, Throttled] = {}

    # -- the bound ---------------------------------------------------------------------------
    def update_quota(self, bound: int) -> None:
        """A new upper bound in bytes/s (the recorded samples stay)."""
        self.bound = bound

    @property
    def unlimited(self) -> bool:
        return self.bound >= UNLIMITED_RATE

    # -- throttled partitions ------------------------------------------------------------------
    def mark_throttled(self, topic: str, partitions: Throttled) -> None:
        if isinstance(partitions, frozenset) and not partitions:
            self._throttled.pop(topic, None)
        else:
            self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def throttled_topics(self) -> dict[str, Throttled]:
        return dict(self._throttled)

    def is_throttled(self, tp: TopicPartition) -> bool:
        partitions = self._throttled.get(tp.topic)
        return partitions is not None and tp.partition in partitions

    # -- the rate ------------------------------------------------------------------------------
    def record(self, num_bytes: int, now_ms: int) -> None:
        """Bytes moved for throttled partitions (Kafka records after the move)."""
        self._rate.record(num_bytes, now_ms)

    def rate(self, now_ms: int) -> float:
        """Bytes per second over the sampled window (Kafka's SimpleRate)."""
        return self._rate.measure(now_ms)

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """Whether the measured rate is above the bound (never, while unlimited)."""
        return not self.unlimited and self.rate(now_ms) > self.bound
