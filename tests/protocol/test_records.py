"""Record batch v2: building, parsing, validation, patching, and interop with aiokafka."""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

import google_crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from wherry.protocol import compression
from wherry.protocol.records import (
    BATCH_HEADER_SIZE,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordError,
    RecordSpec,
    RecordTooLargeError,
    build_batch,
    build_control_batch,
    crc_ok,
    increment_sequence,
    iter_batches,
    iter_records,
    parse_control_record,
    parse_header,
    patch_batch,
    set_log_append_time,
    validate_batch,
)

CODECS = [0, 1, 2, 3, 4]
MAX = 1 << 20
TS = 1_700_000_000_000


# ---------------------------------------------------------------------------------------------
# Independent test-side encoder (so tests don't just check the builder against itself)
# ---------------------------------------------------------------------------------------------


def varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_record(
    offset_delta: int,
    *,
    ts_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    length_adjust: int = 0,
    extra: bytes = b"",
) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        body += varint(len(hk)) + hk
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    body += extra
    return varint(len(body) + length_adjust) + body


def raw_batch(
    payload: bytes,
    *,
    count: int,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    base_offset: int = 0,
    magic: int = 2,
    base_ts: int = TS,
    max_ts: int = TS,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            lod,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + payload
    )
    crc = google_crc32c.value(after_crc)
    return struct.pack(">qiibI", base_offset, 49 + len(payload), -1, magic, crc) + after_crc


def recrc(batch: bytes | bytearray) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">I", buf, 17, google_crc32c.value(bytes(buf[21:])))
    return bytes(buf)


def message_set_v1(key: bytes, value: bytes, magic: int = 1) -> bytes:
    body = struct.pack(">bbq", magic, 0, TS) if magic == 1 else struct.pack(">bb", magic, 0)
    body += struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    crc = google_crc32c.value(body)  # (v0/v1 use CRC32, irrelevant here)
    message = struct.pack(">I", crc) + body
    return struct.pack(">qi", 0, len(message)) + message


def expect(exc_type: type[RecordError], code: ErrorCode, data: bytes, max_bytes: int = MAX) -> None:
    with pytest.raises(exc_type) as info:
        validate_batch(data, max_message_bytes=max_bytes)
    assert info.value.error_code == code
    assert isinstance(info.value, RecordError)


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------

SPECS = [
    RecordSpec(b"key-1", b"value-1"),
    RecordSpec(None, b"value without key"),
    RecordSpec(b"key without value", None),
    RecordSpec(None, None),
    RecordSpec(b"", b""),
    RecordSpec(b"k", b"x" * 5000, headers=(("h1", b"v1"), ("h2", None), ("", b""))),
    RecordSpec(b"early", b"ts", timestamp_ms=TS - 50_000),
    RecordSpec(b"late", b"ts", timestamp_ms=TS + 123_456),
    RecordSpec(b"unicode", b"hdr", headers=(("\u00fcml\u00e4ut", b"\x00\xff"),)),
]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_all_codecs(codec: int) -> None:
    batch = build_batch(
        SPECS,
        base_offset=100,
        compression=codec,
        timestamp_ms=TS,
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        partition_leader_epoch=5,
    )
    header = validate_batch(batch, max_message_bytes=MAX)
    assert header.magic == 2
    assert header.compression == codec
    assert header.record_count == len(SPECS)
    assert header.last_offset_delta == len(SPECS) - 1
    assert (header.base_offset, header.last_offset, header.next_offset) == (100, 108, 109)
    assert header.size_in_bytes == len(batch)
    assert header.partition_leader_epoch == 5
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 11)
    assert header.last_sequence == 19
    assert header.has_producer_id
    assert not header.is_transactional and not header.is_control
    assert header.timestamp_type == 0
    assert header.base_timestamp == TS  # first record's timestamp
    assert header.max_timestamp == TS + 123_456
    assert crc_ok(batch, 0, header)

    records = list(iter_records(batch))
    assert [r.offset for r in records] == list(range(100, 109))
    for spec, rec in zip(SPECS, records, strict=True):
        assert rec.key == spec.key
        assert rec.value == spec.value
        assert rec.headers == tuple(spec.headers)
        assert rec.timestamp == (TS if spec.timestamp_ms is None else spec.timestamp_ms)


