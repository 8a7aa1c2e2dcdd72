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
Small frames are cheaper through kio (see LEAN_MIN_FRAME_BYTES).
"""

from __future__ import annotations

import datetime
import struct
import sys
import uuid
from typing import Any, Final, NamedTuple

from kio.index import load_request_schema

from wherry.protocol.primitives import INT16, INT32, REQUEST_PREFIX
from wherry.protocol.varint import VarintTooLongError, uvarint_at

API_KEY: Final = 0
MIN_VERSION: Final = 3
MAX_VERSION: Final = 13
# Below this frame size kio's native reader plus its copies costs less than this reader's
# Python (about 8-10 us a request of 3 partitions either way; kio copying the records breaks
# even near 128 KiB with the frame in cache): `codec.decode_request` leaves smaller frames to kio.
LEAN_MIN_FRAME_BYTES: Final = 128 << 10
_FIRST_FLEXIBLE: Final = 9
_FIRST_TOPIC_ID: Final = 13

_ACKS_TIMEOUT = struct.Struct(">hi")


class _Unread(Exception):
    """A length points past the frame's end, or a field is not what this reader reads exactly
    (tagged fields, a null where kio wants a value, bad UTF-8, an overlong varint)."""


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


# Not `wire.Reader`: this reader hands anything it does not read exactly to kio (`_Unread`,
# IndexError past the end, a varint longer than an int32's) rather than refusing it, so kio's
# answer to bad input stays the broker's; positions in and out, no object per field, on the
# largest frames a broker reads.
_uvarint = uvarint_at


def _string(
    buf: bytes | memoryview, pos: int, compact: bool, nullable: bool
) -> tuple[str | None, int]:
    if compact:
        n = buf[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uvarint(buf, pos)
        n -= 1
    else:
        n = INT16.unpack_from(buf, pos)[0]
        pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise _Unread
    end = pos + n
    if end > len(buf):
        raise _Unread
    try:
        return str(buf[pos:end], "utf-8"), end
    except UnicodeDecodeError:
        raise _Unread from None


def _length(buf: bytes | memoryview, pos: int, compact: bool) -> tuple[int, int]:
    """An array's or bytes' length (-1: null) and the position after it."""
    if not compact:
        return INT32.unpack_from(buf, pos)[0], pos + 4
    n = buf[pos]
    if n < 0x80:
        return n - 1, pos + 1
    n, pos = _uvarint(buf, pos)
    return n - 1, pos


def decode_produce_request(frame: bytes | memoryview) -> tuple[Any, Any] | None:
    """(request header, ProduceRequest) of a Produce request frame (without its size prefix),
    as kio's entity classes for its version; None for anything not read exactly (see module
    doc), which the caller then gives to kio."""
    if type(frame) is memoryview and (frame.ndim != 1 or frame.itemsize != 1):
        return None
    if len(frame) < REQUEST_PREFIX.size:
        return None
    api_key, version, correlation_id = REQUEST_PREFIX.unpack_from(frame, 0)
    if api_key != API_KEY or not MIN_VERSION <= version <= MAX_VERSION:
        return None
    try:
        return _decode(frame, version, correlation_id)
    # struct.error, IndexError: past the end
    except (_Unread, struct.error, IndexError, VarintTooLongError):
        return None


def _decode(buf: bytes | memoryview, version: int, correlation_id: int) -> tuple[Any, Any]:
    schema = _schema(version)
    flexible = version >= _FIRST_FLEXIBLE
    topic_ids = version >= _FIRST_TOPIC_ID
    size = len(buf)
    # records of a writable frame stay views of it; of anything else, bytes
    copy = type(buf) is not memoryview or buf.readonly
    # The header's client_id is a legacy nullable string in every header version.
    client_id, pos = _string(buf, REQUEST_PREFIX.size, False, True)
    if flexible:
        if buf[pos]:
            raise _Unread  # tagged fields: kio (or its tolerant fallback) reads them
        pos += 1
    header = schema.header(
        request_api_key=API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    transactional_id, pos = _string(buf, pos, flexible, True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += _ACKS_TIMEOUT.size
    topic_cls, partition_cls = schema.topic, schema.partition
    n_topics, pos = _length(buf, pos, flexible)
    if n_topics < 0:
        raise _Unread  # a null array: kio's to read
    topics = []
    for _ in range(n_topics):
        if topic_ids:
            if pos + 16 > size:
                raise _Unread
            topic_id: uuid.UUID | None = uuid.UUID(bytes=bytes(buf[pos : pos + 16]))
            pos += 16
            if topic_id is not None and topic_id.int == 0:
                topic_id = None  # kio reads the zero UUID as None
        else:
            name, pos = _string(buf, pos, flexible, False)
        n_partitions, pos = _length(buf, pos, flexible)
        if n_partitions < 0:
            raise _Unread
        partitions = []
        for _ in range(n_partitions):
            index = INT32.unpack_from(buf, pos)[0]
            n, pos = _length(buf, pos + 4, flexible)
            records: bytes | memoryview | None
            if n < 0:
                if n != -1:
                    raise _Unread
                records = None
            else:
                end = pos + n
                if end > size:
                    raise _Unread
                records = bytes(buf[pos:end]) if copy else buf[pos:end]
                pos = end
            if flexible:
                if buf[pos]:
                    raise _Unread
                pos += 1
            partitions.append(partition_cls(index=index, records=records))
        if flexible:
            if buf[pos]:
                raise _Unread
            pos += 1
        if topic_ids:
            topics.append(topic_cls(topic_id=topic_id, partition_data=tuple(partitions)))
        else:
            topics.append(topic_cls(name=name, partition_data=tuple(partitions)))
    if flexible and buf[pos]:
        raise _Unread
    body = schema.request(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(topics),
    )
    return header, body
