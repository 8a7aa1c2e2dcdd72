"""The fast record walk (`_walk_records_fast`, runs of one layout checked by byte columns)
against the reference walk (`_walk_records`, one record at a time): the same record count,
the same null-key indices, the same error for every batch, valid or damaged."""

from __future__ import annotations

import random
import time

import pytest

from wherry.protocol.record_walk import (
    _walk_records,
    _walk_records_fast,
    _walk_some,
)
from wherry.protocol.records import (
    CorruptRecordError,
    InvalidRecordError,
    RecordSpec,
    _records_payload,
    build_batch,
    parse_header,
    validate_batch,
)

TS = 1_700_000_000_000


def _payload(batch: bytes) -> tuple[bytes, int, int]:
    return _records_payload(batch, 0, parse_header(batch))


def _outcome(fn, data: bytes, start: int, end: int) -> object:  # type: ignore[no-untyped-def]
    try:
        return fn(data, start, end)
    except (InvalidRecordError, IndexError) as e:
        return (type(e).__name__, str(e))


def _null_keys_reference(data: bytes, start: int, end: int) -> list[int]:
    out: list[int] = []
    _walk_some(data, start, end, 0, 1 << 62, out)
    return out


def _batches(rng: random.Random) -> list[bytes]:
    """Uniform batches (the fast path), mixed ones (the fallback) and everything between:
    offset deltas past 64 and 8192 (varint widths 1-3), timestamp deltas of 1-3 bytes,
    null and non-null keys, headers, empty values, runs broken by odd records."""
    value = bytes(rng.randrange(256) for _ in range(100))
    out = [
        build_batch([(None, value)] * n, timestamp_ms=TS) for n in (1, 2, 63, 64, 65, 9000)
    ]
    out.append(build_batch([(b"k", value)] * 20000, timestamp_ms=TS))
    out.append(build_batch([(b"", b"")] * 300, timestamp_ms=TS))
    for n in (50, 700, 3000):
        specs = []
        for i in range(n):
            odd = rng.random() < 0.02
            key = None if rng.random() < 0.5 else b"key"
            specs.append(
                RecordSpec(
                    key if not odd else b"x" * rng.randrange(300),
                    value if not odd else value[: rng.randrange(100)],
                    headers=[("h", b"v")] if odd and rng.random() < 0.5 else (),
                    timestamp_ms=TS + (i * rng.choice((0, 1, 3, 70, 9000)) if odd else i // 10),
                )
            )
        out.append(build_batch(specs))
    mixed = [
        (
            None if rng.random() < 0.3 else bytes(rng.randrange(20)),
            bytes(rng.randrange(256) for _ in range(rng.randrange(200))),
        )
        for _ in range(400)
    ]
    out.append(build_batch(mixed, timestamp_ms=TS))
    return out


def _views(data: bytes) -> list[bytes | bytearray | memoryview]:
    """The buffers validation meets: bytes (kio's copy), a bytearray, a writable and a
    read-only view of a receive buffer (the lean Produce reader's records)."""
    buf = bytearray(data)
    return [data, buf, memoryview(buf), memoryview(bytearray(data)).toreadonly()]


def test_fast_walk_agrees_with_the_reference_on_valid_batches() -> None:
    rng = random.Random(7)
    for batch in _batches(rng):
        data, start, end = _payload(batch)
        count = parse_header(batch).record_count
        assert _walk_records_fast(data, start, end) == _walk_records(data, start, end) == count
        null_keys: list[int] = []
        _walk_records_fast(data, start, end, null_keys)
        assert null_keys == _null_keys_reference(data, start, end)


def test_fast_walk_agrees_with_the_reference_on_damaged_batches() -> None:
    """Bytes of the records section overwritten at random (a buggy client with a correct
    CRC): both walks accept the same batches and raise the same error for the others."""
    rng = random.Random(11)
    batches = _batches(rng)
    rejected = 0
    for trial in range(800):
        batch = batches[trial % len(batches)]
        data, start, end = _payload(batch)
        damaged = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 5))):
            pos = rng.randrange(start, end)
            damaged[pos] = rng.choice((0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        raw = bytes(damaged)
        ref = _outcome(_walk_records, raw, start, end)
        assert _outcome(_walk_records_fast, raw, start, end) == ref, trial
        if isinstance(ref, tuple):
            rejected += 1
        else:
            keys: list[int] = []
            _walk_records_fast(raw, start, end, keys)
            assert keys == _null_keys_reference(raw, start, end)
    assert rejected > 100  # the damage does reach the checks


def test_fast_walk_rejects_a_bad_offset_delta_inside_a_run() -> None:
    value = b"v" * 100
    batch = bytearray(build_batch([(None, value)] * 5000, timestamp_ms=TS))
    data, start, end = _payload(bytes(batch))
    size = (end - start) // 5000 + 1  # records past delta 64 are one byte longer
    # record 4000's offset delta (2-byte varint): its low byte, one record size in
    pos = start + 64 * (size - 1) + (4000 - 64) * size + 4
    damaged = bytearray(data)
    damaged[pos] ^= 0x02  # zig-zag 2k → 2k ^ 2: offset delta off by one
    with pytest.raises(InvalidRecordError, match="record 4000 has offset delta"):
        _walk_records_fast(bytes(damaged), start, end)


@pytest.mark.timeout(60)
def test_fast_walk_is_much_faster_on_uniform_batches() -> None:
    """The point of it: a 1 MiB batch of 100 B records (about 9,500) at C speed."""
    batch = build_batch([(None, bytes(100))] * 9500, timestamp_ms=TS)
    data, start, end = _payload(batch)
    _walk_records_fast(data, start, end)  # column tables built once

    def best(fn) -> float:  # type: ignore[no-untyped-def]
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn(data, start, end)
            times.append(time.perf_counter() - t0)
        return min(times)

    assert best(_walk_records_fast) * 5 < best(_walk_records)
    assert validate_batch(batch, max_message_bytes=1 << 21).record_count == 9500


def test_validate_batch_reads_a_receive_buffer_in_place() -> None:
    """A produce batch received into the frame buffer is validated from a view of it (the CRC
    read in place): the same answer as for bytes, a damaged CRC refused the same."""
    batch = build_batch([(None, b"v" * 1000)] * 300, timestamp_ms=TS)
    want = validate_batch(batch, max_message_bytes=1 << 21)
    for buf in _views(batch):
        assert validate_batch(buf, max_message_bytes=1 << 21) == want  # type: ignore[arg-type]
    flipped = bytearray(batch)
    flipped[-1] ^= 0xFF  # a value byte: the CRC no longer matches
    for buf in _views(bytes(flipped)):
        with pytest.raises(CorruptRecordError, match="CRC"):
            validate_batch(buf, max_message_bytes=1 << 21)  # type: ignore[arg-type]
