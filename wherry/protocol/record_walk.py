"""The structural walk over the records of a v2 batch (produce validation's per-record
cost) and the zig-zag varint readers it and `records.py` share.

`_walk_records` is the reference, one record at a time; `_walk_records_fast` gives the same
answers, checking runs of records of one layout a byte column at a time (see below); tests
compare them on valid and damaged batches.
"""

from __future__ import annotations

import functools
from typing import Final, NamedTuple

from wherry.protocol.record_errors import InvalidRecordError

# --------------------------------------------------------------------------------------------
# Varints
# --------------------------------------------------------------------------------------------


# These stay apart from `wire.Reader`: they run once per record field on the produce path,
# position in and position out with no object, raise the record errors of `record_errors.py`
# (INVALID_RECORD / CORRUPT_MESSAGE), and `_read_varint` unrolls its first two bytes.


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


# --------------------------------------------------------------------------------------------
# Walks
# --------------------------------------------------------------------------------------------


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


def _walk_records_fast(data: bytes, pos: int, end: int, null_keys: list[int] | None = None) -> int:
    """`_walk_records` (same checks, same errors), with runs of records of one layout
    checked by columns; indices of records with a null key go to ``null_keys``."""
    n = 0
    probe = _FIRST_PROBE
    skip = 1
    while pos < end:
        template = pos
        n, pos = _walk_some(data, pos, end, n, n + 1, null_keys)
        size = pos - template
        count = min(probe, (end - pos) // size)
        # no record of the template's size follows (the batch's last record): no run to check
        lay = _layout(data, template) if count > 0 else None
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


def _walk_records_checked(
    data: bytes, pos: int, end: int, null_keys: list[int] | None = None
) -> int:
    try:
        return _walk_records_fast(data, pos, end, null_keys)
    except IndexError as exc:  # a length pointed past the buffer end
        raise InvalidRecordError("record extends past the end of the batch") from exc
