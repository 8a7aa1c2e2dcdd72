"""The transaction coordinator on the coordinator runtime: `txn.TransactionCoordinator` on
`__transaction_state`, with its marker sender (`coordinator/txn_markers.py`), which writes the
markers of this broker's own partitions in process.

Transaction state records are appended (acks=-1) to `__transaction_state-<p>`; a partition
is loaded when this broker becomes its leader (once its high watermark reaches its log end)
and unloaded when it stops leading it, so the coordinator follows the partition's leadership
and its new leader finishes what the old one left (markers, Complete* records). Timeouts,
expiry and the deadlines of adds waiting for a transaction's change run on the coordinator's
clock on the node's ticker. `connect_to` opens the marker
sender's connections (the broker's to the inter-broker listener; the simulation's over its
network), and those of the partition leader's questions to the coordinators of other
brokers (`txn_verification.py`: transactions v2's implicit partition add, the older clients'
verification).
"""

from __future__ import annotations

from wherry.coordinator.partition_log import Blocking, inline
from wherry.coordinator.runtime import CoordinatorRuntime
from wherry.coordinator.txn_markers import (
    ConnectTo,
    LocalMarkers,
    OnOffsetsMarkers,
    TxnMarkerChannelManager,
)
from wherry.coordinator.txn_verification import TxnPartitionVerifier
from wherry.replication.node import ReplicaNode
from wherry.runtime.clock import Clock
from wherry.txn.coordinator import TransactionCoordinator, TxnCoordinatorConfig
from wherry.txn.records import TRANSACTION_STATE_TOPIC

__all__ = ["TxnCoordinatorHost"]


class TxnCoordinatorHost:
    """A replica node's transaction coordinator, its marker sender and its runtime."""

    def __init__(
        self,
        broker_id: int,
        config: TxnCoordinatorConfig,
        node: ReplicaNode,
        clock: Clock,
        connect_to: ConnectTo,
        *,
        timeout_ms: int,
        buffer_bytes: int,
        blocking: Blocking[list[bytes]] = inline,
    ) -> None:
        self.runtime = CoordinatorRuntime(
            TRANSACTION_STATE_TOPIC,
            node,
            clock.now_ms,
            timeout_ms=timeout_ms,
            buffer_bytes=buffer_bytes,
            blocking=blocking,
            prefix=f"[TransactionCoordinator id={broker_id}]",
        )
        self.markers = TxnMarkerChannelManager(broker_id, node.cache, clock, connect_to)
        self.coordinator = TransactionCoordinator(
            broker_id, config, self.runtime.storage, self.markers, now_ms=clock.now_ms()
        )
        self.markers.coordinator = self.coordinator
        self.verifier = TxnPartitionVerifier(
            broker_id, node.cache, self.coordinator, connect_to, clock.now_ms
        )
        self.local_markers = LocalMarkers(node, self.verifier.guards.marker_written, timeout_ms)
        self.markers.local = self.local_markers
        self.runtime.serve(self.coordinator, clocked=self.coordinator)
        self.coordinator.waits.on_earlier_deadline = node.ticker.earlier_deadline

    def attach_groups(self, on_transaction_completed: OnOffsetsMarkers) -> None:
        """The group coordinator's hook for markers written on `__consumer_offsets`
        (`GroupCoordinator.on_transaction_completed`): from then on this broker's own
        `__consumer_offsets` partitions get their markers in process too."""
        self.local_markers.on_offsets = on_transaction_completed

    def start_markers(self) -> None:
        """Start the marker sender (on the running loop)."""
        self.markers.start()

    def abandon(self) -> None:
        """The process dies: nothing more is sent or loaded."""
        self.markers.abandon()
        self.verifier.forget()
        self.runtime.abandon()

    async def stop(self) -> None:
        await self.runtime.stop()
        await self.markers.stop()
        self.verifier.close()
        self.coordinator.shutdown()
