"""The transaction marker sender (Kafka's TransactionMarkerChannelManager).

The coordinator hands over each ended transaction (`PendingMarkers`); one asyncio task sends
WriteTxnMarkers v1 to the partition leaders, one request per destination broker per round
carrying every marker due there, through an `outbound.RequestClient` per broker over the
connections `connect_to` opens (the broker's: `OutboundConnection`s to the inter-broker
listener with its `client_security`; the simulation's: its simulated network), and retries
until every partition is written:

* a partition the metadata cache no longer knows (its topic was deleted) is dropped, as Kafka
  skips partitions without a leader endpoint;
* a leader that is unknown or not alive, a lost connection, NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT,
  KAFKA_STORAGE_ERROR: the leader is resolved again from the cache and the marker resent
  after `retry.backoff.ms` (100 ms);
* INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED: a newer coordinator or producer
  epoch took over; this coordinator stops sending this transaction's markers (Kafka's
  abortSending).

`write_txn_marker` is the receiving side (the partition leader's part of KafkaApis'
handleWriteTxnMarkersRequest): one control batch per partition, appended as the leader;
`marker_answer` is one marker's entry of the WriteTxnMarkers answer (the broker's handler and
the simulation's marker connection both answer with it).

When a transaction's partitions are all done the coordinator writes its Complete* record
(`TransactionCoordinator.markers_written`). Markers of a `__transaction_state` partition this
broker no longer leads are dropped (`remove_partition`); its new leader resends them on load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.outbound.client import RequestClient, RequestError
from wherry.outbound.connection import Connect
from wherry.protocol.records import build_control_batch
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.node import ReplicaNode
from wherry.runtime.clock import Clock
from wherry.runtime.tasks import cancel_and_wait, wait_event
from wherry.txn.coordinator import TransactionCoordinator
from wherry.txn.storage import PendingMarkers

log = logging.getLogger(__name__)

__all__ = [
    "WRITE_TXN_MARKERS_KEY",
    "BrokerClients",
    "ConnectTo",
    "TxnMarkerChannelManager",
    "marker_answer",
    "write_txn_marker",
]

ConnectTo = Callable[[int, str, int], Connect]
"""(broker id, host, port) -> how to open a connection to that broker."""


class BrokerClients:
    """One `RequestClient` per peer broker at its current address (a moved broker's old
    client closed), over the connections `connect_to` opens."""

    def __init__(self, connect_to: ConnectTo, client_id: str) -> None:
        self._connect_to = connect_to
        self._client_id = client_id
        self._clients: dict[tuple[int, str, int], RequestClient] = {}

    def get(self, broker_id: int, host: str, port: int) -> RequestClient:
        key = (broker_id, host, port)
        client = self._clients.get(key)
        if client is None:
            for old in [k for k in self._clients if k[0] == broker_id]:
                self._clients.pop(old).close()
            client = self._clients[key] = RequestClient(
                self._connect_to(broker_id, host, port),
                client_id=self._client_id,
                peer=f"broker {broker_id} ({host}:{port})",
            )
        return client

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()

    def forget(self) -> None:
        """The process dies: nothing is closed, nothing more is sent."""
        self._clients.clear()

WRITE_TXN_MARKERS_KEY = 27
WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_MS = 100
_ABANDON = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


class TxnMarkerChannelManager:
    def __init__(
        self,
        broker_id: int,
        cache: MetadataCache,
        clock: Clock,
        connect_to: ConnectTo,
    ) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.clock = clock
        self._clients = BrokerClients(connect_to, f"broker-{broker_id}-txn-marker-sender")
        self.coordinator: TransactionCoordinator  # set by the runtime
        # Each transaction's partitions still without their marker.
        self._pending: dict[PendingMarkers, set[TopicPartition]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.requests_sent = 0
        self._prefix = f"[TransactionMarkerChannelManager id={broker_id}]"

    # --- the coordinator's side -----------------------------------------------------------
    def add_markers(self, pending: PendingMarkers) -> None:
        self._pending[pending] = set(pending.partitions)
        self._wake.set()
        if not pending.partitions:  # nothing to write: complete at once
            self._wake.set()

    def remove_partition(self, txn_partition: int) -> None:
        for p in [p for p in self._pending if p.txn_partition == txn_partition]:
            del self._pending[p]

    def pending(self) -> dict[PendingMarkers, set[TopicPartition]]:
        return {p: set(tps) for p, tps in self._pending.items()}

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"txn-marker-sender-{self.broker_id}"
        )

    async def stop(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await cancel_and_wait(self._task)
            self._task = None
        self._clients.close()
        self._pending.clear()

    def abandon(self) -> None:
        """The process dies: the sender stops at once, nothing more is sent or awaited."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._clients.forget()
        self._pending.clear()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                retry = await self.send_round()
            except Exception:
                log.exception("%s marker round failed", self._prefix)
                retry = True
            if retry:
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
            elif not self._wake.is_set():
                await wait_event(self._wake, 1.0)

    # --- one round ------------------------------------------------------------------------
    def _finish_done(self) -> None:
        for p in [p for p, tps in self._pending.items() if not tps]:
            del self._pending[p]
            self.coordinator.markers_written(p, self.clock.now_ms())

    async def send_round(self) -> bool:
        """Send every pending marker once; True if some remain to retry."""
        by_broker: dict[int, list[tuple[PendingMarkers, list[TopicPartition]]]] = {}
        for p, tps in list(self._pending.items()):
            if not self.coordinator.is_current(p):
                del self._pending[p]
                continue
            dest: dict[int, list[TopicPartition]] = {}
            for tp in sorted(tps):
                st = self.cache.partition(tp.topic, tp.partition)
                if st is None:
                    log.info(
                        "%s no leader for %s (deleted?); skipping its marker for %s",
                        self._prefix,
                        tp,
                        p.transactional_id,
                    )
                    tps.discard(tp)
                    self.coordinator.marker_written(p, tp)
                    continue
                dest.setdefault(st.leader, []).append(tp)
            for leader, leader_tps in dest.items():
                by_broker.setdefault(leader, []).append((p, leader_tps))
        self._finish_done()
        if not by_broker:
            return False
        results = await asyncio.gather(
            *(self._send(b, entries) for b, entries in by_broker.items())
        )
        self._finish_done()
        return not all(results) or bool(self._pending)

    async def _send(
        self, broker_id: int, entries: list[tuple[PendingMarkers, list[TopicPartition]]]
    ) -> bool:
        """One WriteTxnMarkers to `broker_id`; True if every marker in it was written."""
        ep = self.cache.endpoint(broker_id) if broker_id >= 0 else None
        if ep is None:
            return False  # leader unknown or not alive: resolve again next round
        markers = []
        for p, tps in entries:
            topics: dict[str, list[int]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(tp.partition)
            markers.append(
                {
                    "producer_id": p.producer_id,
                    "producer_epoch": p.producer_epoch,
                    "transaction_result": p.commit,
                    "topics": [
                        {"name": t, "partition_indexes": ps} for t, ps in sorted(topics.items())
                    ],
                    "coordinator_epoch": p.coordinator_epoch,
                }
            )
        client = self._clients.get(broker_id, ep.host, ep.port)
        self.requests_sent += 1
        try:
            resp = await client.call(
                WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, {"markers": markers}
            )
        except RequestError as e:
            log.info("%s WriteTxnMarkers to broker %d failed: %s", self._prefix, broker_id, e)
            return False
        by_pid = {p.producer_id: p for p, _ in entries}
        ok = True
        for result in resp.markers:
            found = by_pid.get(result.producer_id)
            if found is None or found not in self._pending:
                continue
            p = found
            remaining = self._pending[p]
            for topic in result.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    err = ErrorCode(part.error_code)
                    if err == ErrorCode.none:
                        remaining.discard(tp)
                        self.coordinator.marker_written(p, tp)
                    elif err in _ABANDON:
                        log.info(
                            "%s %s for the marker of %s on %s: not sending its markers",
                            self._prefix,
                            err.name,
                            p.transactional_id,
                            tp,
                        )
                        self._pending.pop(p, None)
                        break
                    else:
                        ok = False
                        log.debug(
                            "%s marker of %s on %s: %s; retrying",
                            self._prefix,
                            p.transactional_id,
                            tp,
                            err.name,
                        )
        return ok

async def write_txn_marker(
    node: ReplicaNode, marker: Any, now_ms: int, timeout_ms: int
) -> dict[TopicPartition, ErrorCode]:
    """Write one WriteTxnMarkers entry (`producer_id`, `producer_epoch`, `transaction_result`,
    `topics`, `coordinator_epoch`) on this broker: a partition without a local replica gets
    UNKNOWN_TOPIC_OR_PARTITION; the others one control batch appended as the leader with
    acks=all semantics (`min.insync.replicas`, answer once the ISR has it); their errors are
    the append's (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED, REQUEST_TIMED_OUT)."""
    tps = [TopicPartition(t.name, p) for t in marker.topics for p in t.partition_indexes]
    errors: dict[TopicPartition, ErrorCode] = {}
    entries: dict[TopicPartition, bytes | None] = {}
    for tp in tps:
        if node.replica_manager.get_partition(tp) is None:
            errors[tp] = ErrorCode.unknown_topic_or_partition
            continue
        entries[tp] = build_control_batch(
            commit=bool(marker.transaction_result),
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp_ms=now_ms,
        )
    if entries:
        statuses = await node.append(
            entries, required_acks=-1, timeout_ms=timeout_ms, from_coordinator=True
        )
        for tp in entries:
            st = statuses.get(tp)
            errors[tp] = ErrorCode.unknown_server_error if st is None else st.error_code
    return {tp: errors[tp] for tp in tps}


def marker_answer(producer_id: int, errors: Mapping[TopicPartition, ErrorCode]) -> dict[str, Any]:
    """One marker's entry of a WriteTxnMarkers answer: each partition's error, by topic."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, code in errors.items():
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": code}
        )
    return {
        "producer_id": producer_id,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
