"""Consumer groups in the broker: the GroupCoordinator wired to `__consumer_offsets`.

* Storage: group metadata and offsets are appended (acks=-1) to `__consumer_offsets-<p>`
  through the replica manager; a partition is loaded from its log when this broker becomes its
  leader, once its high watermark reaches its log end (requests for its groups get
  COORDINATOR_LOAD_IN_PROGRESS meanwhile), and unloaded when it stops leading it, so the
  coordinator follows partition leadership (`replication/coordinator_log.py`, which the
  transaction coordinator and the simulation run too).
* The topic is created on first use (FindCoordinator, or a Metadata request naming it) with
  `offsets.topic.num.partitions` partitions, `offsets.topic.replication.factor` replicas
  (Kafka 3.9: creation fails - COORDINATOR_NOT_AVAILABLE - while fewer brokers are alive; no
  capping) and `offsets_topic_configs`: `cleanup.policy=compact`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.group.config import ConsumerGroupConfig, GroupCoordinatorConfig
from wherry.group.coordinator import GroupCoordinator
from wherry.group.records import OFFSETS_TOPIC
from wherry.replication.coordinator_log import (
    CoordinatorPartitionLoader,
    ReplicaCoordinatorStorage,
    in_executor,
)
from wherry.replication.node import ReplicaNode
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminManager
from wherry.server.config import BrokerConfig
from wherry.server.internal_topics import InternalTopic

log = logging.getLogger(__name__)

__all__ = ["GroupsRuntime", "offsets_topic_configs"]


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


class GroupsRuntime:
    """Owns the broker's GroupCoordinator and its asynchronous edges: loading and unloading
    `__consumer_offsets` partitions as their leadership moves, creating the topic, expiry."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        node: ReplicaNode,
        admin: Callable[[], AdminManager],
    ) -> None:
        self.config = config
        self.clock = clock
        self.node = node
        self._admin = admin
        self.storage = ReplicaCoordinatorStorage(
            node.replica_manager,
            OFFSETS_TOPIC,
            clock.now_ms,
            timeout_ms=config.offsets_commit_timeout_ms,
        )
        self.coordinator = GroupCoordinator(
            config.broker_id,
            group_coordinator_config(config),
            self.storage,
            now_ms=clock.now_ms(),
        )
        # Rebalance and session timeouts run on wall-clock time, on the node's ticker, which
        # a newly parked join or heartbeat wakes.
        for purgatory in (
            self.coordinator.rebalance_purgatory,
            self.coordinator.heartbeat_purgatory,
        ):
            purgatory.on_earlier_deadline = node.ticker.wake
        node.ticker.add(self.coordinator, clock.now_ms)
        self.offsets_topic = InternalTopic(
            OFFSETS_TOPIC,
            node.cache,
            admin,
            partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor,
            configs=offsets_topic_configs(config),
            prefix=f"[GroupCoordinator {config.broker_id}]:",
        )
        self._prefix = f"[GroupCoordinator {config.broker_id}]:"

        self.loader = CoordinatorPartitionLoader(
            OFFSETS_TOPIC,
            self.coordinator,
            node.replica_manager,
            clock.now_ms,
            buffer_bytes=config.offsets_load_buffer_size,
            blocking=in_executor,
            prefix=self._prefix,
        )

    async def start(self, store: MetadataStore) -> None:
        # Kafka uses the offsets topic's actual partition count when it exists.
        try:
            data, _ = await store.get(paths.topic_path(OFFSETS_TOPIC))
            count = len(paths.TopicAssignment.from_json(data).partitions)
            if count != self.coordinator.partition_count:
                log.info(
                    "%s %s has %d partitions (offsets.topic.num.partitions is %d)",
                    self._prefix,
                    OFFSETS_TOPIC,
                    count,
                    self.coordinator.partition_count,
                )
            self.coordinator.partition_count = count
        except NoNodeError:
            pass
        self.coordinator.startup()

    async def stop(self) -> None:
        self.offsets_topic.cancel()
        for t in self.loader.cancel():
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self.coordinator.shutdown()

    # --- leadership of __consumer_offsets partitions -----------------------------------------
    def on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        """The replica node's leadership listener (on the event loop)."""
        self.loader.on_leadership_change(became_leader, lost)

    # --- the offsets topic ------------------------------------------------------------------
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
