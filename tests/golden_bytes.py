"""Hand encoders for golden bytes, written from Kafka's message schemas with `struct`, so that
a codec that only agrees with itself fails the tests that use them."""

from __future__ import annotations

import struct


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uv(v: int) -> bytes:
    """An unsigned varint, only the small values (one byte) the tests use."""
    assert 0 <= v < 128
    return bytes([v])


def lstr(s: str | None) -> bytes:
    """A legacy (non-flexible) string: int16 length + UTF-8; -1 for null."""
    return i16(-1) if s is None else i16(len(s.encode())) + s.encode()


def cstr(s: str | None) -> bytes:
    """A compact string (flexible versions): uvarint(length + 1); 0 for null."""
    return uv(0) if s is None else uv(len(s.encode()) + 1) + s.encode()


def larr(*items: bytes) -> bytes:
    """A legacy array: int32 count + the items."""
    return i32(len(items)) + b"".join(items)


def carr(*items: bytes) -> bytes:
    """A compact array: uvarint(count + 1) + the items."""
    return uv(len(items) + 1) + b"".join(items)
