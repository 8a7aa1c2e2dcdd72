"""Settings of the group coordinator, under Kafka's broker config names and defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ConsumerGroupConfig", "GroupCoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """KIP-848 consumer groups (Kafka's `group.consumer.*` broker configs)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    max_size: int = 2_147_483_647  # group.consumer.max.size


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    group_min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    group_initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    group_max_size: int = 2_147_483_647  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes (7 days)
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    # JoinGroup requests of new members time out after this (Kafka's NewMemberJoinTimeoutMs).
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
