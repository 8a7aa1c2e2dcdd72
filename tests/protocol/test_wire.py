"""The one wire reader and writer (`wherry.protocol.wire`).

What the writer writes is compared with kio's primitive writers (another implementation of
Kafka's types) and with bytes written by hand, then read back; every bounds error of the
reader is one `DecodeError`, and a count the bytes left cannot hold is refused before anything
is reserved for it.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import writers as kw

from wherry.protocol.wire import MAX_STRING_BYTES, DecodeError, EncodeError, Reader, Writer

I8 = st.integers(-(2**7), 2**7 - 1)
I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=40)


def _kio(write: Callable[..., None], value: Any) -> bytes:
    out = io.BytesIO()
    write(out, value)
    return out.getvalue()


def _written(fn: Callable[[Writer], None]) -> bytes:
    w = Writer()
    fn(w)
    return w.getvalue()


# --- round trips, and the same bytes as kio's writers -----------------------------------------


@pytest.mark.parametrize(
    ("strategy", "write", "read", "kio_write"),
    [
        (I8, Writer.int8, Reader.int8, kw.write_int8),
        (I16, Writer.int16, Reader.int16, kw.write_int16),
        (I32, Writer.int32, Reader.int32, kw.write_int32),
        (I64, Writer.int64, Reader.int64, kw.write_int64),
        (st.integers(0, 2**16 - 1), Writer.uint16, Reader.uint16, kw.write_uint16),
        (U32, Writer.uint32, Reader.uint32, kw.write_uint32),
        (U32, Writer.uvarint, Reader.uvarint, kw.write_unsigned_varint),
        (U64, Writer.uvarlong, Reader.uvarlong, kw.write_unsigned_varlong),
        (I32, Writer.varint, Reader.varint, kw.write_signed_varint),
        (I64, Writer.varlong, Reader.varlong, kw.write_signed_varlong),
        (st.booleans(), Writer.boolean, Reader.boolean, kw.write_boolean),
        (st.floats(allow_nan=False), Writer.float64, Reader.float64, kw.write_float64),
        (st.uuids(), Writer.uuid, Reader.uuid, kw.write_uuid),
    ],
)
def test_fixed_and_varint_round_trips(
    strategy: st.SearchStrategy[Any], write: Any, read: Any, kio_write: Any
) -> None:
    @settings(max_examples=150, deadline=None)
    @given(strategy)
    def check(value: Any) -> None:
        data = _written(lambda w: write(w, value))
        assert data == _kio(kio_write, value)
        r = Reader(data)
        assert read(r) == value
        r.expect_end()

    check()


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), TEXT), st.booleans())
def test_strings_round_trip_in_both_forms(value: str | None, flexible: bool) -> None:
    data = _written(lambda w: w.nullable_string(value, flexible))
    if flexible:
        kio = _kio(kw.write_nullable_compact_string, value)
    else:
        kio = _kio(kw.write_nullable_legacy_string, value)
    assert data == kio
    r = Reader(memoryview(data))
    assert r.nullable_string(flexible) == value
    r.expect_end()
    if value is not None:
        assert Reader(data).string(flexible) == value


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=300)), st.booleans())
def test_bytes_round_trip_in_both_forms(value: bytes | None, flexible: bool) -> None:
    data = _written(lambda w: w.nullable_bytes(value, flexible))
    if not flexible:
        assert data == _kio(kw.write_nullable_legacy_bytes, value)
    elif value is None:
        assert data == b"\x00"
    else:  # a compact length: uvarint(length + 1)
        assert data == _written(lambda w: w.uvarint(len(value) + 1)) + value
    r = Reader(bytearray(data))
    assert r.nullable_bytes(flexible) == value
    r.expect_end()


@settings(max_examples=100, deadline=None)
@given(st.lists(I32, max_size=50), st.booleans())
def test_int32_arrays_round_trip(values: list[int], flexible: bool) -> None:
    data = _written(lambda w: w.int32_array(values, flexible))
    length = (
        _kio(kw.write_compact_array_length, len(values))
        if flexible
        else _kio(kw.write_legacy_array_length, len(values))
    )
    assert data == length + b"".join(struct.pack(">i", v) for v in values)
    r = Reader(data)
    assert r.int32_array(flexible) == tuple(values)
    r.expect_end()


def test_hand_written_bytes() -> None:
    # Kafka's examples: 300 is 0xAC 0x02; zigzag maps 0, -1, 1, -2 to 0, 1, 2, 3.
    assert _written(lambda w: w.uvarint(300)) == b"\xac\x02"
    assert [_written(lambda w, v=v: w.varint(v)) for v in (0, -1, 1, -2)] == [
        b"\x00", b"\x01", b"\x02", b"\x03"
    ]
    assert _written(lambda w: w.nullable_string(None)) == b"\xff\xff"
    assert _written(lambda w: w.nullable_string(None, True)) == b"\x00"
    assert _written(lambda w: w.string("ab", True)) == b"\x03ab"
    assert _written(lambda w: w.array_length(-1)) == b"\xff\xff\xff\xff"
    assert _written(lambda w: w.array_length(2, True)) == b"\x03"
    assert _written(lambda w: (w.no_tagged_fields(), w.end_struct(False))) == b"\x00"
    assert Reader(b"\x05").boolean() and not Reader(b"\x00").boolean()
    r = Reader(b"\xff\xff\xff\xff" + b"\x00")
    assert r.nullable_array_length() == -1
    assert r.nullable_array_length(True) == -1


def test_a_reader_over_part_of_a_buffer() -> None:
    buf = b"xx" + struct.pack(">i", 7) + b"yy"
    r = Reader(buf, 2, 6)
    assert r.int32() == 7
    r.expect_end()
    with pytest.raises(DecodeError, match="truncated"):
        r.int8()
    with pytest.raises(DecodeError):
        Reader(buf, 5, 4)
    assert Reader(memoryview(struct.pack(">2i", 1, 2)).cast("i")).int32() == 1  # any format


# --- tagged fields -----------------------------------------------------------------------------


def test_tagged_fields_known_handed_over_unknown_skipped() -> None:
    seen: list[int] = []
    body = b"\x02" + b"\x00\x01\x07" + b"\x05\x03abc" + b"\x09"
    r = Reader(body)
    r.tagged_fields({0: lambda sub: seen.append(sub.int8())})
    assert seen == [7]
    assert r.int8() == 9
    r = Reader(b"\x01\x00\x02\x07\x07")  # a known tag with a byte its reader leaves
    with pytest.raises(DecodeError, match="unexpected bytes after tagged field 0"):
        r.tagged_fields({0: lambda sub: seen.append(sub.int8())})
    Reader(b"\x00").end_struct(True)
    Reader(b"").end_struct(False)


def test_written_tagged_fields_read_back() -> None:
    body = _written(lambda w: w.tagged_fields([(0, b"\x07"), (5, b"abc")]))
    assert body == b"\x02" + b"\x00\x01\x07" + b"\x05\x03abc"
    seen: list[bytes] = []
    Reader(body).tagged_fields({5: lambda sub: seen.append(sub.raw(3))})
    assert seen == [b"abc"]
    assert _written(lambda w: w.tagged_fields([])) == b"\x00"


# --- bounds errors: one error type -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        (b"\x00", Reader.int16, "truncated"),
        (b"\x00\x00\x00", Reader.int32, "truncated"),
        (b"\x00" * 7, Reader.int64, "truncated"),
        (b"\x00" * 15, Reader.uuid, "truncated"),
        (b"", Reader.boolean, "truncated"),
        (b"\x80\x80", Reader.uvarint, "truncated"),
        (b"\x80\x80\x80\x80\x80\x01", Reader.uvarint, "longer than 5 bytes"),
        (b"\xff\xff\xff\xff\x1f", Reader.uvarint, "does not fit in 32 bits"),
        (b"\x80" * 10 + b"\x01", Reader.uvarlong, "longer than 10 bytes"),
        (b"\x80" * 11, Reader.varlong, "longer than 10 bytes"),
        (b"\x00\x05ab", Reader.string, "truncated"),
        (b"\xff\xfe", Reader.nullable_string, "negative string length"),
        (b"\xff\xff", Reader.string, "null in a non-nullable string"),
        (b"\x00\x02\xc3\x28", Reader.string, "invalid UTF-8"),
        (b"\xff\xff\xff\xfe", Reader.nullable_bytes, "negative length"),
        (b"\xff\xff\xff\xff", Reader.bytes_, "null in a non-nullable bytes"),
        (b"\x7f\xff\xff\xff", Reader.bytes_, "truncated"),
        (b"\xff\xff\xff\xfe", Reader.nullable_array_length, "negative array length"),
        (b"\xff\xff\xff\xff", Reader.array_length, "null for a non-nullable array"),
        (b"\x00\x00\x00\x05abcd", Reader.array_length, "cannot fit"),
        (b"\x00\x00\x00\x02" + b"\x00" * 7, Reader.int32_array, "cannot fit"),
        (b"\x03\x00\x01", Reader.tagged_fields, "cannot fit"),
        (b"\x01\x00\x05ab", Reader.tagged_fields, "truncated"),
    ],
)
def test_each_bounds_error_is_a_decode_error(
    data: bytes, read: Callable[[Reader], object], message: str
) -> None:
    with pytest.raises(DecodeError, match=message) as info:
        read(Reader(data))
    assert isinstance(info.value, ValueError)


def test_compact_forms_refuse_the_same() -> None:
    with pytest.raises(DecodeError, match="cannot fit"):
        Reader(b"\x06abcd").array_length(True)
    with pytest.raises(DecodeError, match="exceeds the maximum"):
        Reader(_written(lambda w: w.uvarint(MAX_STRING_BYTES + 2)) + b"a" * 40000).string(True)
    with pytest.raises(DecodeError, match="null in a non-nullable string"):
        Reader(b"\x00").string(True)
    with pytest.raises(DecodeError, match="unexpected bytes after the message"):
        Reader(b"\x00").expect_end()


def test_a_huge_count_is_refused_without_allocating() -> None:
    # An int32 array of 2**31 - 1 items (8 GiB) in a 9-byte message, a compact one of 2**32 - 2.
    crafted = [
        (b"\x7f\xff\xff\xff" + b"\x00" * 5, False),
        (b"\xff\xff\xff\xff\x0f" + b"\x00" * 4, True),
    ]
    tracemalloc.start()
    try:
        for data, flexible in crafted:
            for read in (Reader.int32_array, Reader.array_length):
                with pytest.raises(DecodeError, match="cannot fit"):
                    read(Reader(data), flexible)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


# --- what the writer refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    "write",
    [
        lambda w: w.int8(128),
        lambda w: w.int16(-(2**15) - 1),
        lambda w: w.int32(2**31),
        lambda w: w.int64(2**63),
        lambda w: w.uint32(-1),
        lambda w: w.uvarint(2**32),
        lambda w: w.uvarint(-1),
        lambda w: w.uvarlong(2**64),
        lambda w: w.varint(2**31),
        lambda w: w.varlong(-(2**63) - 1),
        lambda w: w.string("x" * (MAX_STRING_BYTES + 1)),
        lambda w: w.string("é" * (MAX_STRING_BYTES // 2 + 1), True),
        lambda w: w.int32_array([2**31]),
    ],
)
def test_the_writer_refuses_what_the_wire_cannot_carry(write: Callable[[Writer], None]) -> None:
    with pytest.raises(EncodeError) as info:
        write(Writer())
    assert isinstance(info.value, ValueError)


# --- the codecs built on it: any bytes give a value or DecodeError -----------------------------


def _record_decoders() -> list[Callable[[bytes], object]]:
    from wherry.group import consumer_group_records as cg
    from wherry.group import records as gr
    from wherry.group import share_group_records as sg
    from wherry.share import state as ss
    from wherry.txn import records as tr

    return [
        gr.decode_key, gr.decode_offset_commit_value, gr.decode_group_metadata_value,
        gr.parse_subscription_topics, tr.decode_key, tr.decode_value,
        cg.decode_consumer_group_key, cg.decode_epoch_value, cg.decode_partition_metadata,
        cg.decode_member_metadata, cg.decode_target_member, cg.decode_current_assignment,
        sg.decode_share_group_key, sg.decode_group_metadata, sg.decode_member_metadata,
        sg.decode_current_assignment, sg.decode_state_metadata, ss.decode_key, ss.decode_value,
    ]


DECODERS = _record_decoders()


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(DECODERS) - 1), st.binary(max_size=80))
def test_record_decoders_raise_only_decode_error(which: int, data: bytes) -> None:
    try:
        DECODERS[which](data)
    except DecodeError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(DECODERS) - 1), st.data())
def test_record_decoders_on_version_prefixed_bytes(which: int, data: st.DataObject) -> None:
    # A valid-looking version prefix, then anything: the decoders get past the first check.
    payload = struct.pack(">h", data.draw(st.integers(0, 15))) + data.draw(st.binary(max_size=80))
    try:
        DECODERS[which](payload)
    except DecodeError:
        pass


def test_record_errors_are_the_wire_error() -> None:
    from wherry.group.records import RecordFormatError as GroupRecordError
    from wherry.protocol.interbroker_codec import DecodeError as InterbrokerDecodeError
    from wherry.protocol.interbroker_codec import InterbrokerEncodeError
    from wherry.protocol.tolerant import DecodeError as TolerantDecodeError
    from wherry.txn.records import RecordFormatError as TxnRecordError

    assert GroupRecordError is TxnRecordError is DecodeError
    assert InterbrokerDecodeError is TolerantDecodeError is DecodeError
    assert InterbrokerEncodeError is EncodeError
    assert uuid.UUID(int=0) == Reader(bytes(16)).uuid()
