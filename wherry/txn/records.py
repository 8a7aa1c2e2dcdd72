"""The `__transaction_state` record formats, byte for byte as Apache Kafka stores them.

Every key and value is a 2-byte big-endian version followed by the message at that version
(Kafka's `transaction_log` schemas, `TransactionLogKey.json` / `TransactionLogValue.json`):

* TransactionLogKey v0: transactionalId (string).
* TransactionLogValue v0: producerId (int64), producerEpoch (int16), transactionTimeoutMs
  (int32), transactionStatus (int8, the state's id), transactionPartitions (nullable array of:
  topic (string), partitionIds (array of int32)), transactionLastUpdateTimestampMs (int64),
  transactionStartTimestampMs (int64). v1 is the same message flexible (compact strings and
  arrays, tagged fields in each struct) with three tagged fields of the top-level struct:
  PreviousProducerId (tag 0, int64, default -1), NextProducerId (tag 1, int64, default -1) and
  ClientTransactionVersion (tag 2, int16, default 0), each written only when not its default.
  The coordinator writes v0 while the cluster's `transaction.version` is 0 and v1 from 1 on,
  as Kafka does; it reads both.

A null value is a tombstone: the transactional id expired (Kafka writes it on the move to Dead).
`partition_for` places a transactional id where Kafka does: `Utils.abs(id.hashCode()) %
transaction.state.log.num.partitions`, Java's String hash.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from wherry.common.topic_partition import TopicPartition
from wherry.group.records import open_versioned, record_key
from wherry.group.records import partition_for as _java_partition_for
from wherry.protocol.wire import DecodeError, Reader, Writer

__all__ = [
    "KEY_VERSION",
    "TRANSACTION_STATE_TOPIC",
    "VALUE_VERSION",
    "RecordFormatError",
    "TransactionLogValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
MAX_VALUE_VERSION = 1
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")

RecordFormatError = DecodeError
"""Bytes that are not a valid `__transaction_state` key or value: the wire reader's one error,
a ValueError (the loader skips such a record with a log line)."""


def partition_for(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition of a transactional id (Kafka's placement)."""
    return _java_partition_for(transactional_id, partitions)


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state_id: int
    partitions: frozenset[TopicPartition]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    return record_key(KEY_VERSION, transactional_id)


def _by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [(t, sorted(ps)) for t, ps in sorted(topics.items())]


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    flex = version >= 1
    w = Writer()
    w.int16(version)
    w.int64(value.producer_id)
    w.int16(value.producer_epoch)
    w.int32(value.timeout_ms)
    w.int8(value.state_id)
    topics = _by_topic(value.partitions)
    w.array_length(len(topics), flex)
    for topic, parts in topics:
        w.string(topic, flex)
        w.int32_array(parts, flex)
        w.end_struct(flex)
    w.int64(value.last_update_timestamp_ms)
    w.int64(value.start_timestamp_ms)
    if flex:
        _write_tags(w, value)
    return bytes(w.out)


def _write_tags(w: Writer, value: TransactionLogValue) -> None:
    tags: list[tuple[int, bytes]] = []
    if value.previous_producer_id != -1:
        tags.append((0, _I64.pack(value.previous_producer_id)))
    if value.next_producer_id != -1:
        tags.append((1, _I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((2, _I16.pack(value.client_transaction_version)))
    w.tagged_fields(tags)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this code does not know."""
    r = Reader(data)
    version = r.int16()
    if version != KEY_VERSION:
        return None
    tid = r.string()
    r.expect_end()
    return tid


def decode_value(data: bytes) -> TransactionLogValue:
    r, version = open_versioned(data, MAX_VALUE_VERSION, "unknown TransactionLogValue version")
    flex = version >= 1
    producer_id = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    state_id = r.int8()
    partitions: set[TopicPartition] = set()
    for _ in range(max(r.nullable_array_length(flex), 0)):  # a null array: none
        topic = r.string(flex)
        for p in r.int32_array(flex):
            partitions.add(TopicPartition(topic, p))
        r.end_struct(flex)
    last_update = r.int64()
    start = r.int64()
    tagged = {"prev": -1, "next": -1, "tv": 0}
    if flex:

        def field(name: str, read: Callable[[Reader], int]) -> Callable[[Reader], None]:
            def take(sub: Reader) -> None:
                tagged[name] = read(sub)

            return take

        r.tagged_fields(
            {
                0: field("prev", Reader.int64),
                1: field("next", Reader.int64),
                2: field("tv", Reader.int16),
            }
        )
    r.expect_end()
    return TransactionLogValue(
        producer_id,
        epoch,
        timeout,
        state_id,
        frozenset(partitions),
        last_update,
        start,
        tagged["prev"],
        tagged["next"],
        tagged["tv"],
    )
