"""Fetched Kafka record batches to the source's Arrow rows, with no Python object per record.

`fetched_rows` takes the record bytes of one partition of a Fetch answer (consecutive v2
record batches, the last one possibly cut short) and gives the Arrow columns of Spark's Kafka
source schema for the records with offsets in ``[start, end)``. Control batches are skipped;
with ``read_committed``, so are the batches of aborted transactions, by the Fetch answer's
list of aborted transactions and the abort markers met on the way (as Kafka's consumer does).

Records are walked in runs of one layout (see `_layout`): records of one size whose length,
key length and value length varints have the same bytes, and whose timestamp and offset
delta varints have the same widths, sit at a fixed stride; for a run of R of them each
field is a byte column ``buf[first + c :: size]`` that C code reads at once. A run's bytes
are viewed as R fixed-size binaries, its keys and values are sliced out of them by Arrow, and
its deltas are decoded from the byte columns by Arrow compute. Records that fit no run (mixed
sizes, headers when they are asked for) are walked one at a time into flat buffers. Either
way the columns come out of a few Arrow calls per run, not per record. Pure.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from wherry.protocol import compression
from wherry.protocol.record_errors import InvalidRecordError
from wherry.protocol.record_walk import _read_uvarint, _read_varint, _read_varlong, _varint_end
from wherry.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    CONTROL_ABORT,
    LOG_OVERHEAD,
)
from wherry.spark.row_schema import HEADERS_TYPE, TIMESTAMP_TYPE, schema

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_CONTROL_TYPE: Final = struct.Struct(">hh")  # version, type
_MIN_RUN: Final = 16
_MAX_RUN: Final = 8192
_MAX_SKIP: Final = 64


class UnsupportedRecords(ValueError):
    """Records this decoder does not read (a message format before v2)."""


# --------------------------------------------------------------------------------------------
# Small Arrow helpers
# --------------------------------------------------------------------------------------------

_POOL: Final = pa.system_memory_pool()
"""Where the columns are allocated: the C library's allocator keeps freed memory for the next
range, where pyarrow's default (mimalloc) gives it back to the system between a streaming
query's micro-batches and takes it again, page by page, in each task (the first ranges a
process reads cost it several times the steady state)."""

_ramp: pa.Array = pa.array(range(1 << 12), pa.int32(), memory_pool=_POOL)


def _ramp32(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int32 (a slice of a kept array)."""
    global _ramp
    if len(_ramp) < n:
        _ramp = pa.array(range(max(n, 2 * len(_ramp))), pa.int32(), memory_pool=_POOL)
    return _ramp.slice(0, n)


def _u8(data: bytes | bytearray | memoryview) -> pa.Array:
    """``data`` as a uint8 array (no copy)."""
    return pa.Array.from_buffers(pa.uint8(), len(data), [None, pa.py_buffer(data)])


def _validity(flags: bytearray | bytes) -> pa.Buffer | None:
    """A validity bitmap from one byte per row (1 valid, 0 null); None when all are valid."""
    if 0 not in flags:
        return None
    return _u8(flags).cast(pa.bool_(), memory_pool=_POOL).buffers()[1]


def _call(name: str, *args: pa.Array | pa.Scalar) -> pa.Array:
    """An Arrow compute function (called by name: the `pyarrow.compute` wrappers cost up to
    100 µs a call when handed a Python int, which matters at a few calls per run)."""
    return pc.call_function(name, list(args), memory_pool=_POOL)


def _i64(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.int64())


_LOW7: Final = _i64(0x7F)
_TO_I64: Final = pc.CastOptions.safe(pa.int64())
_ONE: Final = _i64(1)


def _fixed_to_binary(arr: pa.Array, width: int) -> pa.Array:
    """A fixed_size_binary[width] array (offset 0, no nulls) as binary (its data buffer kept)."""
    n = len(arr)
    offsets = _call("multiply", _ramp32(n + 1), pa.scalar(width, pa.int32()))
    return pa.Array.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], arr.buffers()[1]])


def _same_bytes(buf: bytes, at: int, stop: int, size: int, width: int, count: int) -> bool:
    """Whether the ``width`` bytes at ``at`` repeat at every stride ``size`` up to ``stop``."""
    return all(
        buf[at + j : stop : size].count(buf[at + j : at + j + 1]) == count for j in range(width)
    )


