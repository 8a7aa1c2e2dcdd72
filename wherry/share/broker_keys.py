"""The broker's share-group config keys and their defaults (Kafka's ShareGroupConfig and
GroupCoordinatorConfig share keys), without the group configs' machinery of `config.py`: the
broker's config checks its keys at start (`server/config_keys.py`), long before a share
group."""

from __future__ import annotations

# broker key -> its default (a bound of a group key is a broker key of its own)
BROKER_DEFAULTS: dict[str, int] = {
    "group.consumer.session.timeout.ms": 45_000,
    "group.consumer.min.session.timeout.ms": 45_000,
    "group.consumer.max.session.timeout.ms": 60_000,
    "group.consumer.heartbeat.interval.ms": 5_000,
    "group.consumer.min.heartbeat.interval.ms": 5_000,
    "group.consumer.max.heartbeat.interval.ms": 15_000,
    "group.share.session.timeout.ms": 45_000,
    "group.share.min.session.timeout.ms": 45_000,
    "group.share.max.session.timeout.ms": 60_000,
    "group.share.heartbeat.interval.ms": 5_000,
    "group.share.min.heartbeat.interval.ms": 5_000,
    "group.share.max.heartbeat.interval.ms": 15_000,
    "group.share.record.lock.duration.ms": 30_000,
    "group.share.min.record.lock.duration.ms": 15_000,
    "group.share.max.record.lock.duration.ms": 60_000,
    "group.share.delivery.count.limit": 5,
    "group.share.min.delivery.count.limit": 2,
    "group.share.max.delivery.count.limit": 10,
    "group.share.partition.max.record.locks": 2_000,
    "group.share.min.partition.max.record.locks": 100,
    "group.share.max.partition.max.record.locks": 10_000,
    "group.share.max.size": 200,
    "share.coordinator.state.topic.num.partitions": 50,
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.min.isr": 2,
    "share.coordinator.state.topic.segment.bytes": 104_857_600,
    "share.coordinator.write.timeout.ms": 5_000,
}

SHARE_BROKER_KEYS = frozenset(BROKER_DEFAULTS)
