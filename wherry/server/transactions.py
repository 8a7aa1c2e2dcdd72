"""Transactions in the broker: the TransactionCoordinator wired to `__transaction_state`.

* Storage and loading (`replication/coordinator_log.py`, which the simulation runs too):
  transaction state records are appended (acks=-1) to `__transaction_state-<p>` through the
  replica manager; a partition is loaded from its log when this broker becomes its leader and
  unloaded when it stops leading it, so the coordinator follows partition leadership.
* The topic is created on first use (FindCoordinator for a transactional id) with
  `transaction.state.log.num.partitions` partitions, `transaction.state.log.replication.factor`
  replicas (as for `__consumer_offsets`, Kafka 3.9 does not cap it: creation fails while fewer
  brokers are alive; the quickstart defaults and `wherry dev` set it to what the cluster has)
  and Kafka's transactionTopicConfigs.
* Markers: `replication/txn_markers.py`, over `OutboundConnection`s to the inter-broker
  listener. Timeouts and expiry run on the replica node's ticker, on
  wall-clock time (`TransactionCoordinator.advance_clock`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.outbound.connection import Connect, OutboundConnection
from wherry.outbound.security import ClientSecurity
from wherry.replication.coordinator_log import (
    CoordinatorPartitionLoader,
    ReplicaCoordinatorStorage,
    in_executor,
)
from wherry.replication.node import ReplicaNode
from wherry.replication.txn_markers import TxnMarkerChannelManager
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminManager
from wherry.server.config import BrokerConfig
from wherry.server.internal_topics import InternalTopic
from wherry.txn.coordinator import TransactionCoordinator, TxnCoordinatorConfig
from wherry.txn.records import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

__all__ = ["TransactionsRuntime", "transaction_topic_configs"]


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
        self.storage = ReplicaCoordinatorStorage(
            node.replica_manager,
            TRANSACTION_STATE_TOPIC,
            clock.now_ms,
            timeout_ms=config.controller_socket_timeout_ms,
        )
        timeout_s = config.controller_socket_timeout_ms / 1000

        def connect_to(_broker_id: int, host: str, port: int) -> Connect:
            return OutboundConnection(
                host,
                port,
                connect_timeout_s=timeout_s,
                request_timeout_s=timeout_s,
                security=security(),
            ).connect

        self.markers = TxnMarkerChannelManager(config.broker_id, node.cache, clock, connect_to)
        self.coordinator = TransactionCoordinator(
            config.broker_id,
            txn_coordinator_config(config),
            self.storage,
            self.markers,
            now_ms=clock.now_ms(),
        )
        self.markers.coordinator = self.coordinator
        node.ticker.add(self.coordinator, clock.now_ms)

        self.loader = CoordinatorPartitionLoader(
            TRANSACTION_STATE_TOPIC,
            self.coordinator,
            node.replica_manager,
            clock.now_ms,
            buffer_bytes=config.transaction_state_log_load_buffer_size,
            blocking=in_executor,
            prefix=f"[TransactionCoordinator id={config.broker_id}]",
        )
        self.topic = InternalTopic(
            TRANSACTION_STATE_TOPIC,
            node.cache,
            admin,
            partitions=config.transaction_state_log_num_partitions,
            replication_factor=config.transaction_state_log_replication_factor,
            configs=transaction_topic_configs(config),
            prefix=f"[TransactionCoordinator id={config.broker_id}]",
        )
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
        self.topic.cancel()
        for t in self.loader.cancel():
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
        self.loader.on_leadership_change(became_leader, lost)

    # --- the topic ------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        """Start creating `__transaction_state` unless it exists or is being created."""
        self.topic.ensure()
