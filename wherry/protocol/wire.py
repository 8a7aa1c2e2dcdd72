"""Kafka's wire primitives, read and written: the one reader and writer every hand-written
binary codec uses (the controller's requests, ControlledShutdown, the `__consumer_offsets`,
`__transaction_state` and `__share_group_state` records, the follower's Fetch answer).

`Reader` reads from `buf[pos:end]` of bytes, a bytearray or a memoryview: fixed-size integers
(int8/16/32/64, uint16/32, float64, bool, uuid), unsigned varints and varlongs, zigzag
varints and varlongs, strings and bytes in the classic form (int16 / int32 length, -1 for
null) and the compact form of flexible versions (unsigned varint length + 1, 0 for null),
array lengths, and tagged-field sections. `Writer` writes the same into a bytearray.

Every read checks the bytes left first. An array count is checked against the bytes left
(`min_item_bytes` each) before the caller reserves anything for it, so a count the remaining
bytes cannot hold is an error, never an allocation: decoding is bounded by the input size.

Malformed input raises `DecodeError` alone: a `ValueError` (and kio's `DecodeError`), for
truncated input, negative or oversized lengths, over-long varints, invalid UTF-8, nulls where
the schema has none, counts past the end and trailing bytes. A value the wire cannot carry
(a string over 32,767 bytes, an integer outside its type) raises `EncodeError`, a
`ValueError` too.

The lean per-request and per-record readers (`record_walk.py`, `produce_request.py`,
`decode_guard.py`, `api_versions_codec.py`) keep their own inner loops; each says why.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from kio.serial import errors as kio_errors

from wherry.protocol.primitives import FLOAT64 as _F64
from wherry.protocol.primitives import INT8 as _I8
from wherry.protocol.primitives import INT16 as _I16
from wherry.protocol.primitives import INT32 as _I32
from wherry.protocol.primitives import INT64 as _I64
from wherry.protocol.primitives import UINT8 as _U8
from wherry.protocol.primitives import UINT16 as _U16
from wherry.protocol.primitives import UINT32 as _U32
from wherry.protocol.varint import put_uvarint

__all__ = ["MAX_STRING_BYTES", "Buffer", "DecodeError", "EncodeError", "Reader", "Writer"]

Buffer: TypeAlias = bytes | bytearray | memoryview

MAX_STRING_BYTES: Final = 0x7FFF
"""Kafka's limit for a string, classic or compact."""

_ZERO_UUID: Final = uuid.UUID(int=0)


class DecodeError(ValueError, kio_errors.DecodeError):
    """Malformed (truncated, inconsistent, invalid) input for the requested entity type.

    Also kio's DecodeError (the tolerant kio reader, `tolerant.py`, raises this one too).
    `kio.serial.errors` imports kio's serial package: modules a broker imports before its
    listeners are bound (tests/test_import_hygiene.py) do not import this one."""


class EncodeError(ValueError):
    """A value the wire cannot carry (or that the requested version cannot)."""


def _int_reader(fmt: struct.Struct) -> Callable[[Reader], int]:
    """A `Reader` method reading one integer of the one-field `fmt`."""
    size = fmt.size
    unpack_from = fmt.unpack_from

    def read(r: Reader) -> int:
        start = r.pos
        if r._end - start < size:
            raise r._short(size)
        r.pos = start + size
        return unpack_from(r._buf, start)[0]

    return read


def _int_writer(fmt: struct.Struct) -> Callable[[Writer, int], None]:
    """A `Writer` method writing one integer of the one-field `fmt`."""
    pack = fmt.pack

    def write(w: Writer, v: int) -> None:
        try:
            w.out += pack(v)
        except struct.error as e:
            raise EncodeError(f"{v!r} does not fit the wire type {fmt.format!r}: {e}") from e

    return write


