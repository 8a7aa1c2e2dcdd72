"""The `__transaction_state` record formats, byte for byte as Apache Kafka stores them.

Every key and value is a 2-byte big-endian version followed by the message at that version
(Kafka's `transaction_log` schemas, `TransactionLogKey.json` / `TransactionLogValue.json`):

* TransactionLogKey v0: transactionalId (string).
* TransactionLogValue v0: producerId (int64), producerEpoch (int16), transactionTimeoutMs
  (int32), transactionStatus (int8, the state's id), transactionPartitions (nullable array of:
  topic (string), partitionIds (array of int32)), transactionLastUpdateTimestampMs (int64),
  transactionStartTimestampMs (int64). v1 is the same message flexible (compact strings and
  arrays, tagged fields in each struct). wherry writes v0, which every Kafka reads, and reads
  both.

A null value is a tombstone: the transactional id expired (Kafka writes it on the move to Dead).
`partition_for` places a transactional id where Kafka does: `Utils.abs(id.hashCode()) %
transaction.state.log.num.partitions`, Java's String hash.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from wherry.common.topic_partition import TopicPartition
from wherry.group.records import partition_for as _java_partition_for

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

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes that are not a valid `__transaction_state` key or value."""


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


def _string(b: bytearray, s: str, flexible: bool) -> None:
    data = s.encode("utf-8")
    if flexible:
        _uvarint(b, len(data) + 1)
    else:
        if len(data) > 0x7FFF:
            raise RecordFormatError(f"string of {len(data)} bytes is too long")
        b += _I16.pack(len(data))
    b += data


def _uvarint(b: bytearray, v: int) -> None:
    while v >= 0x80:
        b.append((v & 0x7F) | 0x80)
        v >>= 7
    b.append(v)


def _array_length(b: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        _uvarint(b, n + 1)
    else:
        b += _I32.pack(n)


def encode_key(transactional_id: str) -> bytes:
    b = bytearray(_I16.pack(KEY_VERSION))
    _string(b, transactional_id, False)
    return bytes(b)


def _by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [(t, sorted(ps)) for t, ps in sorted(topics.items())]


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    b = bytearray(_I16.pack(version))
    b += _I64.pack(value.producer_id)
    b += _I16.pack(value.producer_epoch)
    b += _I32.pack(value.timeout_ms)
    b += _I8.pack(value.state_id)
    topics = _by_topic(value.partitions)
    _array_length(b, len(topics), flexible)
    for topic, parts in topics:
        _string(b, topic, flexible)
        _array_length(b, len(parts), flexible)
        for p in parts:
            b += _I32.pack(p)
        if flexible:
            b.append(0)  # no tagged fields
    b += _I64.pack(value.last_update_timestamp_ms)
    b += _I64.pack(value.start_timestamp_ms)
    if flexible:
        b.append(0)
    return bytes(b)


class _Reader:
    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"need {n} bytes at position {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> int:
        return int(s.unpack(self.take(s.size))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if shift > 28:
                raise RecordFormatError("unsigned varint is too long")
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.unpack(_I32 if wide else _I16)

    def string(self) -> str:
        n = self.length(False)
        if n < 0:
            raise RecordFormatError("null value for a non-nullable string")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from e

    def array_length(self) -> int:
        """An array's item count (a null array: none), at most the bytes left."""
        n = self.length(True)
        if n > len(self.data) - self.pos:  # every item takes a byte at least
            raise RecordFormatError(
                f"array of {n} items but only {len(self.data) - self.pos} bytes left"
            )
        return max(n, 0)

    def tagged_fields(self) -> None:
        if self.flexible:
            count = self.uvarint()
            if 2 * count > len(self.data) - self.pos:  # a tag and a size byte each at least
                raise RecordFormatError(
                    f"{count} tagged fields in {len(self.data) - self.pos} bytes"
                )
            for _ in range(count):
                self.uvarint()
                self.take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this code does not know."""
    r = _Reader(bytes(data))
    version = r.unpack(_I16)
    if version != KEY_VERSION:
        return None
    tid = r.string()
    r.done()
    return tid


def decode_value(data: bytes) -> TransactionLogValue:
    version = _Reader(bytes(data)).unpack(_I16)
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    r = _Reader(bytes(data), flexible=version >= 1)
    r.pos = 2
    producer_id = r.unpack(_I64)
    epoch = r.unpack(_I16)
    timeout = r.unpack(_I32)
    state_id = r.unpack(_I8)
    partitions: set[TopicPartition] = set()
    for _ in range(r.array_length()):
        topic = r.string()
        for _ in range(r.array_length()):
            partitions.add(TopicPartition(topic, r.unpack(_I32)))
        r.tagged_fields()
    last_update = r.unpack(_I64)
    start = r.unpack(_I64)
    r.tagged_fields()
    r.done()
    return TransactionLogValue(
        producer_id, epoch, timeout, state_id, frozenset(partitions), last_update, start
    )
