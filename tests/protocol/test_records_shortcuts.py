"""The header shortcuts of the produce path answer exactly what a full header parse does:
`first_batch_is_transactional` (the Produce handler's look at the first batch) and
`patched_header` (the header after offsets are assigned, not read back)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wherry.protocol.records import (
    BATCH_HEADER_SIZE,
    RecordError,
    build_batch,
    first_batch_is_transactional,
    parse_header,
    patch_batch,
    patched_header,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference(buf: bytes | bytearray | memoryview) -> bool:
    try:
        return parse_header(buf).is_transactional
    except RecordError:
        return False


def _batch(transactional: bool, control: bool = False, count: int = 1) -> bytes:
    return build_batch(
        [(b"k", b"v" * 10)] * count,
        timestamp_ms=1_700_000_000_000,
        producer_id=7 if transactional or control else -1,
        producer_epoch=1,
        base_sequence=5,
        is_transactional=transactional,
        is_control=control,
    )


def test_transactional_check_on_real_batches() -> None:
    for transactional in (False, True):
        data = _batch(transactional)
        for buf in (data, bytearray(data), memoryview(bytearray(data))):
            assert first_batch_is_transactional(buf) is transactional
            assert _reference(buf) is transactional
    assert first_batch_is_transactional(b"") is False


def test_transactional_check_on_broken_batches() -> None:
    data = bytearray(_batch(True))
    assert first_batch_is_transactional(data[: BATCH_HEADER_SIZE - 1]) is False  # truncated
    for magic in (0, 1, 3):
        bad = bytearray(data)
        bad[16] = magic
        assert first_batch_is_transactional(bad) is _reference(bad) is False
    short = bytearray(data)
    struct.pack_into(">i", short, 8, 48)  # batch length below the minimum
    assert first_batch_is_transactional(short) is _reference(short) is False
    # the transactional bit is in the attributes' low byte, not the high one
    swapped = bytearray(_batch(False))
    swapped[21] |= 0x10
    assert first_batch_is_transactional(swapped) is _reference(swapped) is False


@FUZZ
@given(
    st.binary(min_size=0, max_size=80),
    st.sampled_from([0, 1, 2, 3]),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 0xFFFF),
)
def test_transactional_check_matches_parse_header(
    raw: bytes, magic: int, length: int, attributes: int
) -> None:
    assert first_batch_is_transactional(raw) is _reference(raw)
    if len(raw) >= BATCH_HEADER_SIZE:
        buf = bytearray(raw)
        buf[16] = magic
        struct.pack_into(">i", buf, 8, length)
        struct.pack_into(">H", buf, 21, attributes)
        assert first_batch_is_transactional(buf) is _reference(buf)


@FUZZ
@given(
    st.integers(0, 2**62),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.booleans(),
    st.integers(1, 5),
)
def test_patched_header_is_the_header_read_back(
    offset: int, epoch: int, transactional: bool, control: bool, count: int
) -> None:
    data = bytearray(_batch(transactional, control, count))
    before = parse_header(data)
    patch_batch(data, 0, base_offset=offset, partition_leader_epoch=epoch)
    assert patched_header(before, base_offset=offset, partition_leader_epoch=epoch) == (
        parse_header(data)
    )
