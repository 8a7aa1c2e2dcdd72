"""A lean reader for Produce requests (API key 0, v3-v13), sans-I/O.

kio's reader copies every partition's `records` out of the frame into a new `bytes`; the log
then needs a writable buffer to assign offsets in place, so the broker would copy them again.
`decode_produce_request` reads the same wire format into the SAME kio entity classes
(`ProduceRequest`, `TopicProduceData`, `PartitionProduceData` of the version, and the request
header class), field for field as kio's reader builds them, except that `records` is a slice
of the frame: a writable memoryview when the frame is one (the receive buffer's own, which
nothing else writes while a view of it lives), else a `bytes` copy.

It reads only what it reads exactly: any tagged field, a truncated frame, a bad length, a null
where kio wants a value, invalid UTF-8 or a version outside kio's Produce schemas makes it
return None, and the caller decodes the frame with kio, which reports the error as before.
Bytes after the body are ignored, as `codec.decode_request` ignores them on kio's path.
"""

from __future__ import annotations

import datetime
import struct
import sys
import uuid
from typing import Any, Final, NamedTuple, cast

from kio.index import load_request_schema

API_KEY: Final = 0
MIN_VERSION: Final = 3
MAX_VERSION: Final = 13
_FIRST_FLEXIBLE: Final = 9
_FIRST_TOPIC_ID: Final = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_ACKS_TIMEOUT = struct.Struct(">hi")
_MAX_VARINT_BYTES: Final = 5


class _Truncated(Exception):
    """The frame ends (or a length points) past its end, or a field is not what kio reads."""


class _Schema(NamedTuple):
    header: type
    request: type
    topic: type
    partition: type


_SCHEMAS: dict[int, _Schema] = {}


def _schema(version: int) -> _Schema:
    schema = _SCHEMAS.get(version)
    if schema is None:
        request = load_request_schema(API_KEY, version)
        module = sys.modules[request.__module__]
        schema = _Schema(
            request.__header_schema__,
            request,
            module.TopicProduceData,
            module.PartitionProduceData,
        )
        _SCHEMAS[version] = schema
    return schema


class _Reader:
    """A cursor over one frame; every read raises _Truncated rather than read past the end."""

    __slots__ = ("buf", "end", "pos", "view")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = buf
        self.end = len(buf)
        self.pos = pos
        # records of a writable frame stay views of it; of anything else, bytes
        self.view = type(buf) is memoryview and not buf.readonly

    def _take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise _Truncated
        self.pos = start + n
        return start

    def i16(self) -> int:
        value: int = _I16.unpack_from(self.buf, self._take(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack_from(self.buf, self._take(4))[0]
        return value

    def acks_timeout(self) -> tuple[int, int]:
        acks, timeout = _ACKS_TIMEOUT.unpack_from(self.buf, self._take(6))
        return acks, timeout

    def uvarint(self) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        value = shift = 0
        for _ in range(_MAX_VARINT_BYTES):
            if pos >= end:
                raise _Truncated
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return value
            shift += 7
        raise _Truncated  # longer than an int32 varint: left to kio

    def _text(self, n: int) -> str:
        start = self._take(n)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError:
            raise _Truncated from None

    def string(self, *, compact: bool, nullable: bool) -> str | None:
        n = self.uvarint() - 1 if compact else self.i16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise _Truncated
        return self._text(n)

    def array_length(self, *, compact: bool) -> int:
        n = self.uvarint() - 1 if compact else self.i32()
        if n < 0:  # a null array where kio wants a tuple
            raise _Truncated
        return n

    def records(self, *, compact: bool) -> bytes | memoryview | None:
        n = self.uvarint() - 1 if compact else self.i32()
        if n < 0:
            if n == -1:
                return None
            raise _Truncated
        start = self._take(n)
        if self.view:
            return cast(memoryview, self.buf)[start : start + n]
        return bytes(self.buf[start : start + n])

    def uuid(self) -> uuid.UUID | None:
        start = self._take(16)
        value = uuid.UUID(bytes=bytes(self.buf[start : start + 16]))
        return None if value.int == 0 else value  # kio reads the zero UUID as None

    def no_tagged_fields(self) -> None:
        if self.uvarint() != 0:
            raise _Truncated  # kio (or its tolerant fallback) reads tagged fields


def decode_produce_request(frame: bytes | memoryview) -> tuple[Any, Any] | None:
    """(request header, ProduceRequest) of a Produce request frame (without its size prefix),
    as kio's entity classes for its version; None for anything not read exactly (see module
    doc), which the caller then gives to kio."""
    if type(frame) is memoryview and (frame.ndim != 1 or frame.itemsize != 1):
        return None
    if len(frame) < _PREFIX.size:
        return None
    api_key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    if api_key != API_KEY or not MIN_VERSION <= version <= MAX_VERSION:
        return None
    schema = _schema(version)
    flexible = version >= _FIRST_FLEXIBLE
    topic_ids = version >= _FIRST_TOPIC_ID
    r = _Reader(frame, _PREFIX.size)
    try:
        # The header's client_id is a legacy nullable string in every header version.
        client_id = r.string(compact=False, nullable=True)
        if flexible:
            r.no_tagged_fields()
        header = schema.header(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        )
        transactional_id = r.string(compact=flexible, nullable=True)
        acks, timeout_ms = r.acks_timeout()
        topics = []
        for _ in range(r.array_length(compact=flexible)):
            topic_id = r.uuid() if topic_ids else None
            name = None if topic_ids else r.string(compact=flexible, nullable=False)
            partitions = []
            for _ in range(r.array_length(compact=flexible)):
                index = r.i32()
                records = r.records(compact=flexible)
                if flexible:
                    r.no_tagged_fields()
                partitions.append(schema.partition(index=index, records=records))
            if flexible:
                r.no_tagged_fields()
            if topic_ids:
                topics.append(schema.topic(topic_id=topic_id, partition_data=tuple(partitions)))
            else:
                topics.append(schema.topic(name=name, partition_data=tuple(partitions)))
        if flexible:
            r.no_tagged_fields()
    except _Truncated:
        return None
    body = schema.request(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(topics),
    )
    return header, body