def _varint_column(buf: bytes, first: int, stop: int, size: int, width: int) -> pa.Array:
    """Zig-zag varints of ``width`` bytes at ``first``, ``first + size``, ... (before
    ``stop``) as int64."""
    raw: pa.Array | None = None
    for j in range(width):
        col = pc.call_function("cast", [_u8(buf[first + j : stop : size])], _TO_I64, _POOL)
        if j < width - 1:
            col = _call("bit_wise_and", col, _LOW7)
        if j:
            col = _call("shift_left", col, _i64(7 * j))
        raw = col if raw is None else _call("bit_wise_or", raw, col)
    assert raw is not None
    sign = _call("negate", _call("bit_wise_and", raw, _ONE))
    return _call("bit_wise_xor", _call("shift_right", raw, _ONE), sign)


# --------------------------------------------------------------------------------------------
# Columns, a segment at a time
# --------------------------------------------------------------------------------------------


class _Loose:
    """Records walked one at a time: flat buffers, turned into Arrow arrays when flushed."""

    def __init__(self, with_headers: bool) -> None:
        self.with_headers = with_headers
        self.offsets = array("q")
        self.stamps = array("q")
        self.kinds = array("i")
        self.keys = _Bytes()
        self.values = _Bytes()
        self.header_ends = array("i", [0])
        self.header_keys = _Bytes()
        self.header_values = _Bytes()

    def __len__(self) -> int:
        return len(self.offsets)


class _Bytes:
    """A binary column under construction: data, end offsets, validity bytes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends = array("i", [0])
        self.valid = bytearray()

    def add(self, buf: bytes, p: int, length: int) -> None:
        if length < 0:
            self.valid.append(0)
        else:
            self.data += buf[p : p + length]
            self.valid.append(1)
        self.ends.append(len(self.data))

    def array(self, kind: pa.DataType) -> pa.Array:
        n = len(self.valid)
        return pa.Array.from_buffers(
            kind,
            n,
            [_validity(self.valid), pa.py_buffer(self.ends), pa.py_buffer(self.data)],
        )


class _Ramp(NamedTuple):
    """``rows`` int64 values from ``first`` on, rising by one (a run's offsets)."""

    first: int
    rows: int


class _Same(NamedTuple):
    """One value ``rows`` times (None: nulls)."""

    value: Any
    rows: int


_Piece: TypeAlias = pa.Array | _Ramp | _Same


def _merged(pieces: list[_Piece]) -> list[_Piece]:
    """Neighbouring ramps that go on from each other, and neighbouring repeats of one value,
    as one piece each."""
    out: list[_Piece] = []
    for piece in pieces:
        last = out[-1] if out else None
        if isinstance(piece, _Ramp) and isinstance(last, _Ramp):
            if last.first + last.rows == piece.first:
                out[-1] = _Ramp(last.first, last.rows + piece.rows)
                continue
        elif isinstance(piece, _Same) and isinstance(last, _Same) and last.value == piece.value:
            out[-1] = _Same(piece.value, last.rows + piece.rows)
            continue
        out.append(piece)
    return out


def _column(pieces: list[_Piece], kind: pa.DataType) -> pa.Array:
    arrays = []
    for piece in _merged(pieces):
        if isinstance(piece, _Ramp):
            ramp = pc.call_function("cast", [_ramp32(piece.rows)], _TO_I64, _POOL)
            arrays.append(_call("add", ramp, _i64(piece.first)))
        elif isinstance(piece, _Same):
            if piece.value is None:
                arrays.append(pa.nulls(piece.rows, kind, memory_pool=_POOL))
            else:
                scalar = pa.scalar(piece.value, kind)
                arrays.append(pa.repeat(scalar, piece.rows, memory_pool=_POOL))
        else:
            arrays.append(piece)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays, memory_pool=_POOL)


