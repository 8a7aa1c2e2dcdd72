"""Property/fuzz tests: the record codec only ever raises RecordError, never hangs, and what
validate_batch accepts iter_records can decode."""

from __future__ import annotations

import struct

import google_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wherry.protocol.records import (
    RecordError,
    RecordSpec,
    build_batch,
    crc_ok,
    iter_batches,
    iter_records,
    parse_header,
    validate_batch,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX = 1 << 20

keys = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
specs = st.builds(
    RecordSpec,
    key=keys,
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=header_lists.map(tuple),
    timestamp_ms=st.one_of(st.none(), st.integers(0, 2**41)),
)
batches = st.builds(
    lambda records, codec, base_offset: build_batch(
        records, compression=codec, base_offset=base_offset, timestamp_ms=1_700_000_000_000
    ),
    st.lists(specs, min_size=1, max_size=12),
    st.integers(0, 4),
    st.integers(0, 2**40),
)


def _recrc(buf: bytearray) -> None:
    if len(buf) >= 21:
        struct.pack_into(">I", buf, 17, google_crc32c.value(bytes(buf[21:])))


def exercise(data: bytes | bytearray) -> None:
    """Run every reader over ``data``; only RecordError may escape."""
    accepted = None
    try:
        accepted = validate_batch(data, max_message_bytes=MAX)
    except RecordError:
        pass
    try:
        parse_header(data)
    except RecordError:
        pass
    try:
        for pos, header in iter_batches(data):
            crc_ok(data, pos, header)
            try:
                for _ in iter_records(data, pos):
                    pass
            except RecordError:
                pass
    except RecordError:
        pass
    if accepted is not None:
        # Whatever validation accepts must be fully decodable, with matching offsets.
        records = list(iter_records(data))
        assert len(records) == accepted.record_count
        assert [r.offset for r in records] == list(
            range(accepted.base_offset, accepted.next_offset)
        )


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(st.binary(min_size=0, max_size=300))
def test_arbitrary_bytes_behind_a_plausible_header(tail: bytes) -> None:
    """Garbage with a self-consistent v2 header (length, magic, CRC) reaches the record walker."""
    count = tail[0] if tail else 1
    attributes = (tail[1] & 0x07) if len(tail) > 1 else 0
    body = struct.pack(">hiqqqhii", attributes, count - 1, 0, 0, -1, -1, -1, count) + tail
    buf = bytearray(struct.pack(">qiibI", 0, 9 + len(body), 0, 2, 0) + body)
    _recrc(buf)
    exercise(bytes(buf))


@FUZZ
@given(batches)
def test_valid_batches_round_trip(batch: bytes) -> None:
    header = validate_batch(batch, max_message_bytes=MAX)
    assert len(list(iter_records(batch))) == header.record_count
    assert list(iter_batches(batch)) == [(0, header)]


@FUZZ
@given(batches, st.data())
def test_mutated_batches(batch: bytes, data: st.DataObject) -> None:
    buf = bytearray(batch)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        pos = data.draw(st.integers(0, len(buf) - 1), label="pos")
        buf[pos] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        del buf[data.draw(st.integers(0, len(buf)), label="cut") :]
    if data.draw(st.booleans(), label="fix_crc"):
        # Make the CRC agree so the mutation reaches record parsing / decompression.
        _recrc(buf)
    exercise(bytes(buf))
    exercise(buf)


@settings(FUZZ, max_examples=150)
@given(st.lists(batches, min_size=1, max_size=4), st.integers(0, 200))
def test_iter_batches_on_concatenations(parts: list[bytes], cut: int) -> None:
    blob = b"".join(parts)
    truncated = blob[: max(len(blob) - cut, 0)]
    found = list(iter_batches(truncated))
    complete = 0
    size = 0
    for part in parts:
        if size + len(part) > len(truncated):
            break
        complete += 1
        size += len(part)
    assert len(found) == complete
    assert all(crc_ok(truncated, pos, header) for pos, header in found)
