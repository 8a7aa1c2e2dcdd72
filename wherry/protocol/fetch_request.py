"""A lean encoder for the follower's Fetch request (key 1, v12: flexible, topics by name).

The replica fetchers send one Fetch per round per leader; building it through kio's entities
cost more than the rest of the follower's round. This writes the same bytes straight with
`struct` (tests compare it with `codec.encode_request`). The leader reads them with kio's
native reader (about 2 µs a request; a pure-Python decoder making the same kio entities
measured 9 µs, so there is none). Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from wherry.protocol.primitives import INT32
from wherry.protocol.varint import put_uvarint

FETCH_KEY = 1
VERSION = 12

_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_FIXED = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation,
# session id, session epoch
_PARTITION = struct.Struct(">iiqiqiB")  # partition, current leader epoch, fetch offset,
# last fetched epoch, log start offset, partition max bytes, no tagged fields

# (partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset,
#  partition_max_bytes)
PartitionFields = tuple[int, int, int, int, int, int]


def _compact_str(s: str, out: bytearray) -> None:
    b = s.encode()
    put_uvarint(len(b) + 1, out)
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
    put_uvarint(len(topics) + 1, out)
    pack = _PARTITION.pack
    for name, parts in topics:
        _compact_str(name, out)
        put_uvarint(len(parts) + 1, out)
        for p in parts:
            out += pack(*p, 0)
        out.append(0)  # topic tagged fields
    forgotten = list(forgotten)
    put_uvarint(len(forgotten) + 1, out)
    for name, indexes in forgotten:
        _compact_str(name, out)
        put_uvarint(len(indexes) + 1, out)
        for i in indexes:
            out += INT32.pack(i)
        out.append(0)
    _compact_str(rack_id, out)
    out.append(0)  # body tagged fields
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)