class Reader:
    """Reads Kafka primitives from `buf[pos:end]`; every read checks the bytes left."""

    __slots__ = ("_buf", "_end", "pos")

    def __init__(self, buf: Buffer, pos: int = 0, end: int | None = None) -> None:
        if type(buf) is memoryview and (buf.ndim != 1 or buf.format != "B"):
            buf = buf.cast("B")
        size = len(buf)
        self._buf = buf
        self._end = size if end is None else end
        if not 0 <= pos <= self._end <= size:
            raise DecodeError(f"offset {pos} outside a buffer of {size} bytes")
        self.pos = pos

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    def _short(self, n: int) -> DecodeError:
        return DecodeError(
            f"truncated: need {n} bytes at offset {self.pos}, {self._end - self.pos} left"
        )

    def skip(self, n: int) -> int:
        """Step over `n` bytes; their start."""
        start = self.pos
        if n < 0:
            raise DecodeError(f"negative length {n} at offset {start}")
        if n > self._end - start:
            raise self._short(n)
        self.pos = start + n
        return start

    def raw(self, n: int) -> bytes:
        """The next `n` bytes, copied."""
        start = self.skip(n)
        return bytes(self._buf[start : start + n])

    def view(self, n: int) -> memoryview:
        """The next `n` bytes as a view of the buffer (no copy)."""
        start = self.skip(n)
        return memoryview(self._buf)[start : start + n]

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        """The fields of one fixed-size `struct.Struct` (several integers in one read)."""
        start = self.pos
        if fmt.size > self._end - start:
            raise self._short(fmt.size)
        self.pos = start + fmt.size
        return fmt.unpack_from(self._buf, start)

    # One call per value on the hot paths: each fixed-size read is a closure over its format.
    int8 = _int_reader(_I8)
    uint8 = _int_reader(_U8)
    int16 = _int_reader(_I16)
    uint16 = _int_reader(_U16)
    int32 = _int_reader(_I32)
    uint32 = _int_reader(_U32)
    int64 = _int_reader(_I64)

    def float64(self) -> float:
        value: float = self.unpack(_F64)[0]
        return value

    def boolean(self) -> bool:
        return self.int8() != 0  # like Kafka: any non-zero byte is true

    def uuid(self) -> uuid.UUID:
        start = self.skip(16)
        return uuid.UUID(bytes=bytes(self._buf[start : start + 16]))

    def _varint(self, max_bytes: int, bits: int) -> int:
        buf = self._buf
        pos = self.pos
        end = self._end
        value = shift = 0
        for _ in range(max_bytes):
            if pos >= end:
                raise self._short(1)
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                if value >> bits:
                    raise DecodeError(f"varint {value} does not fit in {bits} bits")
                self.pos = pos
                return value
            shift += 7
        raise DecodeError(f"varint longer than {max_bytes} bytes at offset {self.pos}")

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (an int32's)."""
        pos = self.pos
        if pos < self._end:
            b = self._buf[pos]
            if b < 0x80:  # one byte: most lengths and counts
                self.pos = pos + 1
                return b
        return self._varint(5, 32)

    def uvarlong(self) -> int:
        """An unsigned varint of at most 10 bytes (an int64's)."""
        return self._varint(10, 64)

    def varint(self) -> int:
        """A zigzag-encoded signed varint (int32)."""
        v = self._varint(5, 32)
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        """A zigzag-encoded signed varlong (int64)."""
        v = self._varint(10, 64)
        return (v >> 1) ^ -(v & 1)

    # --- strings and bytes ----------------------------------------------------------------

    def _text(self, n: int) -> str:
        if n < 0:
            raise DecodeError(f"negative string length {n}")
        if n > MAX_STRING_BYTES:
            raise DecodeError(f"string of {n} bytes exceeds the maximum of {MAX_STRING_BYTES}")
        start = self.pos
        if n > self._end - start:
            raise self._short(n)
        self.pos = start + n
        try:
            return str(self._buf[start : start + n], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 in a string at offset {start}: {e}") from e

    def nullable_string(self, flexible: bool = False) -> str | None:
        """A string, compact when `flexible`; None for null."""
        n = self.uvarint() - 1 if flexible else self.int16()
        return None if n == -1 else self._text(n)

    def string(self, flexible: bool = False) -> str:
        """A non-nullable string, compact when `flexible`."""
        n = self.uvarint() - 1 if flexible else self.int16()
        if n == -1:
            raise DecodeError(f"null in a non-nullable string at offset {self.pos}")
        return self._text(n)

    def nullable_bytes(self, flexible: bool = False) -> bytes | None:
        """Bytes (int32 length, or compact when `flexible`); None for null."""
        n = self.uvarint() - 1 if flexible else self.int32()
        return None if n == -1 else self.raw(n)

    def bytes_(self, flexible: bool = False) -> bytes:
        """Non-nullable bytes, compact when `flexible`."""
        value = self.nullable_bytes(flexible)
        if value is None:
            raise DecodeError(f"null in a non-nullable bytes field at offset {self.pos}")
        return value

    # --- arrays -----------------------------------------------------------------------------

    def nullable_array_length(self, flexible: bool = False, min_item_bytes: int = 1) -> int:
        """An array's item count, -1 for null (int32, or compact when `flexible`), refused
        if that many items of `min_item_bytes` each cannot fit in the bytes left."""
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            if n == -1:
                return -1
            raise DecodeError(f"negative array length {n}")
        if n * min_item_bytes > self._end - self.pos:
            raise DecodeError(
                f"array of {n} items cannot fit in the {self._end - self.pos} bytes left"
            )
        return n

    def array_length(self, flexible: bool = False, min_item_bytes: int = 1) -> int:
        """A non-nullable array's item count (see `nullable_array_length`)."""
        n = self.nullable_array_length(flexible, min_item_bytes)
        if n < 0:
            raise DecodeError(f"null for a non-nullable array at offset {self.pos}")
        return n

    def int32_array(self, flexible: bool = False) -> tuple[int, ...]:
        """A non-nullable array of int32, in one read."""
        n = self.array_length(flexible, 4)
        start = self.pos
        self.pos = start + 4 * n
        return struct.unpack_from(f">{n}i", self._buf, start)

    # --- tagged fields and ends -------------------------------------------------------------

    def tagged_fields(self, known: Mapping[int, Callable[[Reader], None]] | None = None) -> None:
        """A tagged-field section: known tags are handed a reader of their bytes (which they
        must read whole), the others skipped."""
        count = self.uvarint()
        if not count:
            return
        if count * 2 > self._end - self.pos:  # each field takes a tag and a size byte at least
            raise DecodeError(
                f"{count} tagged fields cannot fit in the {self._end - self.pos} bytes left"
            )
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            start = self.skip(size)
            read = known.get(tag) if known else None
            if read is not None:
                sub = Reader(self._buf, start, start + size)
                read(sub)
                sub.expect_end(f"tagged field {tag}")

    def end_struct(self, flexible: bool) -> None:
        """A struct's end: in flexible versions, its tagged fields (skipped)."""
        if flexible:
            self.tagged_fields()

    def expect_end(self, what: str = "the message") -> None:
        """Refuse bytes left over after `what`."""
        if self.pos != self._end:
            raise DecodeError(f"{self._end - self.pos} unexpected bytes after {what}")


class Writer:
    """Writes Kafka primitives into `out`, a bytearray."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def raw(self, data: Buffer) -> None:
        self.out += data

    def pack(self, fmt: struct.Struct, *values: int) -> None:
        """The fields of one fixed-size `struct.Struct`."""
        try:
            self.out += fmt.pack(*values)
        except struct.error as e:
            raise EncodeError(f"{values!r} do not fit the wire types: {e}") from e

    int8 = _int_writer(_I8)
    uint8 = _int_writer(_U8)
    int16 = _int_writer(_I16)
    uint16 = _int_writer(_U16)
    int32 = _int_writer(_I32)
    uint32 = _int_writer(_U32)
    int64 = _int_writer(_I64)

    def float64(self, v: float) -> None:
        self.out += _F64.pack(v)

    def boolean(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def uuid(self, v: uuid.UUID | None) -> None:
        self.out += (v or _ZERO_UUID).bytes

    def _varint(self, v: int, bits: int) -> None:
        if v < 0 or v >> bits:
            raise EncodeError(f"{v} does not fit in an unsigned {bits}-bit varint")
        put_uvarint(v, self.out)

    def uvarint(self, v: int) -> None:
        if 0 <= v < 0x80:
            self.out.append(v)
        else:
            self._varint(v, 32)

    def uvarlong(self, v: int) -> None:
        self._varint(v, 64)

    def varint(self, v: int) -> None:
        if not -0x8000_0000 <= v <= 0x7FFF_FFFF:
            raise EncodeError(f"{v} does not fit in a varint")
        self._varint((v << 1) ^ (v >> 31), 32)

    def varlong(self, v: int) -> None:
        if not -0x8000_0000_0000_0000 <= v <= 0x7FFF_FFFF_FFFF_FFFF:
            raise EncodeError(f"{v} does not fit in a varlong")
        self._varint((v << 1) ^ (v >> 63), 64)

    def nullable_string(self, v: str | None, flexible: bool = False) -> None:
        """A string, compact when `flexible` (else an int16 length); None as null."""
        if v is None:
            self.out += b"\x00" if flexible else b"\xff\xff"
            return
        data = v.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise EncodeError(
                f"string of {len(data)} bytes exceeds the maximum of {MAX_STRING_BYTES}"
            )
        if flexible:
            self.uvarint(len(data) + 1)
        else:
            self.out += _I16.pack(len(data))
        self.out += data

    string = nullable_string
    """A non-nullable string (the same bytes; the type says it is never None)."""

    def nullable_bytes(self, v: Buffer | None, flexible: bool = False) -> None:
        """Bytes (an int32 length, or compact when `flexible`); None as null."""
        self.array_length(-1 if v is None else len(v), flexible)
        if v is not None:
            self.out += v

    bytes_ = nullable_bytes

    def array_length(self, n: int, flexible: bool = False) -> None:
        """An array's item count, or a bytes length (-1 for null): an int32, or compact
        (unsigned varint of n + 1) when `flexible`."""
        if flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def int32_array(self, values: tuple[int, ...] | list[int], flexible: bool = False) -> None:
        self.array_length(len(values), flexible)
        try:
            self.out += struct.pack(f">{len(values)}i", *values)
        except struct.error as e:
            raise EncodeError(f"an int32 array holds a value out of range: {e}") from e

    def no_tagged_fields(self) -> None:
        """An empty tagged-field section."""
        self.out.append(0)

    def tagged_fields(self, fields: Sequence[tuple[int, Buffer]]) -> None:
        """A tagged-field section: each (tag, its bytes), in the order given (Kafka writes the
        tags ascending)."""
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data

    def end_struct(self, flexible: bool) -> None:
        """A struct's end: in flexible versions, an empty tagged-field section."""
        if flexible:
            self.out.append(0)
