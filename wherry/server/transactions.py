"""Transactions in the broker: the transaction coordinator (`coordinator/transactions.py`,
on the coordinator runtime) configured from the broker's config, with the broker's own edges.

* Storage, loading and the marker sender: `coordinator/`, which the simulation runs too. The
  markers go over `OutboundConnection`s to the inter-broker listener.
* The topic is created on first use (FindCoordinator for a transactional id) with
  `transaction.state.log.num.partitions` partitions, `transaction.state.log.replication.factor`
  replicas (as for `__consumer_offsets`, Kafka 3.9 does not cap it: creation fails while fewer
  brokers are alive; the quickstart defaults and `wherry dev` set it to what the cluster has)
  and Kafka's transactionTopicConfigs.
"""

from __future__ import annotations

from wherry.coordination.store import MetadataStore
from wherry.coordinator.transactions import TxnCoordinatorHost
from wherry.server.config import BrokerConfig
from wherry.server.coordinator_edges import CoordinatorEdges, TopicSpec
from wherry.server.internal_topics import adopt_stored_partition_count
from wherry.txn.coordinator import TxnCoordinatorConfig
from wherry.txn.records import TRANSACTION_STATE_TOPIC

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
        transaction_version=config.transaction_version,
    )


class TransactionsRuntime(TxnCoordinatorHost):
    """The broker's transaction coordinator: the topic's creation and partition count, the
    marker sender's connections."""

    def __init__(self, edges: CoordinatorEdges) -> None:
        config = edges.config
        super().__init__(
            config.broker_id,
            txn_coordinator_config(config),
            edges.node,
            edges.clock,
            edges.connect_to,
            timeout_ms=config.controller_socket_timeout_ms,
            buffer_bytes=config.transaction_state_log_load_buffer_size,
            blocking=edges.blocking,
        )
        self.topic = edges.internal_topic(
            self.runtime,
            TopicSpec(
                partitions=config.transaction_state_log_num_partitions,
                replication_factor=config.transaction_state_log_replication_factor,
                configs=transaction_topic_configs(config),
            ),
        )

    async def start(self, store: MetadataStore) -> None:
        await adopt_stored_partition_count(
            store,
            TRANSACTION_STATE_TOPIC,
            self.coordinator,
            "transaction.state.log.num.partitions",
            self.runtime.prefix,
        )
        self.start_markers()

    async def stop(self) -> None:
        self.topic.cancel()
        await super().stop()

    def ensure_topic(self) -> None:
        """Start creating `__transaction_state` unless it exists or is being created."""
        self.topic.ensure()
