"""Kafka record batch v2 (magic 2) codec: parsing, validation, in-place patching and building.

Sans-I/O: everything works on ``bytes`` / ``bytearray`` / ``memoryview``.

Batch layout (big-endian)::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            (bytes after this field)
        12     4  partitionLeaderEpoch
        16     1  magic                  (byte 16 in every message format, v0/v1 too)
        17     4  crc (uint32)           CRC32C of bytes [21, end)
        21     2  attributes
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61        records...

Record (after decompression of the records section)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLen varint (-1 = null) | key | valueLen varint | value |
    headersCount varint | (hkeyLen varint, hkey, hvalLen varint, hval)*

All varints are zig-zag encoded (protobuf ``sint``), except where noted.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from wherry.common.crc32c import crc32c as _crc32c
from wherry.protocol import compression as _compression
from wherry.protocol.primitives import INT16, INT32, INT64, UINT32
from wherry.protocol.record_errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
)
from wherry.protocol.record_walk import (
    _read_varint,
    _read_varlong,
    _walk_records_checked,
)
from wherry.protocol.varint import put_uvarint

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER_SIZE",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "BatchHeader",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordError",
    "RecordSpec",
    "RecordTooLargeError",
    "build_batch",
    "build_control_batch",
    "build_retained_batch",
    "crc_ok",
    "decompressed_limit",
    "first_batch_is_transactional",
    "increment_sequence",
    "iter_batches",
    "iter_records",
    "null_key_records",
    "parse_control_record",
    "parse_header",
    "patch_batch",
    "patched_header",
    "set_log_append_time",
    "validate_batch",
]

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

BATCH_HEADER_SIZE: Final[int] = 61
LOG_OVERHEAD: Final[int] = 12  # baseOffset int64 + batchLength int32
MAGIC: Final[int] = 2
# batchLength counts everything after the batchLength field: 61 - 12.
_MIN_BATCH_LENGTH: Final[int] = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49

_MAGIC_OFFSET: Final = 16
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21
_MAX_TIMESTAMP_OFFSET: Final = 35
_PARTITION_LEADER_EPOCH_OFFSET: Final = 12
_MIN_DECOMPRESSED_LIMIT: Final = 16 * 1024 * 1024

ATTR_COMPRESSION_MASK: Final[int] = 0x07
ATTR_TIMESTAMP_TYPE: Final[int] = 0x08
ATTR_TRANSACTIONAL: Final[int] = 0x10
ATTR_CONTROL: Final[int] = 0x20
ATTR_DELETE_HORIZON: Final[int] = 0x40

NO_PRODUCER_ID: Final[int] = -1
NO_PRODUCER_EPOCH: Final[int] = -1
NO_SEQUENCE: Final[int] = -1

CONTROL_ABORT: Final[int] = 0
CONTROL_COMMIT: Final[int] = 1

_INT32_MAX: Final = 2**31 - 1

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
# attributes .. recordCount, i.e. the CRC-covered part of the header.
_CRC_HEADER: Final = struct.Struct(">hiqqqhii")
_CONTROL_KEY: Final = struct.Struct(">hh")
_CONTROL_VALUE: Final = struct.Struct(">hi")

_Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Header
# --------------------------------------------------------------------------------------------


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: wraps past ``Integer.MAX_VALUE`` to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def _check_magic(buf: _Buffer, pos: int) -> None:
    magic = buf[pos + _MAGIC_OFFSET]
    if magic == MAGIC:
        return
    if magic in (0, 1):
        raise InvalidRecordError(
            f"unsupported message format magic {magic} at position {pos}; only magic 2 is supported"
        )
    raise CorruptRecordError(f"invalid magic byte {magic} at position {pos}")


def parse_header(buf: _Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte batch header at ``pos`` (no CRC check).

    Raises :class:`InvalidRecordError` for magic 0/1 message sets, :class:`CorruptRecordError`
    for any other magic, fewer than 61 bytes available, or ``batch_length < 49``.
    """
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    avail = len(buf) - pos
    if avail > _MAGIC_OFFSET:
        _check_magic(buf, pos)
    if avail < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch header at position {pos}: {max(avail, 0)} < {BATCH_HEADER_SIZE} bytes"
        )
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {header.batch_length} at position {pos} is smaller than the "
            f"minimum {_MIN_BATCH_LENGTH}"
        )
    return header