@pytest.mark.parametrize("codec", CODECS)
def test_tuple_records_and_buffer_types(codec: int) -> None:
    batch = build_batch([(b"a", b"1"), (None, b"2")], compression=codec, timestamp_ms=TS)
    for buf in (batch, bytearray(batch), memoryview(batch), memoryview(bytearray(batch))):
        header = validate_batch(buf, max_message_bytes=MAX)
        assert header.record_count == 2
        assert [(r.key, r.value) for r in iter_records(buf)] == [(b"a", b"1"), (None, b"2")]


def test_default_timestamp_is_now() -> None:
    before = time.time_ns() // 1_000_000
    batch = build_batch([(b"k", b"v")])
    after = time.time_ns() // 1_000_000
    (rec,) = iter_records(batch)
    assert before <= rec.timestamp <= after


def test_builder_matches_independent_encoder() -> None:
    payload = encode_record(0, key=b"a", value=b"b") + encode_record(
        1, ts_delta=5, key=None, value=b"c", headers=((b"h", b"x"),)
    )
    expected = raw_batch(payload, count=2, max_ts=TS + 5)
    built = build_batch(
        [RecordSpec(b"a", b"b", timestamp_ms=TS), RecordSpec(None, b"c", (("h", b"x"),), TS + 5)],
        partition_leader_epoch=-1,
    )
    assert built == expected


def test_transactional_producer_batch() -> None:
    batch = build_batch(
        [(b"k", b"v")] * 3,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        timestamp_ms=TS,
    )
    header = validate_batch(batch, max_message_bytes=MAX)
    assert header.is_transactional and not header.is_control
    assert header.last_sequence == 2


def test_empty_batch_builds_but_does_not_validate() -> None:
    batch = build_batch([], timestamp_ms=TS)
    header = parse_header(batch)
    assert header.record_count == 0
    assert list(iter_records(batch)) == []
    expect(InvalidRecordError, ErrorCode.invalid_record, batch)


def test_control_batch() -> None:
    batch = build_control_batch(
        commit=True, producer_id=9, producer_epoch=2, coordinator_epoch=4, timestamp_ms=TS
    )
    header = validate_batch(batch, max_message_bytes=MAX)
    assert header.is_control and header.is_transactional
    assert header.base_sequence == -1 and header.last_sequence == -1
    (rec,) = iter_records(batch)
    assert parse_control_record(rec) == (CONTROL_COMMIT, 4)
    abort = build_control_batch(commit=False, producer_id=9, producer_epoch=2, coordinator_epoch=1)
    assert parse_control_record(next(iter_records(abort))) == (CONTROL_ABORT, 1)
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, None, None, ()))


# ---------------------------------------------------------------------------------------------
# Header helpers
# ---------------------------------------------------------------------------------------------


def test_constants() -> None:
    assert BATCH_HEADER_SIZE == 61
    assert LOG_OVERHEAD == 12


def test_header_properties() -> None:
    h = BatchHeader(
        base_offset=10,
        batch_length=100,
        partition_leader_epoch=1,
        magic=2,
        crc=0,
        attributes=0x08 | 0x10 | 0x20 | 4,
        last_offset_delta=4,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=2**31 - 3,
        record_count=5,
    )
    assert h.size_in_bytes == 112
    assert (h.last_offset, h.next_offset) == (14, 15)
    assert h.compression == 4
    assert h.timestamp_type == 1
    assert h.is_transactional and h.is_control
    assert not h.has_producer_id
    assert h.last_sequence == 1  # wraps like Kafka's incrementSequence


def test_increment_sequence() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 3) == 1


def test_iter_batches_and_incomplete_tail() -> None:
    batches = [build_batch([(b"k", b"v" * i)] * (i + 1), base_offset=i * 10) for i in range(4)]
    blob = b"".join(batches)
    positions = [0]
    for b in batches[:-1]:
        positions.append(positions[-1] + len(b))
    found = list(iter_batches(blob))
    assert [p for p, _ in found] == positions
    assert [h.base_offset for _, h in found] == [0, 10, 20, 30]
    assert all(crc_ok(blob, p, h) for p, h in found)
    # From a later position, and over a memoryview.
    assert list(iter_batches(memoryview(blob), positions[2])) == found[2:]
    # Every possible truncation of the last batch stops silently before it.
    for cut in range(1, len(batches[-1])):
        assert list(iter_batches(blob[: len(blob) - cut])) == found[:-1]
    assert list(iter_batches(b"")) == []