class _Columns:
    """The output columns, as lists of pieces (one per segment) joined at the end."""

    def __init__(self, with_headers: bool, start: int, end: int) -> None:
        self.with_headers = with_headers
        self.start = start  # the range's offsets: runs keep only their rows in it
        self.end = end
        self.keys: list[_Piece] = []
        self.values: list[_Piece] = []
        self.offsets: list[_Piece] = []
        self.stamps: list[_Piece] = []
        self.kinds: list[_Piece] = []
        self.headers: list[_Piece] = []
        self.loose = _Loose(with_headers)
        self.rows = 0

    def flush(self) -> None:
        lo = self.loose
        n = len(lo)
        if not n:
            return
        self.keys.append(lo.keys.array(pa.binary()))
        self.values.append(lo.values.array(pa.binary()))
        self.offsets.append(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(lo.offsets)]))
        self.stamps.append(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(lo.stamps)]))
        self.kinds.append(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(lo.kinds)]))
        if self.with_headers:
            items = pa.StructArray.from_arrays(
                [lo.header_keys.array(pa.string()), lo.header_values.array(pa.binary())],
                fields=list(HEADERS_TYPE.value_type),
            )
            ends = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(lo.header_ends)])
            self.headers.append(
                pa.ListArray.from_arrays(ends, items, type=HEADERS_TYPE, pool=_POOL)
            )
        self.rows += n
        self.loose = _Loose(self.with_headers)

    def run(self, buf: bytes, first: int, count: int, lay: _Layout, batch: _Batch) -> None:
        """Add those of the ``count`` records of layout ``lay`` from ``buf[first:]`` that are
        in the range (all of them when their offsets are not consecutive: `_assemble` cuts)."""
        size = lay.size
        stop = first + count * size
        low, _ = _read_varint(buf, first + lay.off_at, stop)
        high, _ = _read_varint(buf, stop - size + lay.off_at, stop)
        consecutive = high - low == count - 1  # deltas rise: low to high in count steps
        if consecutive:
            # Offsets first_offset, first_offset + 1, ...: the rows of the range are a slice.
            first_offset = batch.base_offset + low
            skip = min(count, max(0, self.start - first_offset))
            keep = max(0, min(count, self.end - first_offset) - skip)
            if not keep:
                return
            first, count, low = first + skip * size, keep, low + skip
            stop = first + count * size
        self.flush()
        whole: pa.Array | None = None
        for out, at, length in (
            (self.keys, lay.key_at, lay.key_len),
            (self.values, lay.value_at, lay.value_len),
        ):
            if length <= 0:
                out.append(_Same(None if length < 0 else b"", count))
                continue
            if whole is None:
                view = pa.py_buffer(memoryview(buf)[first:stop])
                whole = pa.Array.from_buffers(pa.binary(size), count, [None, view])
            cut = pc.SliceOptions(at, at + length)
            part = pc.call_function("binary_slice", [whole], cut, _POOL)
            out.append(_fixed_to_binary(part, length))
        if consecutive:
            self.offsets.append(_Ramp(batch.base_offset + low, count))
        else:  # gaps (a compacted batch)
            deltas = _varint_column(buf, first + lay.off_at, stop, size, lay.off_width)
            self.offsets.append(_call("add", deltas, _i64(batch.base_offset)))
        ts_at = first + lay.ts_at
        if batch.log_append_time:
            self.stamps.append(_Same(batch.max_timestamp, count))
        elif _same_bytes(buf, ts_at, stop, size, lay.ts_width, count):
            delta, _ = _read_varlong(buf, ts_at, stop)
            self.stamps.append(_Same(batch.base_timestamp + delta, count))
        else:
            deltas = _varint_column(buf, ts_at, stop, size, lay.ts_width)
            self.stamps.append(_call("add", deltas, _i64(batch.base_timestamp)))
        self.kinds.append(_Same(batch.kind, count))
        if self.with_headers:
            self.headers.append(_Same([], count))
        self.rows += count


class _Batch(NamedTuple):
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool
    kind: int  # Spark's timestampType: 0 CreateTime, 1 LogAppendTime


# --------------------------------------------------------------------------------------------
# Walking the records of one batch
# --------------------------------------------------------------------------------------------


