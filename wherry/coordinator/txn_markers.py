"""The transaction marker sender (Kafka's TransactionMarkerChannelManager).

The coordinator hands over each ended transaction (`PendingMarkers`) and the sender writes its
markers at once, without waiting for the other transactions' markers:

* a partition this broker leads is written in process (`LocalMarkers`: what this broker's
  WriteTxnMarkers handler does for a marker, without the round trip to itself);
* every other one goes to its leader in a WriteTxnMarkers v1 request, through an
  `outbound.RequestClient` per broker over the connections `connect_to` opens (the broker's:
  `OutboundConnection`s to the inter-broker listener with its `client_security`; the
  simulation's: its simulated network). Each destination has one request in flight, carrying
  every marker due there; markers that come meanwhile go in its next request, sent as soon as
  that one is answered, so the leaders are written in parallel and a slow one holds up only
  its own markers.

Each partition is retried until it is written:

* a partition the metadata cache no longer knows (its topic was deleted) is dropped, as Kafka
  skips partitions without a leader endpoint;
* a leader that is unknown or not alive, a lost connection, NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT,
  KAFKA_STORAGE_ERROR: that partition's leader is resolved again from the cache and its marker
  resent after `retry.backoff.ms` (100 ms); the others go on;
* INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED: a newer coordinator or producer
  epoch took over; this coordinator stops sending this transaction's markers (Kafka's
  abortSending).

`write_markers` is the receiving side (the partition leader's part of KafkaApis'
handleWriteTxnMarkersRequest): one control batch per partition, appended as the leader, with
what else a written marker completes (a leader's checks in flight, the group coordinator's
pending transactional offsets); `marker_answer` is one marker's entry of the WriteTxnMarkers
answer (the broker's handler and the simulation's marker connection both answer with it).

When a transaction's partitions are all done the coordinator writes its Complete* record
(`TransactionCoordinator.markers_written`). Markers of a `__transaction_state` partition this
broker no longer leads are dropped (`remove_partition`); its new leader resends them on load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.records import OFFSETS_TOPIC
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
    "LocalMarkers",
    "MarkerWriter",
    "OnOffsetsMarkers",
    "TxnMarkerChannelManager",
    "marker_answer",
    "write_markers",
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
IDLE_WAIT_S = 1.0
_ABANDON = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
Entries = list[tuple[PendingMarkers, list[TopicPartition]]]
MarkerKey = tuple[PendingMarkers, TopicPartition]


class TxnMarkerChannelManager:
    def __init__(
        self,
        broker_id: int,
        cache: MetadataCache,
        clock: Clock,
        connect_to: ConnectTo,
        *,
        local: MarkerWriter | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.clock = clock
        self.local = local
        self._clients = BrokerClients(connect_to, f"broker-{broker_id}-txn-marker-sender")
        self.coordinator: TransactionCoordinator  # set by the runtime
        # Each transaction's partitions still without their marker.
        self._pending: dict[PendingMarkers, set[TopicPartition]] = {}
        self._in_flight: set[MarkerKey] = set()
        self._not_before: dict[MarkerKey, int] = {}  # backing off after a failure
        self._busy: set[int] = set()  # destinations with a request in flight
        self._sends: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.requests_sent = 0
        self.written_here = 0
        self._prefix = f"[TransactionMarkerChannelManager id={broker_id}]"

    # --- the coordinator's side -----------------------------------------------------------
    def add_markers(self, pending: PendingMarkers) -> None:
        self._pending[pending] = set(pending.partitions)
        self._wake.set()

    def remove_partition(self, txn_partition: int) -> None:
        for p in [p for p in self._pending if p.txn_partition == txn_partition]:
            self._drop(p)

    def pending(self) -> dict[PendingMarkers, set[TopicPartition]]:
        return {p: set(tps) for p, tps in self._pending.items()}

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"txn-marker-sender-{self.broker_id}"
        )

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._sends) if t is not None]
        for t in tasks:
            with contextlib.suppress(Exception):
                await cancel_and_wait(t)
        self._task = None
        self._clients.close()
        self._clear()

    def abandon(self) -> None:
        """The process dies: the sender stops at once, nothing more is sent or awaited."""
        for t in (self._task, *self._sends):
            if t is not None:
                t.cancel()
        self._task = None
        self._clients.forget()
        self._clear()

    def _clear(self) -> None:
        self._pending.clear()
        self._in_flight.clear()
        self._not_before.clear()
        self._busy.clear()
        self._sends.clear()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                wait_ms = self.dispatch()
            except Exception:
                log.exception("%s sending markers failed", self._prefix)
                wait_ms = RETRY_BACKOFF_MS
            if not self._wake.is_set():
                await wait_event(
                    self._wake, IDLE_WAIT_S if wait_ms is None else max(wait_ms, 1) / 1000
                )

    # --- sending --------------------------------------------------------------------------
    def dispatch(self) -> int | None:
        """Start writing every marker that is due and not in flight: in process for this
        broker's partitions, in a request per leader with none in flight. Returns the ms until
        the next backoff ends (None: no marker is backing off)."""
        now = self.clock.now_ms()
        wait: int | None = None
        remote: dict[int, Entries] = {}
        here: Entries = []
        for p, tps in list(self._pending.items()):
            if not self.coordinator.is_current(p):
                self._drop(p)
                continue
            dest: dict[int, list[TopicPartition]] = {}
            for tp in sorted(tps):
                key = (p, tp)
                if key in self._in_flight:
                    continue
                due = self._not_before.get(key)
                if due is not None:
                    if due > now:
                        wait = due - now if wait is None else min(wait, due - now)
                        continue
                    del self._not_before[key]
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
                leader = st.leader
                if leader == self.broker_id and self.local is not None and self.local.takes(tp):
                    dest.setdefault(LOCAL, []).append(tp)
                elif leader < 0 or self.cache.endpoint(leader) is None:
                    # Unknown or not alive: resolve it again after the backoff.
                    self._not_before[key] = now + RETRY_BACKOFF_MS
                    wait = RETRY_BACKOFF_MS if wait is None else min(wait, RETRY_BACKOFF_MS)
                elif leader not in self._busy:  # else: in its next request
                    dest.setdefault(leader, []).append(tp)
            for leader, leader_tps in dest.items():
                self._in_flight.update((p, tp) for tp in leader_tps)
                if leader == LOCAL:
                    here.append((p, leader_tps))
                else:
                    remote.setdefault(leader, []).append((p, leader_tps))
        self._finish_done()
        for entry in here:
            self._spawn(self._write_here(*entry), f"txn-markers-here-{self.broker_id}")
        for broker_id, entries in remote.items():
            self._busy.add(broker_id)
            self._spawn(self._send(broker_id, entries), f"txn-markers-to-{broker_id}")
        return wait

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    def _finish_done(self) -> None:
        for p in [p for p, tps in self._pending.items() if not tps]:
            del self._pending[p]
            self.coordinator.markers_written(p, self.clock.now_ms())

    def _drop(self, p: PendingMarkers) -> None:
        self._pending.pop(p, None)
        for key in [k for k in self._not_before if k[0] == p]:
            del self._not_before[key]

    def _done(self, p: PendingMarkers, tp: TopicPartition, err: ErrorCode) -> None:
        """One partition's marker came back with `err` (NONE: written)."""
        self._in_flight.discard((p, tp))
        remaining = self._pending.get(p)
        if remaining is None:
            return  # dropped meanwhile
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
            self._drop(p)
        else:
            log.debug(
                "%s marker of %s on %s: %s; retrying", self._prefix, p.transactional_id, tp,
                err.name,
            )
            self._not_before[(p, tp)] = self.clock.now_ms() + RETRY_BACKOFF_MS

    def _answered(self, entries: Entries, errors: Mapping[MarkerKey, ErrorCode]) -> None:
        for p, tps in entries:
            for tp in tps:
                # A partition missing from the answer is retried.
                self._done(p, tp, errors.get((p, tp), ErrorCode.unknown_server_error))
        self._finish_done()
        self._wake.set()

    async def _write_here(self, p: PendingMarkers, tps: list[TopicPartition]) -> None:
        assert self.local is not None
        errors: dict[MarkerKey, ErrorCode] = {}
        try:
            written = await self.local.write(p, tps, self.clock.now_ms())
            errors = {(p, tp): err for tp, err in written.items()}
            self.written_here += 1
        except Exception:
            log.exception("%s writing markers of %s here failed", self._prefix, p.transactional_id)
        self._answered([(p, tps)], errors)

    async def _send(self, broker_id: int, entries: Entries) -> None:
        """One WriteTxnMarkers to `broker_id` with `entries`."""
        errors: dict[MarkerKey, ErrorCode] = {}
        try:
            errors = await self._request(broker_id, entries)
        except Exception:
            log.exception("%s WriteTxnMarkers to broker %d failed", self._prefix, broker_id)
        finally:
            self._busy.discard(broker_id)
        self._answered(entries, errors)

    async def _request(self, broker_id: int, entries: Entries) -> dict[MarkerKey, ErrorCode]:
        ep = self.cache.endpoint(broker_id)
        if ep is None:
            return {}  # gone meanwhile: every marker retried
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
            return {}
        by_pid = {p.producer_id: p for p, _ in entries}
        errors: dict[MarkerKey, ErrorCode] = {}
        for result in resp.markers:
            found = by_pid.get(result.producer_id)
            if found is None:
                continue
            for topic in result.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    errors[(found, tp)] = ErrorCode(part.error_code)
        return errors


