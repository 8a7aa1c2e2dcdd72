"""A lean codec for the follower's Fetch request (key 1, v12: flexible, topics by name).

The replica fetchers send one Fetch per round per leader; building it through kio's entities
cost more than the rest of the follower's round. This writes the same bytes straight with
`struct` (tests compare it with `codec.encode_request`). The leader reads them back with
`decode_fetch_v12` (kio's generic reader cost it as much again per round); it yields kio's
own entities, equal to what kio's reader makes, and leaves every other shape to kio. Pure.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterable, Sequence
from typing import Any, cast

from kio.schema.fetch.v12 import request as _v12

FETCH_KEY = 1
VERSION = 12

_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_FIXED = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation,
# session id, session epoch
_PARTITION = struct.Struct(">iiqiqiB")  # partition, current leader epoch, fetch offset,
# last fetched epoch, log start offset, partition max bytes, no tagged fields
_SIZE = struct.Struct(">i")
_INT32 = struct.Struct(">i")

# (partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
#  partition_max_bytes)
PartitionFields = tuple[int, int, int, int, int, int]


def _uvarint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _compact_str(s: str, out: bytearray) -> None:
    b = s.encode()
    _uvarint(len(b) + 1, out)
    out += b


def encode_fetch_v12(
    correlation_id: int,
    client_id: str | None,
    *,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    session_id: int,
    session_epoch: int,
    topics: Iterable[tuple[str, Sequence[PartitionFields]]],
    forgotten: Iterable[tuple[str, Sequence[int]]],
    rack_id: str = "",
) -> bytes:
    """A size-prefixed Fetch v12 request (request header v2)."""
    out = bytearray(4)
    cid = None if client_id is None else client_id.encode()
    out += _HEADER.pack(FETCH_KEY, VERSION, correlation_id, -1 if cid is None else len(cid))
    if cid:
        out += cid
    out.append(0)  # header tagged fields
    out += _FIXED.pack(
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
    )
    topics = list(topics)
    _uvarint(len(topics) + 1, out)
    pack = _PARTITION.pack
    for name, parts in topics:
        _compact_str(name, out)
        _uvarint(len(parts) + 1, out)
        for p in parts:
            out += pack(*p, 0)
        out.append(0)  # topic tagged fields
    forgotten = list(forgotten)
    _uvarint(len(forgotten) + 1, out)
    for name, indexes in forgotten:
        _compact_str(name, out)
        _uvarint(len(indexes) + 1, out)
        for i in indexes:
            out += _INT32.pack(i)
        out.append(0)
    _compact_str(rack_id, out)
    out.append(0)  # body tagged fields
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# --- the leader's side: a lean decoder for what our followers send -------------------------

_DEC_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_DEC_FIXED = struct.Struct(">iiiibii")
_DEC_PARTITION = struct.Struct(">iiqiqi")
_DEC_INT32 = struct.Struct(">i")


class _Unhandled(Exception):
    """Something the lean decoder leaves to kio's reader (which decides what it means)."""


def _read_uvarint(buf: bytes | memoryview, at: int) -> tuple[int, int]:
    b = buf[at]
    if b < 0x80:
        return b, at + 1
    value = b & 0x7F
    shift = 7
    at += 1
    while True:
        if shift > 28:
            raise _Unhandled
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def _read_compact_str(buf: bytes | memoryview, at: int) -> tuple[str, int]:
    n, at = _read_uvarint(buf, at)
    if n == 0:
        raise _Unhandled  # null: kio decides whether that is allowed
    end = at + n - 1
    if end > len(buf):
        raise _Unhandled
    return bytes(buf[at:end]).decode(), end


def decode_fetch_v12(frame: bytes | memoryview) -> tuple[str | None, Any] | None:
    """(client id, kio `FetchRequest` v12) from a request frame (no size prefix), for the
    plain shape our followers send (`encode_fetch_v12`); None for anything else — tagged
    fields, null arrays or strings, odd lengths, truncated or garbage bytes — which the caller
    hands to kio's reader, so errors are kio's. Equal to kio's decoding where it answers."""
    try:
        return _decode_v12(frame)
    except (_Unhandled, IndexError, struct.error, UnicodeDecodeError, ValueError, TypeError):
        return None


def _decode_v12(buf: bytes | memoryview) -> tuple[str | None, Any]:
    api_key, version, _corr, cid_len = _DEC_HEADER.unpack_from(buf, 0)
    if api_key != FETCH_KEY or version != VERSION:
        raise _Unhandled
    at = _DEC_HEADER.size
    client_id: str | None = None
    if cid_len >= 0:
        if at + cid_len > len(buf):
            raise _Unhandled
        client_id = bytes(buf[at : at + cid_len]).decode()
        at += cid_len
    elif cid_len != -1:
        raise _Unhandled
    if buf[at] != 0:
        raise _Unhandled  # header tagged fields
    at += 1
    replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = (
        _DEC_FIXED.unpack_from(buf, at)
    )
    at += _DEC_FIXED.size
    n_topics, at = _read_uvarint(buf, at)
    if n_topics == 0:
        raise _Unhandled
    unpack_part = _DEC_PARTITION.unpack_from
    part_size = _DEC_PARTITION.size
    topics = []
    for _ in range(n_topics - 1):
        name, at = _read_compact_str(buf, at)
        n_parts, at = _read_uvarint(buf, at)
        if n_parts == 0:
            raise _Unhandled
        parts = []
        for _ in range(n_parts - 1):
            p, leader_epoch, offset, last_epoch, log_start, max_part = unpack_part(buf, at)
            at += part_size
            if buf[at] != 0:
                raise _Unhandled  # partition tagged fields (replica directory id, ...)
            at += 1
            parts.append(
                _v12.FetchPartition(
                    partition=p,
                    current_leader_epoch=leader_epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                    log_start_offset=log_start,
                    partition_max_bytes=max_part,
                )
            )
        if buf[at] != 0:
            raise _Unhandled
        at += 1
        topics.append(_v12.FetchTopic(topic=cast(Any, name), partitions=tuple(parts)))
    n_forgotten, at = _read_uvarint(buf, at)
    if n_forgotten == 0:
        raise _Unhandled
    forgotten = []
    for _ in range(n_forgotten - 1):
        name, at = _read_compact_str(buf, at)
        n_idx, at = _read_uvarint(buf, at)
        if n_idx == 0:
            raise _Unhandled
        end = at + 4 * (n_idx - 1)
        if end > len(buf):
            raise _Unhandled
        indexes = tuple(_DEC_INT32.unpack_from(buf, i)[0] for i in range(at, end, 4))
        at = end
        if buf[at] != 0:
            raise _Unhandled
        at += 1
        forgotten.append(_v12.ForgottenTopic(topic=cast(Any, name), partitions=indexes))
    rack_id, at = _read_compact_str(buf, at)
    if buf[at] != 0:
        raise _Unhandled  # body tagged fields (cluster id)
    body = _v12.FetchRequest(
        replica_id=replica_id,
        max_wait=cast(Any, datetime.timedelta(milliseconds=max_wait)),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(topics),
        forgotten_topics_data=tuple(forgotten),
        rack_id=rack_id,
    )
    return client_id, body
