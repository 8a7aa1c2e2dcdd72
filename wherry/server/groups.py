"""Consumer groups in the broker: the group coordinator (`coordinator/groups.py`, on the
coordinator runtime) configured from the broker's config, with the broker's own edges.

* Storage and loading: `coordinator/runtime.py`, which the simulation runs too.
* The topic is created on first use (FindCoordinator, or a Metadata request naming it) with
  `offsets.topic.num.partitions` partitions, `offsets.topic.replication.factor` replicas
  (Kafka 3.9: creation fails - COORDINATOR_NOT_AVAILABLE - while fewer brokers are alive; no
  capping) and `offsets_topic_configs`: `cleanup.policy=compact`.
"""

from __future__ import annotations

from collections.abc import Callable

from wherry.common.topic_partition import TopicPartition
from wherry.coordination.store import MetadataStore
from wherry.coordinator.groups import GroupCoordinatorHost
from wherry.group.config import ConsumerGroupConfig, GroupCoordinatorConfig
from wherry.group.records import OFFSETS_TOPIC
from wherry.server.config import BrokerConfig
from wherry.server.coordinator_edges import CoordinatorEdges, TopicSpec
from wherry.server.internal_topics import adopt_stored_partition_count

__all__ = ["GroupsRuntime", "group_coordinator_config", "offsets_topic_configs"]


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """The configs `__consumer_offsets` is created with (Kafka's offsetsTopicConfigs)."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.offsets_topic_segment_bytes),
        "compression.type": "producer",
    }


def group_coordinator_config(config: BrokerConfig) -> GroupCoordinatorConfig:
    return GroupCoordinatorConfig(
        group_min_session_timeout_ms=config.group_min_session_timeout_ms,
        group_max_session_timeout_ms=config.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        group_max_size=config.group_max_size,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        offsets_retention_ms=config.offsets_retention_ms,
        offsets_topic_num_partitions=config.offsets_topic_num_partitions,
        consumer=ConsumerGroupConfig(
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            assignors=config.group_consumer_assignors,
            migration_policy=config.group_consumer_migration_policy,
            max_size=config.group_consumer_max_size,
        ),
    )


class GroupsRuntime(GroupCoordinatorHost):
    """The broker's group coordinator: the topic's creation, its partition count, expiry."""

    def __init__(
        self, edges: CoordinatorEdges, on_loaded: Callable[[int], None] | None = None
    ) -> None:
        """`on_loaded(partition)` is called when a partition of the topic has been loaded."""
        config = edges.config
        super().__init__(
            config.broker_id,
            group_coordinator_config(config),
            edges.node,
            edges.clock.now_ms,
            timeout_ms=config.offsets_commit_timeout_ms,
            buffer_bytes=config.offsets_load_buffer_size,
            blocking=edges.blocking,
            on_loaded=on_loaded,
        )
        self.clock = edges.clock
        self.offsets_topic = edges.internal_topic(
            self.runtime,
            TopicSpec(
                partitions=config.offsets_topic_num_partitions,
                replication_factor=config.offsets_topic_replication_factor,
                configs=offsets_topic_configs(config),
            ),
        )

    async def start(self, store: MetadataStore) -> None:
        await adopt_stored_partition_count(
            store,
            OFFSETS_TOPIC,
            self.coordinator,
            "offsets.topic.num.partitions",
            self.runtime.prefix,
        )
        self.coordinator.startup()

    async def stop(self) -> None:
        self.offsets_topic.cancel()
        await super().stop()

    def ensure_offsets_topic(self) -> None:
        """Start creating `__consumer_offsets` unless it exists or is being created."""
        self.offsets_topic.ensure()

    # --- housekeeping -----------------------------------------------------------------------
    def on_partitions_deleted(self, partitions: list[TopicPartition]) -> None:
        """Forget committed offsets of deleted topic partitions (Kafka's onPartitionsDeleted)."""
        deleted = [tp for tp in partitions if tp.topic != OFFSETS_TOPIC]
        if deleted:
            self.coordinator.handle_deleted_partitions(deleted, self.clock.now_ms())

    def cleanup_expired_offsets(self) -> None:
        self.coordinator.cleanup_expired_offsets(self.clock.now_ms())