def test_iter_batches_rejects_bad_header() -> None:
    good = build_batch([(b"k", b"v")])
    bad = bytearray(good)
    struct.pack_into(">i", bad, 8, 10)  # batch_length < 49
    with pytest.raises(CorruptRecordError):
        list(iter_batches(good + bytes(bad)))
    with pytest.raises(InvalidRecordError):
        list(iter_batches(good + message_set_v1(b"k", b"v")))


def test_parse_header_errors() -> None:
    good = build_batch([(b"k", b"v")])
    assert parse_header(good) == parse_header(b"xx" + good, 2)
    with pytest.raises(CorruptRecordError):
        parse_header(good[:60])
    with pytest.raises(CorruptRecordError):
        parse_header(good[:10])
    bad = bytearray(good)
    struct.pack_into(">i", bad, 8, 48)
    with pytest.raises(CorruptRecordError):
        parse_header(bad)
    for magic, exc in ((0, InvalidRecordError), (1, InvalidRecordError), (3, CorruptRecordError)):
        bad = bytearray(good)
        bad[16] = magic
        with pytest.raises(exc):
            parse_header(bad)
    with pytest.raises(InvalidRecordError):
        parse_header(message_set_v1(b"", b""))


def test_crc_ok_detects_corruption_and_truncation() -> None:
    batch = build_batch([(b"k", b"value")])
    header = parse_header(batch)
    assert crc_ok(batch, 0, header)
    flipped = bytearray(batch)
    flipped[-1] ^= 1
    assert not crc_ok(flipped, 0, header)
    assert not crc_ok(batch[:-1], 0, header)


# ---------------------------------------------------------------------------------------------
# In-place mutation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_patch_batch_keeps_crc_valid(codec: int) -> None:
    batch = bytearray(build_batch([(b"a", b"1"), (b"b", b"2")], compression=codec))
    patch_batch(batch, 0, base_offset=1_000_000, partition_leader_epoch=42)
    header = validate_batch(batch, max_message_bytes=MAX)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 42)
    assert [r.offset for r in iter_records(batch)] == [1_000_000, 1_000_001]
    patch_batch(batch, 0, base_offset=5)  # leader epoch untouched
    assert parse_header(batch).partition_leader_epoch == 42
    assert crc_ok(batch, 0, parse_header(batch))


def test_patch_batch_in_a_larger_buffer_via_memoryview() -> None:
    first = build_batch([(b"a", b"1")])
    second = build_batch([(b"b", b"2")] * 3)
    buf = bytearray(first + second)
    view = memoryview(buf)
    next_offset = 50
    for pos, header in list(iter_batches(view)):
        patch_batch(view, pos, base_offset=next_offset, partition_leader_epoch=3)
        next_offset += header.record_count
    headers = [h for _, h in iter_batches(buf)]
    assert [h.base_offset for h in headers] == [50, 51]
    assert all(crc_ok(buf, p, h) for p, h in iter_batches(buf))


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_set_log_append_time(codec: int) -> None:
    specs = [RecordSpec(b"a", b"1", timestamp_ms=TS), RecordSpec(b"b", b"2", timestamp_ms=TS + 9)]
    buf = bytearray(b"prefix" + build_batch(specs, compression=codec))
    set_log_append_time(buf, 6, 2_000_000_000_000)
    header = parse_header(buf, 6)
    assert header.timestamp_type == 1
    assert header.max_timestamp == 2_000_000_000_000
    assert header.compression == codec
    assert crc_ok(buf, 6, header)
    validate_batch(bytes(buf[6:]), max_message_bytes=MAX)
    assert [r.timestamp for r in iter_records(buf, 6)] == [2_000_000_000_000] * 2


# ---------------------------------------------------------------------------------------------
# Validation failures
# ---------------------------------------------------------------------------------------------


def test_bad_crc() -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[-1] ^= 0xFF
    expect(CorruptRecordError, ErrorCode.corrupt_message, bytes(batch))
    header_crc = bytearray(build_batch([(b"k", b"v")]))
    header_crc[17] ^= 1
    expect(CorruptRecordError, ErrorCode.corrupt_message, bytes(header_crc))


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_format(magic: int) -> None:
    expect(InvalidRecordError, ErrorCode.invalid_record, message_set_v1(b"k", b"v", magic))
    # Also when big enough to hold a v2 header.
    expect(InvalidRecordError, ErrorCode.invalid_record, message_set_v1(b"k", b"v" * 100, magic))