def first_batch_is_transactional(buf: _Buffer) -> bool:
    """`parse_header(buf).is_transactional`, False where `parse_header` raises, read from the
    three fields it depends on (magic, attributes, batch length) without building a header."""
    return (
        len(buf) >= BATCH_HEADER_SIZE
        and buf[_MAGIC_OFFSET] == MAGIC
        and buf[_ATTRIBUTES_OFFSET + 1] & ATTR_TRANSACTIONAL != 0
        and INT32.unpack_from(buf, 8)[0] >= _MIN_BATCH_LENGTH
    )


def iter_batches(buf: _Buffer, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for consecutive complete batches from ``start``.

    Stops silently at an incomplete tail (partial header or partial batch).  Raises
    :class:`RecordError` for a header that is complete but invalid (bad magic, length < 49).
    """
    end = len(buf)
    pos = start
    unpack_from = _HEADER.unpack_from
    while True:
        remaining = end - pos
        if remaining < BATCH_HEADER_SIZE:
            # A short tail of a v2 batch is just incomplete; but don't silently swallow
            # an old-format message set.
            if remaining > _MAGIC_OFFSET:
                _check_magic(buf, pos)
            return
        if buf[pos + _MAGIC_OFFSET] != MAGIC:
            _check_magic(buf, pos)
        header = BatchHeader(*unpack_from(buf, pos))
        batch_length = header.batch_length
        if batch_length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {batch_length} at position {pos} is smaller than the "
                f"minimum {_MIN_BATCH_LENGTH}"
            )
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            return
        yield pos, header
        pos += size


_BASE_AND_LENGTH: Final = struct.Struct(">qi")
_LAST_OFFSET_DELTA_AT: Final = 23  # after baseOffset, length, epoch, magic, crc, attributes


def batches_next_offset(buf: _Buffer, start: int = 0) -> int | None:
    """The offset after the last complete batch from ``start`` (its base offset + last offset
    delta + 1), or None when there is none: what `iter_batches` would give as the last
    header's `next_offset`, read from the framing alone (no header is built per batch), for
    the aborted transactions of a read_committed fetch."""
    end, pos, last = len(buf), start, -1
    unpack_from = INT32.unpack_from
    while end - pos >= BATCH_HEADER_SIZE:
        (length,) = unpack_from(buf, pos + 8)
        if length < _MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > end:
            break
        last = pos
        pos += LOG_OVERHEAD + length
    if last < 0:
        return None
    base, _ = _BASE_AND_LENGTH.unpack_from(buf, last)
    (delta,) = unpack_from(buf, last + _LAST_OFFSET_DELTA_AT)
    return int(base + delta + 1)


def _crc_of(buf: _Buffer, start: int, end: int) -> int:
    """CRC32C of buf[start:end], read in place (any buffer: bytes, bytearray, a memoryview of
    a receive buffer), so checking a batch never copies it."""
    return int(_crc32c(memoryview(buf)[start:end]))


def crc_ok(buf: _Buffer, pos: int, header: BatchHeader) -> bool:
    """True if the stored CRC32C matches the batch (False if the batch is truncated)."""
    end = pos + header.size_in_bytes
    if end > len(buf) or header.batch_length < _MIN_BATCH_LENGTH:
        return False
    return _crc_of(buf, pos + _ATTRIBUTES_OFFSET, end) == header.crc


# --------------------------------------------------------------------------------------------
# Varints
# --------------------------------------------------------------------------------------------


def _write_varint(out: bytearray, value: int) -> None:
    """Zig-zag encode (valid for the int64 range) and append."""
    put_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def _read_nullable_bytes(buf: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    """A varint length (-1: null) and that many bytes; returns (bytes or None, new_pos)."""
    n, pos = _read_varint(buf, pos, limit)
    if n >= 0:
        if n > limit - pos:
            raise InvalidRecordError(f"{what} of {n} bytes past the end of its record")
        return buf[pos : pos + n], pos + n
    if n == -1:
        return None, pos
    raise InvalidRecordError(f"invalid {what} length {n}")


def _write_nullable_bytes(out: bytearray, data: bytes | None) -> None:
    """A varint length (-1: null) and the bytes."""
    if data is None:
        out.append(0x01)  # zig-zag(-1)
    else:
        _write_varint(out, len(data))
        out += data


# --------------------------------------------------------------------------------------------
# Record walking (validation) and decoding
# --------------------------------------------------------------------------------------------


def decompressed_limit(max_message_bytes: int) -> int:
    """The most a produced batch may decompress to: 16 times `max.message.bytes`, at least
    16 MiB (a client's own batch and request size limits keep real batches far below it)."""
    return max(_MIN_DECOMPRESSED_LIMIT, 16 * max_message_bytes)


def _records_payload(
    buf: _Buffer,
    pos: int,
    header: BatchHeader,
    max_size: int = _compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[bytes, int, int]:
    """Return ``(data, start, end)``: the (decompressed) records section is ``data[start:end]``.

    Uncompressed records in a ``bytes`` buffer are returned without copying; compressed ones
    decompress to at most `max_size` bytes (more is a `CorruptRecordError`).
    """
    start = pos + BATCH_HEADER_SIZE
    end = pos + header.size_in_bytes
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec == 0:
        if type(buf) is bytes:
            return buf, start, end
        return bytes(buf[start:end]), 0, end - start
    try:
        data = _compression.decompress(codec, buf[start:end], max_size)
    except _compression.UnsupportedCompressionError as exc:
        raise InvalidRecordError(str(exc)) from exc
    except _compression.CompressionError as exc:
        raise CorruptRecordError(str(exc)) from exc
    return data, 0, len(data)


def validate_batch(
    data: _Buffer, *, max_message_bytes: int, null_keys: list[int] | None = None
) -> BatchHeader:
    """Validate the ``records`` field of a Produce partition: exactly one v2 batch.

    With ``null_keys`` (a list), the indices of the records that have no key are appended to
    it (a compacted topic refuses them, KIP-467's per-record errors name them).

    Raises :class:`InvalidRecordError` (no batch, more than one batch / trailing bytes, magic
    0/1, bad record count, bad offset deltas, inconsistent record lengths),
    :class:`CorruptRecordError` (length field disagrees with data, truncated, bad CRC, corrupt
    compressed payload) or :class:`RecordTooLargeError` (size > ``max_message_bytes``).
    """
    n = len(data)
    if n == 0:
        raise InvalidRecordError("produce request partition has no record batch")
    if n > _MAGIC_OFFSET and data[_MAGIC_OFFSET] != MAGIC:
        _check_magic(data, 0)
    if n < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"truncated record batch: {n} bytes")
    header = BatchHeader(*_HEADER.unpack_from(data, 0))  # `parse_header`'s checks are made here
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {header.batch_length} at position 0 is smaller than the "
            f"minimum {_MIN_BATCH_LENGTH}"
        )
    size = header.batch_length + LOG_OVERHEAD
    if size > n:
        raise CorruptRecordError(
            f"batch length field says {size} bytes but only {n} bytes are present"
        )
    if size < n:
        raise InvalidRecordError(
            f"produce records must contain exactly one batch; {n - size} trailing bytes"
        )
    if size > max_message_bytes:
        raise RecordTooLargeError(
            f"record batch is {size} bytes, larger than max.message.bytes {max_message_bytes}"
        )
    if _crc_of(data, _ATTRIBUTES_OFFSET, size) != header.crc:
        raise CorruptRecordError("record batch CRC mismatch")
    count = header.record_count
    if count <= 0:
        raise InvalidRecordError(f"invalid record count {count}")
    if header.last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"inconsistent batch: last offset delta {header.last_offset_delta} but "
            f"record count {count}"
        )
    # bytes are walked where they are; a view of the receive buffer is copied for the walk
    # (the walk's C-speed column slices are 3x slower on a memoryview than that copy)
    compressed = header.attributes & ATTR_COMPRESSION_MASK
    limit = decompressed_limit(max_message_bytes) if compressed else 0  # used if compressed
    payload, start, end = _records_payload(data, 0, header, limit)
    walked = _walk_records_checked(payload, start, end, null_keys)
    if walked != count:
        raise InvalidRecordError(f"batch declares {count} records but contains {walked}")
    return header


