"""The requests of `wherry transactions`, sent to the brokers with wherry's own client
(confluent-kafka's AdminClient has none of them): Metadata for the brokers and leaders,
ListTransactions to every broker, FindCoordinator and DescribeTransactions, DescribeProducers
to a partition's leader (or a chosen replica) and WriteTxnMarkers to abort a transaction.

DescribeTransactions is read here rather than by kio, whose reader refuses the -1 start time
of a transactional id with no transaction open (Kafka's tool prints it as "None")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.cli.reassign_json import TP
from wherry.cli.wire_clients import WireCallError, WireTool
from wherry.protocol.codec import ResponseDecodeError
from wherry.protocol.wire import DecodeError, Reader

__all__ = ["ProducerRow", "TxnDescription", "TxnWire"]

_LIST_TRANSACTIONS = (66, 1)
_DESCRIBE_TRANSACTIONS = (65, 0)
_DESCRIBE_PRODUCERS = (61, 0)
_WRITE_TXN_MARKERS = (27, 1)
_TRANSACTION_KEY = 1
_BATCH = 500  # partitions a DescribeProducers asks for (Kafka's tool's batch)


@dataclass(frozen=True, slots=True)
class TxnDescription:
    coordinator_id: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int | None  # None: no transaction open
    producer_id: int
    producer_epoch: int
    partitions: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class ProducerRow:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int | None  # None: no transaction open


@dataclass(frozen=True, slots=True)
class Partition:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]


def _describe_transactions_reader(frame: bytes | memoryview, correlation_id: int
                                  ) -> list[dict[str, Any]]:
    """DescribeTransactions v0's answer (flexible), start time -1 included."""
    r = Reader(memoryview(frame))
    try:
        if r.int32() != correlation_id:
            raise ResponseDecodeError("correlation id of another request (API key 65 v0)")
        r.tagged_fields()
        r.int32()  # throttle time
        states = []
        for _ in range(max(0, r.array_length(True))):
            state: dict[str, Any] = {
                "error_code": r.int16(), "transactional_id": r.string(True),
                "state": r.string(True), "timeout_ms": r.int32(), "start_ms": r.int64(),
                "producer_id": r.int64(), "producer_epoch": r.int16(),
            }
            partitions: list[TP] = []
            for _ in range(max(0, r.array_length(True))):
                topic = r.string(True)
                partitions += [(topic, p) for p in r.int32_array(True)]
                r.tagged_fields()
            r.tagged_fields()
            states.append({**state, "partitions": partitions})
        r.tagged_fields()
        r.expect_end("the DescribeTransactions answer")
    except DecodeError as e:
        raise ResponseDecodeError(f"malformed DescribeTransactions answer: {e}") from e
    return states


def _producer_row(s: Any) -> ProducerRow:
    return ProducerRow(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                       int(s.last_timestamp), int(s.coordinator_epoch),
                       None if s.current_txn_start_offset < 0 else int(s.current_txn_start_offset))


