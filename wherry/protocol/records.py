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

import functools
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

import google_crc32c
from kio.schema.errors import ErrorCode

from wherry.protocol import compression as _compression

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
    "check_records_have_keys",
    "crc_ok",
    "increment_sequence",
    "iter_batches",
    "iter_records",
    "parse_control_record",
    "parse_header",
    "patch_batch",
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
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")
# attributes .. recordCount, i.e. the CRC-covered part of the header.
_CRC_HEADER: Final = struct.Struct(">hiqqqhii")
_CONTROL_KEY: Final = struct.Struct(">hh")
_CONTROL_VALUE: Final = struct.Struct(">hi")

_Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class RecordError(Exception):
    """Base class of record-batch errors; ``error_code`` is the Kafka error to return."""

    error_code: ErrorCode = ErrorCode.corrupt_message


class CorruptRecordError(RecordError):
    """Bad CRC, bad length field, truncated data, corrupt compressed payload."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(RecordError):
    """Structurally valid framing but semantically invalid (old magic, bad counts/deltas...)."""

    error_code = ErrorCode.invalid_record


class RecordTooLargeError(RecordError):
    """Batch larger than ``max.message.bytes``."""

    error_code = ErrorCode.message_too_large


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


def _crc_of(buf: _Buffer, start: int, end: int) -> int:
    chunk = buf[start:end]
    if type(chunk) is not bytes:
        chunk = bytes(chunk)
    return int(google_crc32c.value(chunk))


def crc_ok(buf: _Buffer, pos: int, header: BatchHeader) -> bool:
    """True if the stored CRC32C matches the batch (False if the batch is truncated)."""
    end = pos + header.size_in_bytes
    if end > len(buf) or header.batch_length < _MIN_BATCH_LENGTH:
        return False
    return _crc_of(buf, pos + _ATTRIBUTES_OFFSET, end) == header.crc


# --------------------------------------------------------------------------------------------
# Varints
# --------------------------------------------------------------------------------------------


def _read_uvarint(buf: bytes, pos: int, limit: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode an unsigned LEB128 varint from ``buf[pos:limit]``; returns (value, new_pos)."""
    result = 0
    shift = 0
    stop = min(limit, pos + max_bytes)
    while pos < stop:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    if pos >= limit:
        raise InvalidRecordError("truncated varint in record")
    raise InvalidRecordError("varint too long in record")