# --------------------------------------------------------------------------------------------
# In-place mutation
# --------------------------------------------------------------------------------------------


def patch_batch(
    buf: bytearray | memoryview,
    pos: int,
    *,
    base_offset: int,
    partition_leader_epoch: int | None = None,
) -> None:
    """Overwrite baseOffset (and optionally partitionLeaderEpoch) in place.

    Both fields precede the CRC-covered region, so the CRC stays valid.
    """
    INT64.pack_into(buf, pos, base_offset)
    if partition_leader_epoch is not None:
        INT32.pack_into(buf, pos + _PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def patched_header(
    header: BatchHeader, *, base_offset: int, partition_leader_epoch: int
) -> BatchHeader:
    """`header` as `parse_header` reads it back after `patch_batch` wrote `base_offset` and
    `partition_leader_epoch` into its batch (no other field changes), without reading it."""
    return BatchHeader(
        base_offset,
        header.batch_length,
        partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.record_count,
    )


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``pos`` as LogAppendTime with ``maxTimestamp = timestamp_ms``.

    Recomputes the CRC (attributes and maxTimestamp are CRC-covered).
    """
    header = parse_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError("truncated record batch")
    INT16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, header.attributes | ATTR_TIMESTAMP_TYPE)
    INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp_ms)
    UINT32.pack_into(buf, pos + _CRC_OFFSET, _crc_of(buf, pos + _ATTRIBUTES_OFFSET, end))


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def iter_records(batch: _Buffer, pos: int = 0) -> Iterator[Record]:
    """Decode the records of the batch at ``pos`` (decompressing if needed).

    Offsets and timestamps are absolute (LogAppendTime batches report ``maxTimestamp``).
    Header keys are decoded as UTF-8 with ``surrogateescape``.  No CRC check.
    """
    header = parse_header(batch, pos)
    if pos + header.size_in_bytes > len(batch):
        raise CorruptRecordError("truncated record batch")
    data, p, end = _records_payload(batch, pos, header)
    base_offset = header.base_offset
    log_append = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    base_ts = header.base_timestamp
    max_ts = header.max_timestamp
    try:
        for i in range(header.record_count):
            if p >= end:
                raise InvalidRecordError(
                    f"batch declares {header.record_count} records but contains {i}"
                )
            length, p = _read_varint(data, p, end)
            rec_end = p + length
            if length < 6 or rec_end > end:
                raise InvalidRecordError(f"invalid record size {length} for record {i}")
            p += 1  # attributes (unused in v2)
            ts_delta, p = _read_varlong(data, p, rec_end)
            offset_delta, p = _read_varint(data, p, rec_end)
            key, p = _read_nullable_bytes(data, p, rec_end, "key")
            value, p = _read_nullable_bytes(data, p, rec_end, "value")
            hcount, p = _read_varint(data, p, rec_end)
            if hcount < 0:
                raise InvalidRecordError(f"invalid header count {hcount}")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(hcount):
                if p >= rec_end:
                    raise InvalidRecordError("header count exceeds record size")
                hklen, p = _read_varint(data, p, rec_end)
                if hklen < 0 or hklen > rec_end - p:
                    raise InvalidRecordError(f"invalid header key length {hklen}")
                hkey = data[p : p + hklen].decode("utf-8", "surrogateescape")
                p += hklen
                hval, p = _read_nullable_bytes(data, p, rec_end, "header value")
                headers.append((hkey, hval))
            if p != rec_end:
                raise InvalidRecordError(f"invalid record size for record {i}")
            yield Record(
                offset=base_offset + offset_delta,
                timestamp=max_ts if log_append else base_ts + ts_delta,
                key=key,
                value=value,
                headers=tuple(headers),
            )
        if p != end:
            raise InvalidRecordError("trailing bytes after the last record of the batch")
    except IndexError as exc:
        raise InvalidRecordError("record extends past the end of the batch") from exc


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordSpec:
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # attributes
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_nullable_bytes(body, key)
    _write_nullable_bytes(body, value)
    _write_varint(body, len(headers))
    for hkey, hval in headers:
        _write_nullable_bytes(body, hkey.encode("utf-8", "surrogateescape"))
        _write_nullable_bytes(body, hval)
    _write_varint(out, len(body))
    out += body


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]] | Sequence[RecordSpec],
    *,
    base_offset: int = 0,
    compression: int = 0,
    timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Build a v2 record batch.

    ``records`` are ``(key, value)`` tuples or :class:`RecordSpec`; a spec's ``timestamp_ms``
    overrides the batch-wide ``timestamp_ms`` (default: now).  baseTimestamp is the first
    record's timestamp, maxTimestamp the largest.  ``compression`` is a codec id 0-4.
    """
    default_ts = _now_ms() if timestamp_ms is None else timestamp_ms
    specs: list[RecordSpec] = [
        r if isinstance(r, RecordSpec) else RecordSpec(r[0], r[1]) for r in records
    ]
    timestamps = [default_ts if s.timestamp_ms is None else s.timestamp_ms for s in specs]
    base_ts = timestamps[0] if timestamps else default_ts
    max_ts = max(timestamps) if timestamps else default_ts

    body = bytearray()
    for i, (spec, ts) in enumerate(zip(specs, timestamps, strict=True)):
        _encode_record(body, i, ts - base_ts, spec.key, spec.value, spec.headers)
    payload = _compression.compress(compression, bytes(body)) if compression else bytes(body)

    attributes = compression & ATTR_COMPRESSION_MASK
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    count = len(specs)
    crc_header = _CRC_HEADER.pack(
        attributes,
        max(count - 1, 0),
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = _crc32c(payload, _crc32c(crc_header))
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, MAGIC, crc)
    return prefix + crc_header + payload


def build_control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build a transaction end marker (COMMIT / ABORT control batch, one control record)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value)],
        base_offset=base_offset,
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def parse_control_record(record: Record) -> tuple[int, int]:
    """Return ``(control_type, coordinator_epoch)`` of a control record (type 0 abort, 1 commit).

    ``coordinator_epoch`` is -1 if the value is absent (non-marker control records).
    """
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise InvalidRecordError("control record has an invalid key")
    _version, control_type = _CONTROL_KEY.unpack_from(record.key)
    coordinator_epoch = -1
    if record.value is not None and len(record.value) >= _CONTROL_VALUE.size:
        _version, coordinator_epoch = _CONTROL_VALUE.unpack_from(record.value)
    return control_type, coordinator_epoch