def test_unknown_magic_is_corrupt() -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[16] = 7
    expect(CorruptRecordError, ErrorCode.corrupt_message, bytes(batch))


def test_empty_records() -> None:
    expect(InvalidRecordError, ErrorCode.invalid_record, b"")


def test_truncated() -> None:
    batch = build_batch([(b"k", b"v" * 100)] * 3, compression=1)
    for cut in (1, 10, 17, 40, 60, 61, 62, len(batch) // 2, len(batch) - 1):
        expect(CorruptRecordError, ErrorCode.corrupt_message, batch[:cut])


def test_length_field_larger_than_data() -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", batch, 8, len(batch))  # claims 12 more bytes than exist
    expect(CorruptRecordError, ErrorCode.corrupt_message, bytes(batch))


def test_two_batches_or_trailing_bytes() -> None:
    a = build_batch([(b"a", b"1")])
    b = build_batch([(b"b", b"2")])
    expect(InvalidRecordError, ErrorCode.invalid_record, a + b)
    expect(InvalidRecordError, ErrorCode.invalid_record, a + b"\x00")
    expect(InvalidRecordError, ErrorCode.invalid_record, a + b[:30])


def test_too_large() -> None:
    batch = build_batch([(b"k", b"v" * 2000)])
    expect(RecordTooLargeError, ErrorCode.message_too_large, batch, max_bytes=len(batch) - 1)
    assert validate_batch(batch, max_message_bytes=len(batch)).record_count == 1


def test_too_large_is_checked_on_the_compressed_size() -> None:
    batch = build_batch([(b"k", b"v" * 100_000)], compression=4)
    assert len(batch) < 1000
    validate_batch(batch, max_message_bytes=1000)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_wrong_record_count(codec: int) -> None:
    payload = compression.compress(codec, encode_record(0) + encode_record(1) + encode_record(2))
    ok = raw_batch(payload, count=3, attributes=codec)
    assert validate_batch(ok, max_message_bytes=MAX).record_count == 3
    # Header says 2 records (and consistent last offset delta), data has 3.
    expect(
        InvalidRecordError, ErrorCode.invalid_record, raw_batch(payload, count=2, attributes=codec)
    )
    # Header says 4 records, data has 3.
    expect(
        InvalidRecordError, ErrorCode.invalid_record, raw_batch(payload, count=4, attributes=codec)
    )
    # Zero / negative counts.
    for count in (0, -1):
        bad = raw_batch(payload, count=count, last_offset_delta=2, attributes=codec)
        expect(InvalidRecordError, ErrorCode.invalid_record, bad)


def test_last_offset_delta_inconsistent_with_count() -> None:
    payload = encode_record(0) + encode_record(1)
    expect(
        InvalidRecordError,
        ErrorCode.invalid_record,
        raw_batch(payload, count=2, last_offset_delta=5),
    )


@pytest.mark.parametrize("codec", [0, 3])
@pytest.mark.parametrize("deltas", [[0, 2, 3], [1, 2, 3], [0, 0, 1], [0, 1, -1], [2, 1, 0]])
def test_wrong_offset_deltas(codec: int, deltas: list[int]) -> None:
    payload = compression.compress(codec, b"".join(encode_record(d) for d in deltas))
    batch = raw_batch(payload, count=3, attributes=codec)
    expect(InvalidRecordError, ErrorCode.invalid_record, batch)
    # iter_records decodes (it does not police deltas); the offsets reflect the raw deltas.
    if min(deltas) >= 0:
        assert [r.offset for r in iter_records(batch)] == deltas


@pytest.mark.parametrize(
    "records",
    [
        pytest.param([encode_record(0, length_adjust=1)], id="length-too-long"),
        pytest.param([encode_record(0, length_adjust=-1)], id="length-too-short"),
        pytest.param([encode_record(0, extra=b"\x00")], id="extra-byte-in-record"),
        pytest.param([encode_record(0)[:-1]], id="record-cut"),
        pytest.param([encode_record(0) + b"\x00"], id="trailing-byte"),
        pytest.param([b"\x02\x00"], id="tiny-length"),
        pytest.param([varint(-5) + b"\x00" * 10], id="negative-length"),
        pytest.param(
            [encode_record(0, key=b"abc")[:1] + b"\x00\x00\x00\x05abc\x00\x00"], id="neg-key"
        ),
        pytest.param([b"\x0c\x00\x00\x00\x00\x00\x03" + b"\x00" * 5], id="neg-header-count"),
        pytest.param([b"\xff\xff\xff\xff\xff\xff\xff"], id="bad-varint"),
    ],
)
def test_malformed_records(records: list[bytes]) -> None:
    batch = raw_batch(b"".join(records), count=len(records))
    expect(InvalidRecordError, ErrorCode.invalid_record, batch)
    with pytest.raises(RecordError):
        list(iter_records(batch))


def test_corrupt_compressed_payload_with_valid_crc() -> None:
    batch = raw_batch(b"this is not gzip data at all", count=1, attributes=1)
    expect(CorruptRecordError, ErrorCode.corrupt_message, batch)
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codec(codec: int) -> None:
    batch = raw_batch(encode_record(0), count=1, attributes=codec)
    expect(InvalidRecordError, ErrorCode.invalid_record, batch)
    with pytest.raises(InvalidRecordError):
        list(iter_records(batch))


def test_validate_does_not_depend_on_base_offset_or_leader_epoch() -> None:
    batch = bytearray(build_batch([(b"k", b"v")] * 4))
    patch_batch(batch, 0, base_offset=123456789, partition_leader_epoch=99)
    assert validate_batch(batch, max_message_bytes=MAX).record_count == 4


def test_validate_1mib_batch_is_fast() -> None:
    batch = build_batch([(b"key-%d" % i, b"v" * 90) for i in range(10_000)], timestamp_ms=TS)
    assert len(batch) > 1_000_000
    start = time.perf_counter()
    header = validate_batch(batch, max_message_bytes=2 * MAX)
    elapsed = time.perf_counter() - start
    assert header.record_count == 10_000
    assert elapsed < 1.0, elapsed


# ---------------------------------------------------------------------------------------------
# Interop with aiokafka's (Java-compatible) record batch implementation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_decode_batches_built_by_aiokafka(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=55,
        producer_epoch=1,
        base_sequence=10,
        batch_size=MAX,
    )
    expected = []
    for i in range(20):
        key = None if i % 5 == 0 else b"key-%d" % i
        value = None if i % 7 == 0 else b"value-%d" % i * 10
        headers = [("h", b"%d" % i)] if i % 3 == 0 else []
        builder.append(i, timestamp=TS + i, key=key, value=value, headers=headers)
        expected.append((i, TS + i, key, value, tuple(headers)))
    batch = bytes(builder.build())
    header = validate_batch(batch, max_message_bytes=MAX)
    assert (header.record_count, header.compression) == (20, codec)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (55, 1, 10)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch)]
    assert got == expected


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_decodes_our_batches(codec: int) -> None:
    batch = bytearray(build_batch(SPECS, compression=codec, timestamp_ms=TS, base_offset=7))
    patch_batch(batch, 0, base_offset=1000)
    theirs = DefaultRecordBatch(bytes(batch))
    assert theirs.validate_crc()
    assert theirs.base_offset == 1000
    assert theirs.compression_type == codec
    records = list(theirs)
    assert [r.offset for r in records] == list(range(1000, 1000 + len(SPECS)))
    for spec, rec in zip(SPECS, records, strict=True):
        assert (rec.key, rec.value) == (spec.key, spec.value)
        assert list(rec.headers) == list(spec.headers)
        assert rec.timestamp == (TS if spec.timestamp_ms is None else spec.timestamp_ms)


@pytest.mark.parametrize("cut", [0, 1, 11, 60, 61, 62, -1, -30])
def test_batches_next_offset_is_the_last_whole_batch_s_next_offset(cut: int) -> None:
    from wherry.protocol.records import batches_next_offset

    data = b"".join(
        build_batch([(b"k", b"v" * i)] * (i + 1), base_offset=base, timestamp_ms=TS)
        for i, base in enumerate((0, 5, 40, 1000))
    )
    data = data[:cut] if cut else data
    headers = [h for _, h in iter_batches(data)]
    expected = headers[-1].next_offset if headers else None
    assert batches_next_offset(data) == expected
    assert batches_next_offset(memoryview(data)) == expected