def _some(buf: bytes, p: int, end: int, k: int, lo: _Loose, batch: _Batch) -> int:
    """Walk the ``k`` records from ``p`` into ``lo``, one at a time; returns the position
    after them. (A per-record cost: locals bound once, one-byte varints read inline.)"""
    read_varint, read_varlong = _read_varint, _read_varlong
    offsets, stamps, kinds = lo.offsets, lo.stamps, lo.kinds
    keys, key_ends, key_valid = lo.keys.data, lo.keys.ends, lo.keys.valid
    values, value_ends, value_valid = lo.values.data, lo.values.ends, lo.values.valid
    base_offset, base_ts, kind = batch.base_offset, batch.base_timestamp, batch.kind
    fixed_ts = batch.max_timestamp if batch.log_append_time else None
    for _ in range(k):
        length, p = read_varint(buf, p, end)
        rec_end = p + length
        if length < 6 or rec_end > end:
            raise ValueError(f"invalid record size {length}")
        ts_delta, q = read_varlong(buf, p + 1, rec_end)
        off_delta, q = read_varint(buf, q, rec_end)
        offsets.append(base_offset + off_delta)
        stamps.append(base_ts + ts_delta if fixed_ts is None else fixed_ts)
        kinds.append(kind)
        for data, ends, valid in ((keys, key_ends, key_valid), (values, value_ends, value_valid)):
            b = buf[q]
            if b < 0x80:
                size, q = (b >> 1) ^ -(b & 1), q + 1
            else:
                size, q = read_varint(buf, q, rec_end)
            if size >= 0:
                data += buf[q : q + size]
                q += size
                valid.append(1)
            elif size == -1:
                valid.append(0)
            else:
                raise ValueError(f"invalid field length {size}")
            ends.append(len(data))
        if lo.with_headers:
            q = _headers(buf, q, rec_end, lo)
            if q != rec_end:
                raise ValueError(f"record fields use {q - p} bytes, its length says {length}")
        p = rec_end
    return p


def _headers(buf: bytes, q: int, rec_end: int, lo: _Loose) -> int:
    """Read a record's headers at ``q`` into ``lo``; returns the position after them."""
    count, q = _read_varint(buf, q, rec_end)
    for _ in range(count):
        for out in (lo.header_keys, lo.header_values):
            size, q = _read_varint(buf, q, rec_end)
            if size < -1 or (size == -1 and out is lo.header_keys):
                raise ValueError(f"invalid header field length {size}")
            out.add(buf, q, size)
            q += max(size, 0)
    lo.header_ends.append(len(lo.header_keys.valid))
    return q


class _Layout(NamedTuple):
    size: int  # bytes of a record, its length varint included
    consts: tuple[int, ...]  # positions (from the record start) of bytes equal in a run
    ts_at: int
    ts_width: int
    off_at: int
    off_width: int
    key_at: int
    key_len: int  # -1: null
    value_at: int
    value_len: int


def _layout(buf: bytes, p: int, end: int, with_headers: bool) -> _Layout | None:
    """The layout of the record at ``p``; None when its run cannot be read by columns (wide
    timestamp or offset varints; headers, when they are asked for) or the record is not
    well formed (`_some` then walks it, and says what is wrong)."""
    try:
        a = _varint_end(buf, p)  # attributes
        raw, _ = _read_uvarint(buf, p, a, 5)
        rec_end = a + ((raw >> 1) ^ -(raw & 1))
        ts_end = _varint_end(buf, a + 1)
        off_end = _varint_end(buf, ts_end)
        if ts_end - (a + 1) > 8 or off_end - ts_end > 4:
            return None
        key_end = _varint_end(buf, off_end)
        raw, _ = _read_uvarint(buf, off_end, key_end, 5)
        key_len = -1 if raw == 1 else raw >> 1 if not raw & 1 else -2
        v = key_end + max(key_len, 0)
        val_end = _varint_end(buf, v)
        raw, _ = _read_uvarint(buf, v, val_end, 5)
        value_len = -1 if raw == 1 else raw >> 1 if not raw & 1 else -2
        h = val_end + max(value_len, 0)
    except (IndexError, InvalidRecordError):
        return None
    if min(key_len, value_len) < -1 or rec_end > end or h >= rec_end:
        return None
    consts = (*range(a - p), *range(off_end - p, key_end - p), *range(v - p, val_end - p))
    if with_headers:
        if buf[h] != 0 or h + 1 != rec_end:
            return None
        consts = (*consts, h - p)
    return _Layout(
        rec_end - p,
        consts,
        a + 1 - p,
        ts_end - a - 1,
        ts_end - p,
        off_end - ts_end,
        key_end - p,
        key_len,
        val_end - p,
        value_len,
    )