def build_retained_batch(
    header: BatchHeader,
    records: Sequence[Record],
    *,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Rebuild a batch keeping only `records` (log compaction, Kafka's filterTo).

    Keeps the batch's base offset (records keep their offsets), codec, timestamp type,
    transactional/control flags, producer id/epoch, base sequence and partition leader epoch;
    the last offset delta follows the last kept record. With `delete_horizon_ms` the delete
    horizon attribute is set and the base timestamp holds the horizon (KIP-534). With no
    records an empty batch keeps the original offset range and max timestamp (Kafka keeps the
    last batch of a producer that way, so its state survives compaction).
    """
    attributes = header.attributes & ~ATTR_DELETE_HORIZON
    log_append = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    codec = header.attributes & ATTR_COMPRESSION_MASK
    body = bytearray()
    if records:
        first_ts = records[0].timestamp
        base_ts = delete_horizon_ms if delete_horizon_ms is not None else first_ts
        max_ts = header.max_timestamp if log_append else max(r.timestamp for r in records)
        for r in records:
            ts_delta = 0 if log_append else r.timestamp - base_ts
            _encode_record(body, r.offset - header.base_offset, ts_delta, r.key, r.value, r.headers)
        last_offset_delta = records[-1].offset - header.base_offset
    else:
        max_ts = header.max_timestamp
        base_ts = delete_horizon_ms if delete_horizon_ms is not None else max_ts
        last_offset_delta = header.last_offset_delta
        codec = 0
        attributes &= ~ATTR_COMPRESSION_MASK
    payload = bytes(body)
    if codec and payload:
        payload = _compression.compress(codec, payload)
    crc_header = _CRC_HEADER.pack(
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    crc = _crc32c(payload, _crc32c(crc_header))
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = struct.pack(
        ">qiibI", header.base_offset, batch_length, header.partition_leader_epoch, MAGIC, crc
    )
    return prefix + crc_header + payload


def null_key_records(batch: _Buffer, pos: int = 0) -> list[int]:
    """Indices (in the batch) of the records of the batch at `pos` that have no key; none
    for a control batch. The batch must be valid (`validate_batch`)."""
    header = parse_header(batch, pos)
    if header.is_control:
        return []
    if pos + header.size_in_bytes > len(batch):
        raise CorruptRecordError("truncated record batch")
    data, start, end = _records_payload(batch, pos, header)
    out: list[int] = []
    _walk_records_checked(data, start, end, out)
    return out