def _read_varint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """Zig-zag int32 varint (max 5 bytes)."""
    b = buf[pos] if pos < limit else 0x80  # 0x80 falls through to the slow, checking path
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    if pos + 1 < limit:
        b2 = buf[pos + 1]
        if b2 < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    raw, pos = _read_uvarint(buf, pos, limit, 5)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_varlong(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """Zig-zag int64 varint (max 10 bytes)."""
    b = buf[pos] if pos < limit else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _read_uvarint(buf, pos, limit, 10)
    return (raw >> 1) ^ -(raw & 1), pos


def _write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_varint(out: bytearray, value: int) -> None:
    """Zig-zag encode (valid for the int64 range) and append."""
    _write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _read_nullable_bytes(buf: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    """A varint length (-1: null) and that many bytes; returns (bytes or None, new_pos)."""
    n, pos = _read_varint(buf, pos, limit)
    if n >= 0:
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


def _records_payload(buf: _Buffer, pos: int, header: BatchHeader) -> tuple[bytes, int, int]:
    """Return ``(data, start, end)``: the (decompressed) records section is ``data[start:end]``.

    Uncompressed records in a ``bytes`` buffer are returned without copying.
    """
    start = pos + BATCH_HEADER_SIZE
    end = pos + header.size_in_bytes
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec == 0:
        if type(buf) is bytes:
            return buf, start, end
        return bytes(buf[start:end]), 0, end - start
    try:
        data = _compression.decompress(codec, buf[start:end])
    except _compression.UnsupportedCompressionError as exc:
        raise InvalidRecordError(str(exc)) from exc
    except _compression.CompressionError as exc:
        raise CorruptRecordError(str(exc)) from exc
    return data, 0, len(data)


def _walk_records(data: bytes, pos: int, end: int) -> int:
    """Structurally walk records in ``data[pos:end]`` without materialising keys/values.

    Checks every record's length is consistent with its fields and that offset deltas are
    0, 1, 2, ... .  Returns the number of records.  Raises :class:`InvalidRecordError`.

    The reference walk, one record at a time; produce validation takes `_walk_records_fast`,
    which gives the same answers (tests compare them).
    """
    return _walk_some(data, pos, end, 0, _NO_LIMIT, None)[0]


_NO_LIMIT: Final = 1 << 62


def _walk_some(
    data: bytes, pos: int, end: int, n: int, stop: int, null_keys: list[int] | None
) -> tuple[int, int]:
    """Walk records from ``pos`` (record index ``n``) until ``end`` or index ``stop``;
    returns (next record index, position after the last record walked). Indices of records
    with a null key are appended to ``null_keys`` (unless None).

    This is a per-record cost, so zig-zag varints of one and two bytes (lengths below 8 KiB)
    are decoded inline; longer ones take `_read_varint`.
    """
    read_varint = _read_varint
    while pos < end and n < stop:
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            raw = (b & 0x7F) | (data[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            length, pos = read_varint(data, pos, end)
        rec_end = pos + length
        if length < 6 or rec_end > end:
            raise InvalidRecordError(
                f"invalid record size {length} for record {n} ({end - pos} bytes remaining)"
            )
        p = pos + 1  # attributes
        # timestampDelta (varlong): skip
        if data[p] < 0x80:
            p += 1
        else:
            _, p = _read_varlong(data, p, rec_end)
        # offsetDelta
        b = data[p]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            p += 1
        elif data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            offset_delta = (raw >> 1) ^ -(raw & 1)
            p += 2
        else:
            offset_delta, p = read_varint(data, p, rec_end)
        if offset_delta != n:
            raise InvalidRecordError(
                f"record {n} has offset delta {offset_delta}; expected consecutive deltas"
            )
        # key, then value: -1 (null) or a length >= 0 followed by that many bytes
        for what in ("key", "value"):
            b = data[p]
            if b < 0x80:
                raw = b
                p += 1
            elif data[p + 1] < 0x80:
                raw = (b & 0x7F) | (data[p + 1] << 7)
                p += 2
            else:
                raw, p = _read_uvarint(data, p, rec_end, 5)
            if not raw & 1:  # zig-zag: even = length >= 0
                p += raw >> 1
            elif raw != 1:  # odd and not -1
                raise InvalidRecordError(f"invalid {what} length {-((raw + 1) >> 1)} in record {n}")
            elif null_keys is not None and what == "key":
                null_keys.append(n)
        # headers
        b = data[p]
        if b == 0:
            p += 1
        else:
            hcount, p = read_varint(data, p, rec_end)
            if hcount < 0:
                raise InvalidRecordError(f"invalid header count {hcount} in record {n}")
            for _ in range(hcount):
                hklen, p = read_varint(data, p, rec_end)
                if hklen < 0:
                    raise InvalidRecordError(f"invalid header key length {hklen} in record {n}")
                p += hklen
                hvlen, p = read_varint(data, p, rec_end)
                if hvlen > 0:
                    p += hvlen
                elif hvlen < -1:
                    raise InvalidRecordError(f"invalid header value length {hvlen} in record {n}")
                if p > rec_end:
                    break
        if p != rec_end:
            raise InvalidRecordError(
                f"invalid record size for record {n}: declared {length} bytes, fields use {p - pos}"
            )
        pos = rec_end
        n += 1
    return n, pos


# --- the fast walk: runs of records of one layout, checked a byte column at a time --------
#
# Records of one size whose varints have the same widths and whose length, key length,
# value length and header count bytes are equal (fixed-size values: most batches) differ
# only in their timestamp and offset deltas and their key and value bytes. For a run of R
# such records each byte position of the layout is a column, `data[first + c :: size]`,
# that C code checks at once: equal bytes for the lengths, continuation bits for the
# timestamp delta, the expected zig-zag bytes for the offset deltas. A record the walk
# accepts this way parses exactly as `_walk_some` parses it; any record that does not fit
# the run is walked by `_walk_some`.

_FLIP: Final = bytes(b ^ 0x80 for b in range(256))  # translate + isascii(): all >= 0x80
_FAST_MAX_RECORDS: Final = 1 << 17  # offset deltas the column tables cover
_OFFSET_LIMIT: Final = (0, 64, 8192, _FAST_MAX_RECORDS)  # by varint width: deltas below
_FIRST_PROBE: Final = 16
_MAX_SKIP: Final = 64


@functools.cache
def _offset_column(width: int, j: int) -> bytes:
    """Byte j of the zig-zag varint of every offset delta k < _OFFSET_LIMIT[width] (only
    the entries of deltas whose varint is `width` bytes wide are meaningful)."""
    limit = _OFFSET_LIMIT[width]
    cont = 0x80 if j < width - 1 else 0
    if j == 0:  # (2k) & 0x7F: the 64 even values, over and over
        period = bytes(2 * v | cont for v in range(64))
    else:  # (2k >> 7j) & 0x7F = (k >> (7j - 1)) & 0x7F: each value 2^(7j-1) times
        period = b"".join(bytes((v | cont,)) * (1 << (7 * j - 1)) for v in range(128))
    return (period * (limit // len(period) + 1))[:limit]


class _Layout(NamedTuple):
    consts: tuple[int, ...]  # positions (from the record start) of bytes equal in the run
    ts_start: int
    ts_len: int
    off_start: int
    off_len: int
    key_null: bool


def _varint_end(data: bytes, q: int) -> int:
    while data[q] & 0x80:
        q += 1
    return q + 1


def _layout(data: bytes, p: int) -> _Layout | None:
    """The layout of the record at ``p``, which `_walk_some` accepted; None if its run
    cannot be checked by columns (headers, or wide timestamp or offset varints)."""
    a = _varint_end(data, p)  # attributes
    ts_end = _varint_end(data, a + 1)
    off_end = _varint_end(data, ts_end)
    if ts_end - (a + 1) > 9 or off_end - ts_end > 3:
        return None
    key_end = _varint_end(data, off_end)
    raw, _ = _read_uvarint(data, off_end, key_end)
    key_null = raw == 1
    v = key_end + (0 if raw & 1 else raw >> 1)
    val_end = _varint_end(data, v)
    raw, _ = _read_uvarint(data, v, val_end)
    h = val_end + (0 if raw & 1 else raw >> 1)
    if data[h] != 0:
        return None
    consts = (*range(a - p), *range(off_end - p, key_end - p), *range(v - p, val_end - p), h - p)
    return _Layout(consts, a + 1 - p, ts_end - a - 1, ts_end - p, off_end - ts_end, key_null)


def _run_matches(
    data: bytes, template: int, pos: int, size: int, count: int, n: int, lay: _Layout
) -> bool:
    """Whether the `count` records of `size` bytes from `pos` (indices n, n+1, ...) have the
    layout of the record at `template`."""
    stop = pos + count * size
    for c in lay.consts:
        if data[pos + c : stop : size].count(data[template + c : template + c + 1]) != count:
            return False
    ts = pos + lay.ts_start
    for j in range(lay.ts_len - 1):
        if not data[ts + j : stop : size].translate(_FLIP).isascii():
            return False
    if not data[ts + lay.ts_len - 1 : stop : size].isascii():
        return False
    off = pos + lay.off_start
    for j in range(lay.off_len):
        if data[off + j : stop : size] != _offset_column(lay.off_len, j)[n : n + count]:
            return False
    return True


def _walk_records_fast(
    data: bytes, pos: int, end: int, null_keys: list[int] | None = None
) -> int:
    """`_walk_records` (same checks, same errors), with runs of records of one layout
    checked by columns; indices of records with a null key go to ``null_keys``."""
    n = 0
    probe = _FIRST_PROBE
    skip = 1
    while pos < end:
        template = pos
        n, pos = _walk_some(data, pos, end, n, n + 1, null_keys)
        lay = _layout(data, template)
        size = pos - template
        count = min(probe, (end - pos) // size)
        if lay is not None:
            count = min(count, _OFFSET_LIMIT[lay.off_len] - n)
        if lay is not None and count > 0 and _run_matches(data, template, pos, size, count, n, lay):
            if lay.key_null and null_keys is not None:
                null_keys.extend(range(n, n + count))
            n += count
            pos += count * size
            probe *= 2
            skip = 1
            continue
        # Not a run: walk a few records one by one (more after each miss) before trying again.
        probe = _FIRST_PROBE
        n, pos = _walk_some(data, pos, end, n, n + skip, null_keys)
        skip = min(skip * 2, _MAX_SKIP)
    return n


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
    if n > _MAGIC_OFFSET:
        _check_magic(data, 0)
    if n < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"truncated record batch: {n} bytes")
    header = parse_header(data, 0)
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
    raw = data if type(data) is bytes else bytes(data)
    if _crc_of(raw, _ATTRIBUTES_OFFSET, size) != header.crc:
        raise CorruptRecordError("record batch CRC mismatch")
    count = header.record_count
    if count <= 0:
        raise InvalidRecordError(f"invalid record count {count}")
    if header.last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"inconsistent batch: last offset delta {header.last_offset_delta} but "
            f"record count {count}"
        )
    payload, start, end = _records_payload(raw, 0, header)
    walked = _walk_records_checked(payload, start, end, null_keys)
    if walked != count:
        raise InvalidRecordError(f"batch declares {count} records but contains {walked}")
    return header


def _walk_records_checked(
    data: bytes, pos: int, end: int, null_keys: list[int] | None = None
) -> int:
    try:
        return _walk_records_fast(data, pos, end, null_keys)
    except IndexError as exc:  # a length pointed past the buffer end
        raise InvalidRecordError("record extends past the end of the batch") from exc


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
    _INT64.pack_into(buf, pos, base_offset)
    if partition_leader_epoch is not None:
        _INT32.pack_into(buf, pos + _PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``pos`` as LogAppendTime with ``maxTimestamp = timestamp_ms``.

    Recomputes the CRC (attributes and maxTimestamp are CRC-covered).
    """
    header = parse_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError("truncated record batch")
    _INT16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, header.attributes | ATTR_TIMESTAMP_TYPE)
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, pos + _CRC_OFFSET, _crc_of(buf, pos + _ATTRIBUTES_OFFSET, end))


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
                if hklen < 0:
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
    crc = google_crc32c.extend(google_crc32c.value(crc_header), payload)
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
    crc = google_crc32c.extend(google_crc32c.value(crc_header), payload)
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = struct.pack(
        ">qiibI", header.base_offset, batch_length, header.partition_leader_epoch, MAGIC, crc
    )
    return prefix + crc_header + payload


def check_records_have_keys(batch: _Buffer, pos: int = 0) -> None:
    """Raise InvalidRecordError if a record of the (non-control) batch at `pos` has no key:
    a compacted topic does not accept them (Kafka answers INVALID_RECORD)."""
    header = parse_header(batch, pos)
    if header.is_control:
        return
    for record in iter_records(batch, pos):
        if record.key is None:
            raise InvalidRecordError(
                "Compacted topic cannot accept message without key in topic partition"
            )