_FLIP: Final = bytes(b ^ 0x80 for b in range(256))  # translate + isascii(): all >= 0x80


def _widths_hold(buf: bytes, at: int, stop: int, size: int, width: int) -> bool:
    """Whether every varint of the column at ``at`` (stride ``size``) is ``width`` bytes."""
    for j in range(width - 1):
        if not buf[at + j : stop : size].translate(_FLIP).isascii():
            return False
    return buf[at + width - 1 : stop : size].isascii()


def _run_matches(buf: bytes, template: int, pos: int, count: int, lay: _Layout) -> bool:
    """Whether the ``count`` records from ``pos`` have the layout of the record at
    ``template``."""
    size = lay.size
    stop = pos + count * size
    for c in lay.consts:
        if buf[pos + c : stop : size].count(buf[template + c : template + c + 1]) != count:
            return False
    return _widths_hold(buf, pos + lay.ts_at, stop, size, lay.ts_width) and _widths_hold(
        buf, pos + lay.off_at, stop, size, lay.off_width
    )


def _width_room(buf: bytes, p: int, lay: _Layout) -> int:
    """How many records from ``p`` on can have offset deltas as wide as the one at ``p``:
    deltas rise by at least one a record, and a zig-zag varint of w bytes holds at most
    2^(7w - 1) - 1, so a run ends there at the latest (found with no search)."""
    delta, _ = _read_varint(buf, p + lay.off_at, p + lay.size)
    return (1 << (7 * lay.off_width - 1)) - delta


def _run_length(buf: bytes, p: int, most: int, lay: _Layout) -> int:
    """How many records from ``p`` (at most ``most``) have the layout of the one at ``p``."""
    if most < _MIN_RUN or not _run_matches(buf, p, p, _MIN_RUN, lay):
        return 0
    if _run_matches(buf, p, p, most, lay):
        return most
    low, high = _MIN_RUN, most  # low records match, high do not
    while high - low > 1:
        mid = (low + high) // 2
        if _run_matches(buf, p, p, mid, lay):
            low = mid
        else:
            high = mid
    return low


