"""A lean decoder for the follower's Fetch answer (key 1, v12: flexible, topics by name).

The replica fetchers read one Fetch answer per round per leader, mostly one partition with
up to `replica.fetch.max.bytes` of records. kio's decoder copies every partition's records
out of the frame into a new bytes object; this one reads the same fields with `struct` and
hands the records out as *views* of the frame (no copy), so a follower's records go from the
socket buffer to its segment file without being copied in Python. Tests compare it with
`codec.decode_response` and check that truncated or malformed frames raise
`ResponseDecodeError`. Pure.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from wherry.protocol.codec import ResponseDecodeError

__all__ = ["FetchAnswer", "PartitionAnswer", "decode_fetch_v12_response"]

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
