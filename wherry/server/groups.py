"""Consumer groups in the broker: the GroupCoordinator wired to `__consumer_offsets`.

* Storage: group metadata and offsets are appended (acks=-1) to `__consumer_offsets-<p>`
  through the replica manager; a partition is loaded from its log when this broker becomes its
  leader (requests for its groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile) and unloaded
  when it stops leading it, so the coordinator follows partition leadership.
* The topic is created on first use (FindCoordinator, or a Metadata request naming it) with
  `offsets.topic.num.partitions` partitions, `offsets.topic.replication.factor` replicas
  (Kafka 3.9: creation fails - COORDINATOR_NOT_AVAILABLE - while fewer brokers are alive; no
  capping) and `offsets_topic_configs`: `cleanup.policy=compact`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.group.config import ConsumerGroupConfig, GroupCoordinatorConfig
from wherry.group.coordinator import GroupCoordinator
from wherry.group.records import OFFSETS_TOPIC
from wherry.group.storage import AppendDone, Record
from wherry.protocol.records import build_batch
from wherry.replication.node import ReplicaNode
from wherry.replication.replica_manager import ProduceResult, ReplicaManager
from wherry.replication.txn_state_log import read_partition_log
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminManager
from wherry.server.config import BrokerConfig
from wherry.server.internal_topics import InternalTopic

log = logging.getLogger(__name__)

__all__ = [
    "GroupsRuntime",
    "ReplicaOffsetsStorage",
    "offsets_topic_configs",
    "read_offsets_partition",
]


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


class ReplicaOffsetsStorage:
    """`OffsetsStorage` on the replica manager: one acks=-1 batch per append."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        now_ms: Callable[[], int],
        *,
        timeout_ms: int,
    ) -> None:
        self._rm = replica_manager
        self._now_ms = now_ms
        self._timeout_ms = timeout_ms

    def append(
        self,
        partition: int,
        records: Sequence[Record],
        done: AppendDone,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        now = self._now_ms()
        if producer_id >= 0:
            # TxnOffsetCommit: a transactional batch of the producer (Kafka writes sequence 0;
            # coordinator appends skip the sequence checks, not the epoch check).
            batch = build_batch(
                list(records),
                timestamp_ms=now,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0,
                is_transactional=True,
            )
        else:
            batch = build_batch(list(records), timestamp_ms=now)

        def respond(result: ProduceResult) -> None:
            st = result.get(tp)
            if st is None:
                done(ErrorCode.unknown_topic_or_partition, -1)
            else:
                done(st.error_code, st.base_offset)

        self._rm.append_records(
            timeout_ms=self._timeout_ms,
            required_acks=-1,
            entries={tp: batch},
            respond=respond,
            now_ms=now,
            from_coordinator=True,
        )


def read_offsets_partition(
    replica_manager: ReplicaManager, partition: int, buffer_bytes: int, topic: str = OFFSETS_TOPIC
) -> list[bytes]:
    """The whole log of `__consumer_offsets-<partition>` (or of another internal topic's
    partition) to its end, in chunks of batches."""
    return read_partition_log(replica_manager, topic, partition, buffer_bytes)


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
        self.storage = ReplicaOffsetsStorage(
            node.replica_manager, clock.now_ms, timeout_ms=config.offsets_commit_timeout_ms
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
        self._tasks: set[asyncio.Task[None]] = set()
        self._prefix = f"[GroupCoordinator {config.broker_id}]:"

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
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
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
        leaders = [
            (tp.partition, epoch) for tp, epoch in became_leader if tp.topic == OFFSETS_TOPIC
        ]
        gone = [tp.partition for tp in lost if tp.topic == OFFSETS_TOPIC]
        if leaders or gone:
            self._apply_leadership(leaders, gone)

    def _apply_leadership(self, leaders: list[tuple[int, int]], gone: list[int]) -> None:
        for p in gone:
            self.coordinator.unload_partition(p)
        for p, epoch in leaders:
            if self.coordinator.begin_loading(p, epoch):
                task = asyncio.get_running_loop().create_task(
                    self._load(p, epoch), name=f"load-{OFFSETS_TOPIC}-{p}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _load(self, partition: int, epoch: int) -> None:
        coord = self.coordinator
        loop = asyncio.get_running_loop()
        delay_s = 0.1
        while coord.is_partition_loading(partition):
            started = self.clock.monotonic_ms()
            try:
                chunks = await loop.run_in_executor(
                    None,
                    read_offsets_partition,
                    self.node.replica_manager,
                    partition,
                    self.config.offsets_load_buffer_size,
                )
                if coord.load_partition(partition, chunks, now_ms=self.clock.now_ms(), epoch=epoch):
                    log.debug(
                        "%s Loaded %s-%d in %d ms",
                        self._prefix,
                        OFFSETS_TOPIC,
                        partition,
                        self.clock.monotonic_ms() - started,
                    )
                return
            except Exception:
                # Keep answering COORDINATOR_LOAD_IN_PROGRESS rather than lose offsets.
                log.exception(
                    "%s Error loading offsets from %s-%d; retrying",
                    self._prefix,
                    OFFSETS_TOPIC,
                    partition,
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)

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