class TxnWire(WireTool):
    """The calls (a `WireCallError` when refused or unanswered)."""

    async def partitions(self, topics: Sequence[str] | None
                         ) -> tuple[dict[int, tuple[str, int]], list[Partition]]:
        """The brokers' addresses, and the partitions of `topics` (None: every topic)."""
        resp = await self.metadata(topics)
        brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in resp.brokers}
        parts = [Partition(str(t.name), int(p.partition_index), int(p.leader_id),
                           tuple(int(r) for r in p.replica_nodes))
                 for t in resp.topics if t.error_code == ErrorCode.none for p in t.partitions]
        return brokers, sorted(parts, key=lambda p: (p.topic, p.partition))

    async def list_transactions(self, duration_ms: int | None = None,
                                producer_ids: Sequence[int] = ()
                                ) -> list[tuple[int, str, int, str]]:
        """(coordinator, transactional id, producer id, state) of every broker's transactions
        (those running longer than `duration_ms`, of `producer_ids`, when given)."""
        out = []
        for broker_id, address in sorted((await self.brokers()).items()):
            resp = await self.call(address, _LIST_TRANSACTIONS, {
                "state_filters": [], "producer_id_filters": list(producer_ids),
                "duration_filter": -1 if duration_ms is None else duration_ms})
            if resp.error_code != ErrorCode.none:
                raise WireCallError(int(resp.error_code))
            out += [(broker_id, str(s.transactional_id), int(s.producer_id),
                     str(s.transaction_state)) for s in resp.transaction_states]
        return out

    async def describe_transaction(self, transactional_id: str) -> TxnDescription:
        coordinator, (state,) = await self.at_coordinator(
            transactional_id, _TRANSACTION_KEY, _DESCRIBE_TRANSACTIONS,
            {"transactional_ids": [transactional_id]}, lambda states: states[0]["error_code"],
            self.clients.timeout_s, decode=_describe_transactions_reader)
        if state["error_code"] != ErrorCode.none:
            raise WireCallError(state["error_code"])
        return TxnDescription(coordinator, state["transactional_id"], state["state"],
                              state["timeout_ms"],
                              None if state["start_ms"] < 0 else state["start_ms"],
                              state["producer_id"], state["producer_epoch"],
                              tuple(sorted(state["partitions"])))

    async def describe_producers(self, tp: TP, broker_id: int | None = None
                                 ) -> list[ProducerRow]:
        """The producers `broker_id`'s replica of `tp` (default: its leader) keeps state for."""
        (answer,) = (await self.producers_of([tp], broker_id)).values()
        if isinstance(answer, int):
            raise WireCallError(answer)
        return answer

    async def producers_of(self, tps: Sequence[TP], broker_id: int | None = None
                           ) -> dict[TP, list[ProducerRow] | int]:
        """Each partition's producers (or its error code), asked of its leader (or of
        `broker_id`) with one DescribeProducers per broker and batch of partitions, after one
        Metadata request."""
        brokers, parts = await self.partitions(sorted({t for t, _ in tps}))
        known = {(p.topic, p.partition): p for p in parts}
        out: dict[TP, list[ProducerRow] | int] = {}
        by_broker: dict[int, list[TP]] = {}
        for tp in tps:
            part = known.get(tp)
            target = -1 if part is None else part.leader if broker_id is None else broker_id
            if part is None:
                out[tp] = int(ErrorCode.unknown_topic_or_partition)
            elif target not in brokers:
                out[tp] = int(ErrorCode.leader_not_available if broker_id is None
                              else ErrorCode.broker_not_available)
            else:
                by_broker.setdefault(target, []).append(tp)
        for target, wanted in by_broker.items():
            for i in range(0, len(wanted), _BATCH):
                topics: dict[str, list[int]] = {}
                for t, p in wanted[i:i + _BATCH]:
                    topics.setdefault(t, []).append(p)
                resp = await self.call(brokers[target], _DESCRIBE_PRODUCERS, {"topics": [
                    {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
                for topic in resp.topics:
                    for answer in topic.partitions:
                        key = (str(topic.name), int(answer.partition_index))
                        out[key] = (int(answer.error_code) if answer.error_code
                                    else [_producer_row(s) for s in answer.active_producers])
        return out

    async def abort(self, tp: TP, producer_id: int, producer_epoch: int,
                    coordinator_epoch: int) -> None:
        """An ABORT marker for the producer's open transaction, written by `tp`'s leader."""
        brokers, parts = await self.partitions([tp[0]])
        part = next((p for p in parts if (p.topic, p.partition) == tp), None)
        if part is None:
            raise WireCallError(int(ErrorCode.unknown_topic_or_partition))
        if part.leader not in brokers:
            raise WireCallError(int(ErrorCode.leader_not_available))
        resp = await self.call(brokers[part.leader], _WRITE_TXN_MARKERS, {
            "markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                         "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                         "topics": [{"name": tp[0], "partition_indexes": [tp[1]]}]}]})
        for marker in resp.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    if p.error_code != ErrorCode.none:
                        raise WireCallError(int(p.error_code))