LOCAL = -2  # `dispatch`'s destination for this broker's own partitions
OnMarker = Callable[[TopicPartition, int], None]
OnOffsetsMarkers = Callable[[int, list[int], bool], None]


class MarkerWriter(Protocol):
    """What writes this broker's own partitions' markers in process (`LocalMarkers`)."""

    def takes(self, tp: TopicPartition) -> bool:
        """Whether `tp`'s marker is written in process (else it goes over the wire)."""
        ...

    async def write(
        self, p: PendingMarkers, tps: list[TopicPartition], now_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        """Write `p`'s markers on `tps`; each partition's error (NONE: written)."""
        ...


class LocalMarkers:
    """The markers of this broker's own partitions, written in process: what its
    WriteTxnMarkers handler does for them (`write_markers`), without the round trip to
    itself. `__consumer_offsets` partitions are taken once the group coordinator's hook is
    given (`on_offsets`); until then they go through the handler, which has it."""

    def __init__(
        self,
        node: ReplicaNode,
        on_marker: OnMarker,
        timeout_ms: int,
        on_offsets: OnOffsetsMarkers | None = None,
    ) -> None:
        self.node = node
        self.on_marker = on_marker
        self.timeout_ms = timeout_ms
        self.on_offsets = on_offsets

    def takes(self, tp: TopicPartition) -> bool:
        return self.on_offsets is not None or tp.topic != OFFSETS_TOPIC

    async def write(
        self, p: PendingMarkers, tps: list[TopicPartition], now_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        return await write_markers(
            self.node,
            tps,
            producer_id=p.producer_id,
            producer_epoch=p.producer_epoch,
            commit=p.commit,
            coordinator_epoch=p.coordinator_epoch,
            now_ms=now_ms,
            timeout_ms=self.timeout_ms,
            on_marker=self.on_marker,
            on_offsets=self.on_offsets,
        )


async def write_markers(
    node: ReplicaNode,
    tps: list[TopicPartition],
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    now_ms: int,
    timeout_ms: int,
    on_marker: OnMarker | None = None,
    on_offsets: OnOffsetsMarkers | None = None,
) -> dict[TopicPartition, ErrorCode]:
    """Write one transaction's markers on this broker: a partition without a local replica
    gets UNKNOWN_TOPIC_OR_PARTITION; the others one control batch appended as the leader with
    acks=all semantics (`min.insync.replicas`, answer once the ISR has it); their errors are
    the append's (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED, REQUEST_TIMED_OUT). `on_marker(tp, producer id)` first
    for each partition (a leader's check of the producer's transaction in flight there is
    void from then on); `on_offsets(producer id, partitions, commit)` for the
    `__consumer_offsets` partitions written (the group coordinator's pending transactional
    offsets of the producer complete; an error there fails those partitions)."""
    errors: dict[TopicPartition, ErrorCode] = {}
    entries: dict[TopicPartition, bytes | None] = {}
    for tp in tps:
        if on_marker is not None:
            on_marker(tp, producer_id)
        if node.replica_manager.get_partition(tp) is None:
            errors[tp] = ErrorCode.unknown_topic_or_partition
            continue
        entries[tp] = build_control_batch(
            commit=commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=now_ms,
        )
    if entries:
        statuses = await node.append(
            entries, required_acks=-1, timeout_ms=timeout_ms, from_coordinator=True
        )
        for tp in entries:
            st = statuses.get(tp)
            errors[tp] = ErrorCode.unknown_server_error if st is None else st.error_code
    offsets = [
        tp.partition for tp in entries if tp.topic == OFFSETS_TOPIC and errors[tp] == ErrorCode.none
    ]
    if offsets and on_offsets is not None:
        try:
            on_offsets(producer_id, offsets, commit)
        except Exception:
            log.exception(
                "Received an exception while trying to update the offsets cache on "
                "transaction marker append"
            )
            for partition in offsets:
                errors[TopicPartition(OFFSETS_TOPIC, partition)] = ErrorCode.unknown_server_error
    return {tp: errors[tp] for tp in tps}


async def write_txn_marker(
    node: ReplicaNode,
    marker: Any,
    now_ms: int,
    timeout_ms: int,
    *,
    on_marker: OnMarker | None = None,
    on_offsets: OnOffsetsMarkers | None = None,
) -> dict[TopicPartition, ErrorCode]:
    """`write_markers` of one WriteTxnMarkers entry (`producer_id`, `producer_epoch`,
    `transaction_result`, `topics`, `coordinator_epoch`)."""
    return await write_markers(
        node,
        [TopicPartition(t.name, p) for t in marker.topics for p in t.partition_indexes],
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        commit=bool(marker.transaction_result),
        coordinator_epoch=marker.coordinator_epoch,
        now_ms=now_ms,
        timeout_ms=timeout_ms,
        on_marker=on_marker,
        on_offsets=on_offsets,
    )


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
