"""Responses whose record bytes are not in memory (zero-copy Fetch).

A Fetch handler may answer a partition's `records` with a *region*: any sized object that is
not bytes (the log's `FileRegion`, sent by the network layer straight from the segment file).
`encode_response_parts` encodes the response with a small placeholder in place of each
region, then cuts the frame there: the result is a list of byte chunks and regions, in wire
order, whose total length the frame's size prefix already counts. Without regions it is the
plain frame of `codec.encode_response`.

The placeholder is a fixed 16-byte marker (its last 4 bytes the region's index) found again
by search in the encoded frame; when regions are present every `records` field of the
response is a region or empty, so no client bytes are in the frame to be mistaken for it,
and the other fields (names, messages) are text, which never holds its 0x00/0xFF bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Any, Final

from wherry.protocol.primitives import INT32 as _SIZE
from wherry.protocol.primitives import UINT32 as _INDEX
from wherry.protocol.varint import uvarint_bytes

__all__ = ["ResponsePart", "encode_response_parts", "encode_response_parts_with_kio"]

FETCH_KEY: Final = 1
ResponsePart = bytes | Sized  # bytes, or a region of a file (see the module docstring)

_MARKER: Final = b"\xff\x00wherry-r\x00\xff"  # + a 4-byte index: 16 bytes
_MARKER_LEN: Final = len(_MARKER) + _INDEX.size


def _is_region(records: object) -> bool:
    return records is not None and not isinstance(records, bytes | bytearray | memoryview)


def encode_response_parts(
    api_key: int, api_version: int, correlation_id: int, data: Mapping[str, Any] | Any
) -> bytes | list[ResponsePart]:
    """`encode_response`, except that a Fetch response's region `records` stay out of the
    frame: the answer is then [bytes, region, bytes, region, ..., bytes] (the first chunk
    starts with the size prefix of the whole response). `data`'s regions are replaced by
    placeholders in place. Fetch v12 answers (what followers ask) are written by
    `fetch_response.encode_fetch_v12_parts`; what it does not write goes through kio."""
    if api_key == FETCH_KEY and api_version == 12 and isinstance(data, Mapping):
        from wherry.protocol.fetch_response import encode_fetch_v12_parts

        lean = encode_fetch_v12_parts(correlation_id, data)  # None: kio's path below
        if lean is not None:
            return lean
    return encode_response_parts_with_kio(api_key, api_version, correlation_id, data)


def encode_response_parts_with_kio(
    api_key: int, api_version: int, correlation_id: int, data: Mapping[str, Any] | Any
) -> bytes | list[ResponsePart]:
    """`encode_response_parts` through kio's encoder for every API and version (the reference
    the lean Fetch v12 writer is tested against)."""
    # The kio codec is not imported with this module: the network layer, which imports it
    # for `ResponsePart`, is up before it (docs/architecture.md, "Start").
    import wherry.protocol.codec as codec

    regions: list[Sized] = []
    if api_key == FETCH_KEY and isinstance(data, Mapping):
        for topic in data.get("responses", ()):
            for part in topic.get("partitions", ()):
                records = part.get("records")
                if _is_region(records):
                    part["records"] = _MARKER + _INDEX.pack(len(regions))
                    regions.append(records)
    frame = codec.encode_response(api_key, api_version, correlation_id, data)
    if not regions:
        return frame
    flexible = bool(getattr(codec.response_class(api_key, api_version), "__flexible__", False))
    # COMPACT_RECORDS (flexible versions): uvarint(length + 1); RECORDS: int32 length
    old_prefix = uvarint_bytes(_MARKER_LEN + 1) if flexible else _SIZE.pack(_MARKER_LEN)
    parts: list[ResponsePart] = []
    prev = _SIZE.size
    for i, region in enumerate(regions):
        at = frame.find(old_prefix + _MARKER + _INDEX.pack(i), prev)
        if at < 0:
            raise AssertionError(f"region placeholder {i} not found in the encoded response")
        n = len(region)
        parts.append(frame[prev:at] + (uvarint_bytes(n + 1) if flexible else _SIZE.pack(n)))
        parts.append(region)
        prev = at + len(old_prefix) + _MARKER_LEN
    parts.append(frame[prev:])
    size = sum(len(p) for p in parts)
    parts[0] = _SIZE.pack(size) + bytes(parts[0])  # type: ignore[arg-type]
    return parts
