"""Transactions in the broker: the TransactionCoordinator wired to `__transaction_state`.

* Storage: transaction state records are appended (acks=-1) to `__transaction_state-<p>`
  through the replica manager; a partition is loaded from its log when this broker becomes its
  leader (requests for its transactional ids get COORDINATOR_LOAD_IN_PROGRESS meanwhile;
  transactions found in PrepareCommit/PrepareAbort resume their markers) and unloaded when it
  stops leading it (NOT_COORDINATOR), so the coordinator follows partition leadership. The
  partition's leader epoch is the coordinator epoch the markers carry.
* The topic is created on first use (FindCoordinator for a transactional id) with
  `transaction.state.log.num.partitions` partitions, `transaction.state.log.replication.factor`
  replicas (as for `__consumer_offsets`, Kafka 3.9 does not cap it: creation fails while fewer
  brokers are alive; the quickstart defaults and `wherry dev` set it to what the cluster has)
  and Kafka's transactionTopicConfigs.
* Markers: `server/txn_markers.py`. Timeouts and expiry run on the replica node's ticker, on
  wall-clock time (`TransactionCoordinator.advance_clock`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.outbound.security import ClientSecurity
from wherry.protocol.records import build_batch
from wherry.replication.node import ReplicaNode
from wherry.replication.replica_manager import ProduceResult, ReplicaManager
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminError, AdminManager
from wherry.server.config import BrokerConfig
from wherry.server.groups import read_offsets_partition
from wherry.server.txn_markers import TxnMarkerChannelManager
from wherry.txn.coordinator import TransactionCoordinator, TxnCoordinatorConfig
from wherry.txn.records import TRANSACTION_STATE_TOPIC
from wherry.txn.storage import AppendDone, Record

log = logging.getLogger(__name__)

__all__ = ["ReplicaTxnStorage", "TransactionsRuntime", "transaction_topic_configs"]


def transaction_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """The configs `__transaction_state` is created with (Kafka's transactionTopicConfigs)."""
    return {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(config.transaction_state_log_min_isr),
        "segment.bytes": str(config.transaction_state_log_segment_bytes),
        "unclean.leader.election.enable": "false",
        "compression.type": "uncompressed",
    }


def txn_coordinator_config(config: BrokerConfig) -> TxnCoordinatorConfig:
    return TxnCoordinatorConfig(
        transaction_max_timeout_ms=config.transaction_max_timeout_ms,
        transactional_id_expiration_ms=config.transactional_id_expiration_ms,
        abort_timed_out_transaction_cleanup_interval_ms=(
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        ),
        remove_expired_transaction_cleanup_interval_ms=(
            config.transaction_remove_expired_transaction_cleanup_interval_ms
        ),
        transaction_state_log_num_partitions=config.transaction_state_log_num_partitions,
    )


class ReplicaTxnStorage:
    """`TxnStorage` on the replica manager: one acks=-1 batch per append."""

    def __init__(
        self, replica_manager: ReplicaManager, now_ms: Callable[[], int], *, timeout_ms: int
    ) -> None:
        self._rm = replica_manager
        self._now_ms = now_ms
        self._timeout_ms = timeout_ms

    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        now = self._now_ms()
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
        )


class TransactionsRuntime:
    """Owns the broker's TransactionCoordinator and its asynchronous edges: loading and
    unloading `__transaction_state` partitions as their leadership moves, creating the topic,
    the marker sender and the timers."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        node: ReplicaNode,
        admin: Callable[[], AdminManager],
        security: Callable[[], ClientSecurity],
    ) -> None:
        self.config = config
        self.clock = clock
        self.node = node
        self._admin = admin
        self.storage = ReplicaTxnStorage(
            node.replica_manager, clock.now_ms, timeout_ms=config.controller_socket_timeout_ms
        )
        self.markers = TxnMarkerChannelManager(
            config.broker_id,
            node.cache,
            clock,
            security,
            request_timeout_ms=config.controller_socket_timeout_ms,
        )
        self.coordinator = TransactionCoordinator(
            config.broker_id,
            txn_coordinator_config(config),
            self.storage,
            self.markers,
            now_ms=clock.now_ms(),
        )
        self.markers.coordinator = self.coordinator
        node.ticker.add(self.coordinator, clock.now_ms)
        self._create_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._prefix = f"[TransactionCoordinator id={config.broker_id}]"

    async def start(self, store: MetadataStore) -> None:
        # Kafka uses the topic's actual partition count when it exists.
        try:
            data, _ = await store.get(paths.topic_path(TRANSACTION_STATE_TOPIC))
            self.coordinator.partition_count = len(
                paths.TopicAssignment.from_json(data).partitions
            )
        except NoNodeError:
            pass
        self.markers.start()

    async def stop(self) -> None:
        for t in list(self._tasks) + ([self._create_task] if self._create_task else []):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.markers.stop()
        self.coordinator.shutdown()

    # --- leadership of __transaction_state partitions -------------------------------------
    def on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        """The replica node's leadership listener (on the event loop)."""
        for tp in lost:
            if tp.topic == TRANSACTION_STATE_TOPIC:
                self.coordinator.unload_partition(tp.partition)
        for tp, epoch in became_leader:
            if tp.topic == TRANSACTION_STATE_TOPIC and self.coordinator.begin_loading(
                tp.partition, epoch
            ):
                task = asyncio.get_running_loop().create_task(
                    self._load(tp.partition, epoch), name=f"load-{tp}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _load(self, partition: int, epoch: int) -> None:
        coord = self.coordinator
        loop = asyncio.get_running_loop()
        delay_s = 0.1
        while coord.is_partition_loading(partition):
            try:
                chunks = await loop.run_in_executor(
                    None,
                    read_offsets_partition,
                    self.node.replica_manager,
                    partition,
                    self.config.transaction_state_log_load_buffer_size,
                    TRANSACTION_STATE_TOPIC,
                )
                coord.load_partition(partition, chunks, now_ms=self.clock.now_ms(), epoch=epoch)
                return
            except Exception:
                log.exception(
                    "%s Error loading %s-%d; retrying",
                    self._prefix,
                    TRANSACTION_STATE_TOPIC,
                    partition,
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)

    # --- the topic ------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        """Start creating `__transaction_state` unless it exists or is being created."""
        if self.node.cache.contains_topic(TRANSACTION_STATE_TOPIC):
            return
        if self._create_task is not None and not self._create_task.done():
            return
        self._create_task = asyncio.get_running_loop().create_task(
            self._create_topic(), name=f"create-{TRANSACTION_STATE_TOPIC}"
        )

    async def _create_topic(self) -> None:
        cfg = self.config
        try:
            await self._admin().create_topic(
                TRANSACTION_STATE_TOPIC,
                num_partitions=cfg.transaction_state_log_num_partitions,
                replication_factor=cfg.transaction_state_log_replication_factor,
                configs=transaction_topic_configs(cfg),
            )
            self.coordinator.partition_count = cfg.transaction_state_log_num_partitions
            log.info(
                "%s Created %s with %d partitions and replication factor %d",
                self._prefix,
                TRANSACTION_STATE_TOPIC,
                cfg.transaction_state_log_num_partitions,
                cfg.transaction_state_log_replication_factor,
            )
        except AdminError as e:
            if e.error_code != ErrorCode.topic_already_exists:
                log.warning(
                    "%s Could not create %s: %s (%s)",
                    self._prefix,
                    TRANSACTION_STATE_TOPIC,
                    e.error_code.name,
                    e.message,
                )
        except Exception:
            log.exception("%s Could not create %s", self._prefix, TRANSACTION_STATE_TOPIC)
