"""A lean decoder for the follower's Fetch answer (key 1, v12: flexible, topics by name).

The replica fetchers read one Fetch answer per round per leader, mostly one partition with
up to `replica.fetch.max.bytes` of records. kio's decoder copies every partition's records
out of the frame into a new bytes object; this one reads the same fields with `struct` and
hands the records out as *views* of the frame (no copy), so a follower's records go from the
socket buffer to its segment file without being copied in Python. Tests compare it with
`codec.decode_response` and check that truncated or malformed frames raise
`ResponseDecodeError`. The leader's side writes the same answers with
`encode_fetch_v12_parts` (kio's entity building and writer were most of the cost of a
follower's round there); tests compare it with kio's encoding byte for byte. Pure.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import Any, Final

from wherry.protocol.codec import ResponseDecodeError
from wherry.protocol.primitives import INT32
from wherry.protocol.varint import put_uvarint
from wherry.protocol.wire import DecodeError, Reader

__all__ = [
    "FetchAnswer",
    "PartitionAnswer",
    "decode_fetch_v12_response",
    "encode_fetch_v12_parts",
]

_TOP: Final = struct.Struct(">ihi")  # throttle time, error code, session id
_PART: Final = struct.Struct(">ihqqq")  # partition, error, HW, LSO, log start offset
_EPOCH_END: Final = struct.Struct(">iq")  # diverging_epoch: epoch, end offset
_ABORTED: Final = struct.Struct(">qq")
_DIVERGING_EPOCH_TAG: Final = 0


@dataclass(slots=True)
class PartitionAnswer:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    # (epoch, end offset) when the answer carries the diverging_epoch tag (KIP-320)
    diverging_epoch: tuple[int, int] | None
    aborted_transactions: list[tuple[int, int]] | None
    preferred_read_replica: int
    records: memoryview | None  # a view of the frame: valid while the frame is


@dataclass(slots=True)
class FetchAnswer:
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[tuple[str, list[PartitionAnswer]]]


def decode_fetch_v12_response(
    frame: bytes | bytearray | memoryview, *, expect_correlation_id: int | None = None
) -> tuple[int, FetchAnswer]:
    """(correlation id, answer) of one Fetch v12 response frame (without its size prefix).
    Records are views of `frame` (kept alive by them). Raises ResponseDecodeError on a frame
    that is not a whole, well-formed answer."""
    r = Reader(memoryview(frame))
    try:
        correlation_id = r.int32()
        if expect_correlation_id is not None and correlation_id != expect_correlation_id:
            raise ResponseDecodeError(
                f"correlation id {correlation_id} in the answer to request "
                f"{expect_correlation_id} (API key 1 v12)"
            )
        r.tagged_fields()  # response header v1
        throttle, error, session_id = r.unpack(_TOP)
        responses: list[tuple[str, list[PartitionAnswer]]] = []
        for _ in range(max(0, r.nullable_array_length(True))):
            topic = r.string(True)
            parts = [
                _read_partition(r) for _ in range(max(0, r.nullable_array_length(True)))
            ]
            r.tagged_fields()
            responses.append((topic, parts))
        r.tagged_fields()
        r.expect_end("the Fetch answer")
    except DecodeError as e:
        raise ResponseDecodeError(f"Fetch answer: {e}") from None
    return correlation_id, FetchAnswer(throttle, error, session_id, responses)


def _read_partition(r: Reader) -> PartitionAnswer:
    index, code, hw, lso, start = r.unpack(_PART)
    aborted: list[tuple[int, int]] | None = None
    n = r.nullable_array_length(True, _ABORTED.size + 1)
    if n >= 0:
        aborted = []
        for _ in range(n):
            pid, first = r.unpack(_ABORTED)
            r.tagged_fields()
            aborted.append((pid, first))
    preferred = r.int32()
    size = r.uvarint() - 1
    records = r.view(size) if size >= 0 else None
    diverging: list[tuple[int, int]] = []

    def read_diverging(sub: Reader) -> None:
        epoch, end_offset = sub.unpack(_EPOCH_END)
        sub.tagged_fields()
        diverging.append((epoch, end_offset))

    r.tagged_fields({_DIVERGING_EPOCH_TAG: read_diverging})
    return PartitionAnswer(
        index,
        code,
        hw,
        lso,
        start,
        diverging[0] if diverging else None,
        aborted,
        preferred,
        records,
    )


# --- the leader's side: a lean encoder for Fetch v12 answers ------------------------------

_ENC_HEAD: Final = struct.Struct(">iiBihi")  # size, correlation id, header tags, throttle,
# error code, session id
_ENC_PART: Final = struct.Struct(">ihqqq")
_ENC_ABORTED: Final = struct.Struct(">qqB")
_TOP_KEYS: Final = frozenset(("throttle_time", "error_code", "session_id", "responses"))
_TOPIC_KEYS: Final = frozenset(("topic", "topic_id", "partitions"))
_PART_KEYS: Final = frozenset(
    (
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "preferred_read_replica",
        "records",
    )
)


class _Unhandled(Exception):
    pass


def encode_fetch_v12_parts(
    correlation_id: int, data: Mapping[str, Any]
) -> bytes | list[bytes | Sized] | None:
    """The Fetch v12 answer of the handler's mapping `data`, as `encode_response_parts`
    makes it through kio (byte for byte; tests compare): the frame, or [bytes, region, ...,
    bytes] when some `records` are file regions. None for a shape it leaves to kio (fields
    it does not write, such as tagged ones, or values of another type)."""
    try:
        return _encode_v12(correlation_id, data)
    except (_Unhandled, struct.error, TypeError, AttributeError, KeyError):
        return None


def _encode_v12(correlation_id: int, data: Mapping[str, Any]) -> bytes | list[bytes | Sized]:
    if not _TOP_KEYS.issuperset(data):
        raise _Unhandled
    throttle = data.get("throttle_time", 0)
    if isinstance(throttle, datetime.timedelta):
        throttle = throttle // datetime.timedelta(milliseconds=1)
    out = bytearray(
        _ENC_HEAD.pack(
            0, correlation_id, 0, throttle, data["error_code"], data.get("session_id", 0)
        )
    )
    chunks: list[bytes | Sized] = []
    responses = data["responses"]
    put_uvarint(len(responses) + 1, out)
    pack_part = _ENC_PART.pack
    for topic in responses:
        if not _TOPIC_KEYS.issuperset(topic):
            raise _Unhandled
        name = topic["topic"]
        if not isinstance(name, str):
            raise _Unhandled
        encoded = name.encode()
        put_uvarint(len(encoded) + 1, out)
        out += encoded
        parts = topic["partitions"]
        put_uvarint(len(parts) + 1, out)
        for p in parts:
            if not _PART_KEYS.issuperset(p):
                raise _Unhandled
            out += pack_part(
                p["partition_index"],
                p["error_code"],
                p["high_watermark"],
                p.get("last_stable_offset", -1),
                p.get("log_start_offset", -1),
            )
            aborted = p.get("aborted_transactions", ())  # missing: kio writes it empty
            if aborted is None:
                out.append(0)
            else:
                put_uvarint(len(aborted) + 1, out)
                for a in aborted:
                    if len(a) != 2:
                        raise _Unhandled
                    out += _ENC_ABORTED.pack(a["producer_id"], a["first_offset"], 0)
            out += INT32.pack(p.get("preferred_read_replica", -1))
            records = p["records"]
            if records is None:
                out.append(0)
            elif isinstance(records, bytes | bytearray | memoryview):
                put_uvarint(len(records) + 1, out)
                out += records
            else:
                put_uvarint(len(records) + 1, out)
                chunks.append(bytes(out))
                chunks.append(records)
                out = bytearray()
            out.append(0)  # partition tagged fields
        out.append(0)  # topic tagged fields
    out.append(0)  # body tagged fields
    if not chunks:
        INT32.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    chunks.append(bytes(out))
    size = sum(len(c) for c in chunks) - 4
    first = bytearray(chunks[0])  # type: ignore[arg-type]
    INT32.pack_into(first, 0, size)
    chunks[0] = bytes(first)
    return chunks
