"""Produce answers (v3-v13) written without kio in the common case.

Every Produce is answered, and its answer carries offsets that change with each request, so
`response_cache` cannot keep it; through kio its few fields cost about 150 Python calls (a
schema walk, a type check of each value). `encode_produce_body` writes the body of the
answers the produce handler gives -- per partition an index, an error code, the base offset,
the log append time, the log start offset and (v8+) an error message, no record errors, no
current-leader or node-endpoint tagged fields -- byte for byte as kio writes them (the tests
compare the two on every version); for anything else it returns None and the answer goes
through kio as before.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from wherry.protocol.primitives import INT16 as _INT16
from wherry.protocol.primitives import INT32 as _INT32
from wherry.protocol.varint import put_uvarint

__all__ = ["encode_produce_body"]

_PARTITION: Final = struct.Struct(">ihqqq")  # index, error code, base offset, append time, start
_PARTITION_V3: Final = struct.Struct(">ihqq")  # ... no log start offset before v5
# the times kio's datetime fields hold (years 1-9999), in ms from the epoch
_MIN_TIME_MS: Final = -62135596800000
_MAX_TIME_MS: Final = 253402300799999
# the fields of the answer this writer writes (any other is left to kio)
_TOP_KEYS: Final = frozenset(("responses", "throttle_time"))
_TOPIC_KEYS: Final = frozenset(("name", "topic_id", "partition_responses"))
_PART_KEYS: Final = frozenset(
    ("index", "error_code", "base_offset", "log_append_time", "log_start_offset",
     "error_message", "record_errors")
)


class _Unwritten(Exception):
    """A value this writer leaves to kio."""


_NO_ERRORS: Final = b"\x00\x00\x00\x00\xff\xff"  # count 0, null
_NO_ERRORS_FLEXIBLE: Final = b"\x01\x00\x00"  # ... and no tagged fields


def _error_code(value: Any) -> int:
    if type(value) is not ErrorCode:
        value = ErrorCode(int(value))  # what kio's entity would be built from (or refuse)
    return int(value)


def _int(value: Any) -> int:
    if type(value) is not int:
        raise _Unwritten
    return value


def _string(out: bytearray, value: str, flexible: bool) -> None:
    data = value.encode()
    if flexible:
        n = len(data) + 1
        if n < 0x80:
            out.append(n)
        else:
            put_uvarint(n, out)
    else:
        out += _INT16.pack(len(data))
    out += data


def encode_produce_body(version: int, data: Any) -> bytes | None:
    """The body of Produce answer `data` (the handler's mapping) at `version`, or None when it
    holds what only kio's writer writes."""
    if type(data) is not dict or not data.keys() <= _TOP_KEYS or not 3 <= version <= 13:
        return None
    try:
        return _body(version, data)
    except _Unwritten:
        return None


def _body(version: int, data: Mapping[str, Any]) -> bytes:
    flexible = version >= 9
    out = bytearray()
    topics = data.get("responses", ())
    if type(topics) is not list and type(topics) is not tuple:
        raise _Unwritten
    _count(out, len(topics), flexible)
    for topic in topics:
        if type(topic) is not dict or not topic.keys() <= _TOPIC_KEYS:
            raise _Unwritten
        if version >= 13:
            topic_id = topic.get("topic_id")
            if type(topic_id) is not uuid.UUID:
                raise _Unwritten
            out += topic_id.bytes
        else:
            name = topic.get("name")
            if type(name) is not str:
                raise _Unwritten
            _string(out, name, flexible)
        parts = topic.get("partition_responses", ())
        if type(parts) is not list and type(parts) is not tuple:
            raise _Unwritten
        _count(out, len(parts), flexible)
        for part in parts:
            _partition(out, version, part, flexible)
        if flexible:
            out.append(0)  # no tagged fields
    throttle = data.get("throttle_time", 0)
    out += _INT32.pack(_int(throttle))
    if flexible:
        out.append(0)  # no tagged fields (node endpoints)
    return bytes(out)


def _count(out: bytearray, n: int, flexible: bool) -> None:
    if not flexible:
        out += _INT32.pack(n)
    elif n < 0x7F:
        out.append(n + 1)
    else:
        put_uvarint(n + 1, out)


def _partition(out: bytearray, version: int, part: Any, flexible: bool) -> None:
    if type(part) is not dict or not part.keys() <= _PART_KEYS:
        raise _Unwritten
    get = part.get
    index = get("index", 0)
    code = get("error_code", ErrorCode.none)
    base = get("base_offset", 0)
    append = get("log_append_time")
    if append is None:
        append = -1
    if type(index) is not int or type(base) is not int or type(append) is not int:
        raise _Unwritten
    if type(code) is not ErrorCode:
        code = _error_code(code)
    if not _MIN_TIME_MS <= append <= _MAX_TIME_MS:  # kio's datetime would refuse it
        raise _Unwritten
    if version >= 5:
        out += _PARTITION.pack(index, code, base, append, _int(get("log_start_offset", -1)))
    else:
        out += _PARTITION_V3.pack(index, code, base, append)
    if version < 8:
        return
    if get("record_errors"):
        raise _Unwritten
    message = get("error_message")
    if message is None:  # no record errors, a null message (and no tagged fields)
        out += _NO_ERRORS_FLEXIBLE if flexible else _NO_ERRORS
        return
    if type(message) is not str:
        raise _Unwritten
    _count(out, 0, flexible)  # record errors
    _string(out, message, flexible)
    if flexible:
        out.append(0)  # no tagged fields (current leader)
