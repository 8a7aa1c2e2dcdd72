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
from wherry.protocol.varint import put_uvarint

__all__ = [
    "FetchAnswer",
    "PartitionAnswer",
    "decode_fetch_v12_response",
    "encode_fetch_v12_parts",
]

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
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


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def need(self, n: int) -> int:
        at = self.pos
        if n < 0 or at + n > len(self.buf):
            raise ResponseDecodeError(
                f"Fetch answer ends at byte {len(self.buf)}, {n} more bytes needed at {at}"
            )
        self.pos = at + n
        return at

    def struct(self, s: struct.Struct) -> tuple[int, ...]:
        return s.unpack_from(self.buf, self.need(s.size))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (b,) = self.buf[self.need(1) : self.pos]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ResponseDecodeError("unsigned varint longer than 5 bytes")

    def compact_len(self) -> int:
        """A compact (nullable) length: -1 for null."""
        return self.uvarint() - 1

    def compact_str(self) -> str:
        n = self.compact_len()
        if n < 0:
            raise ResponseDecodeError("null topic name in a Fetch answer")
        at = self.need(n)
        try:
            return str(self.buf[at : at + n], "utf-8")
        except UnicodeDecodeError as e:
            raise ResponseDecodeError(f"topic name is not UTF-8: {e}") from None

    def tagged(self) -> dict[int, memoryview]:
        out: dict[int, memoryview] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            at = self.need(size)
            out[tag] = self.buf[at : at + size]
        return out


def decode_fetch_v12_response(
    frame: bytes | bytearray | memoryview, *, expect_correlation_id: int | None = None
) -> tuple[int, FetchAnswer]:
    """(correlation id, answer) of one Fetch v12 response frame (without its size prefix).
    Records are views of `frame` (kept alive by them). Raises ResponseDecodeError on a frame
    that is not a whole, well-formed answer."""
    r = _Reader(memoryview(frame).cast("B"), 0)
    (correlation_id,) = r.struct(_I32)
    if expect_correlation_id is not None and correlation_id != expect_correlation_id:
        raise ResponseDecodeError(
            f"correlation id {correlation_id} in the answer to request {expect_correlation_id}"
            " (API key 1 v12)"
        )
    r.tagged()  # response header v1
    throttle, error, session_id = r.struct(_TOP)
    responses: list[tuple[str, list[PartitionAnswer]]] = []
    for _ in range(max(0, r.compact_len())):
        topic = r.compact_str()
        parts: list[PartitionAnswer] = []
        for _ in range(max(0, r.compact_len())):
            index, code, hw, lso, start = r.struct(_PART)
            aborted: list[tuple[int, int]] | None = None
            n = r.compact_len()
            if n >= 0:
                aborted = []
                for _ in range(n):
                    pid, first = r.struct(_ABORTED)
                    r.tagged()
                    aborted.append((pid, first))
            (preferred,) = r.struct(_I32)
            size = r.compact_len()
            records = None
            if size >= 0:
                at = r.need(size)
                records = r.buf[at : at + size]
            diverging = None
            raw = r.tagged().get(_DIVERGING_EPOCH_TAG)
            if raw is not None:
                sub = _Reader(raw, 0)
                diverging = sub.struct(_EPOCH_END)
                sub.tagged()
            parts.append(
                PartitionAnswer(
                    index,
                    code,
                    hw,
                    lso,
                    start,
                    (int(diverging[0]), int(diverging[1])) if diverging is not None else None,
                    aborted,
                    preferred,
                    records,
                )
            )
        r.tagged()
        responses.append((topic, parts))
    r.tagged()
    if r.pos != len(r.buf):
        raise ResponseDecodeError(f"{len(r.buf) - r.pos} bytes after the Fetch answer")
    return correlation_id, FetchAnswer(throttle, error, session_id, responses)


# --- the leader's side: a lean encoder for Fetch v12 answers ------------------------------

_ENC_HEAD: Final = struct.Struct(">iiBihi")  # size, correlation id, header tags, throttle,
# error code, session id
_ENC_PART: Final = struct.Struct(">ihqqq")
_ENC_I32: Final = struct.Struct(">i")
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
            out += _ENC_I32.pack(p.get("preferred_read_replica", -1))
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
        _ENC_I32.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    chunks.append(bytes(out))
    size = sum(len(c) for c in chunks) - 4
    first = bytearray(chunks[0])  # type: ignore[arg-type]
    _ENC_I32.pack_into(first, 0, size)
    chunks[0] = bytes(first)
    return chunks