def _walk(buf: bytes, p: int, end: int, count: int, cols: _Columns, batch: _Batch) -> None:
    """Add the ``count`` records of ``buf[p:end]`` to ``cols``, in runs where they fit."""
    i = 0
    skip = 1
    while i < count:
        lay = _layout(buf, p, end, cols.with_headers)
        if lay is not None:
            most = min(count - i, (end - p) // lay.size, _MAX_RUN, _width_room(buf, p, lay))
            n = _run_length(buf, p, most, lay)
            if n >= _MIN_RUN:
                cols.run(buf, p, n, lay, batch)
                p += n * lay.size
                i += n
                skip = 1
                continue
        # Not a run: walk a few records one by one (more after each miss) before trying again.
        k = min(skip, count - i)
        p = _some(buf, p, end, k, cols.loose, batch)
        i += k
        skip = min(2 * skip, _MAX_SKIP)
    if p != end:
        raise ValueError(f"{end - p} bytes after the last record of the batch")


# --------------------------------------------------------------------------------------------
# The Fetch answer's batches
# --------------------------------------------------------------------------------------------


def _abort_marker(data: bytes | memoryview, pos: int, size: int, codec: int) -> bool:
    """Whether the control batch at ``pos`` holds an abort marker."""
    payload = bytes(data[pos + BATCH_HEADER_SIZE : pos + size])
    if codec:
        payload = compression.decompress(codec, payload)
    _, p = _read_varint(payload, 0, len(payload))
    _, p = _read_varlong(payload, p + 1, len(payload))
    _, p = _read_varint(payload, p, len(payload))
    klen, p = _read_varint(payload, p, len(payload))
    if klen < _CONTROL_TYPE.size:
        return False
    return _CONTROL_TYPE.unpack_from(payload, p)[1] == CONTROL_ABORT


def fetched_rows(
    data: bytes | bytearray | memoryview,
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    read_committed: bool = False,
    aborted: Sequence[tuple[int, int]] | None = None,
    with_headers: bool = False,
) -> tuple[pa.RecordBatch | None, int]:
    """The rows of the records in ``data`` with offsets in ``[start, end)`` (None if there
    is none), and the offset after the last whole batch of ``data`` (``start`` if there is
    none): where the next fetch starts.

    ``aborted`` are the Fetch answer's aborted transactions (producer id, first offset);
    with ``read_committed`` a transactional batch of a producer with an aborted transaction
    that began at or before the batch's last offset is skipped, until that producer's abort
    marker. Raises `UnsupportedRecords` for message formats before v2, ValueError (or a
    `compression` error) for records that are not well formed.
    """
    view = memoryview(data)
    total = len(view)
    cols = _Columns(with_headers, start, end)
    pending = sorted(aborted or (), key=lambda t: t[1])
    aborted_producers: set[int] = set()
    next_offset = start
    pos = 0
    while total - pos >= BATCH_HEADER_SIZE:
        (base, length, _, magic, _, attrs, last_delta, base_ts, max_ts, pid, _, _, count) = (
            _HEADER.unpack_from(view, pos)
        )
        if magic != 2:
            raise UnsupportedRecords(f"message format v{magic} at offset {base}")
        size = length + LOG_OVERHEAD
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise ValueError(f"batch length {length} at offset {base}")
        if pos + size > total:
            break  # the answer cut the last batch short
        batch_at, pos = pos, pos + size
        last = base + last_delta
        next_offset = max(next_offset, last + 1)
        codec = attrs & ATTR_COMPRESSION_MASK
        if read_committed and pid >= 0:
            while pending and pending[0][1] <= last:
                aborted_producers.add(pending.pop(0)[0])
            if attrs & ATTR_CONTROL:
                if _abort_marker(view, batch_at, size, codec):
                    aborted_producers.discard(pid)
            elif attrs & ATTR_TRANSACTIONAL and pid in aborted_producers:
                continue
        if attrs & ATTR_CONTROL or last < start or base >= end or count <= 0:
            continue
        payload = bytes(view[batch_at + BATCH_HEADER_SIZE : batch_at + size])
        if codec:
            payload = compression.decompress(codec, payload)
        log_append = bool(attrs & ATTR_TIMESTAMP_TYPE)
        info = _Batch(base, base_ts, max_ts, log_append, 1 if log_append else 0)
        try:
            _walk(payload, 0, len(payload), count, cols, info)
        except IndexError as e:
            raise ValueError(f"a record of the batch at offset {base} is cut short") from e
    cols.flush()
    return _assemble(cols, topic, partition, start, end), next_offset


def _assemble(
    cols: _Columns, topic: str, partition: int, start: int, end: int
) -> pa.RecordBatch | None:
    if not cols.rows:
        return None
    offsets = _column(cols.offsets, pa.int64())
    n = len(offsets)
    stamps = _call("multiply", _column(cols.stamps, pa.int64()), _i64(1000))
    arrays = [
        _column(cols.keys, pa.binary()),
        _column(cols.values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n, memory_pool=_POOL),
        pa.repeat(pa.scalar(partition, pa.int32()), n, memory_pool=_POOL),
        offsets,
        stamps.cast(TIMESTAMP_TYPE, memory_pool=_POOL),
        _column(cols.kinds, pa.int32()),
    ]
    if cols.with_headers:
        arrays.append(_column(cols.headers, HEADERS_TYPE))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema(cols.with_headers))
    if offsets[0].as_py() >= start and offsets[n - 1].as_py() < end:
        return batch
    # Offsets rise through the answer: cut the rows before ``start`` and from ``end`` on.
    before = _call("sum", _call("less", offsets, _i64(start))).as_py() or 0
    after = _call("sum", _call("greater_equal", offsets, _i64(end))).as_py() or 0
    return batch.slice(before, n - before - after) if n - before - after > 0 else None
