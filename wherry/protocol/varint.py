"""Kafka's unsigned varints (UNSIGNED_VARINT: 7 bits a byte, low group first) written by the
lean codecs that do not go through kio: Fetch v12 requests and answers, ApiVersions during
the start, the length prefixes around a Fetch answer's file regions, record batches; and by
`wire.Writer`. Free of kio, so the start can use it before kio is imported."""

from __future__ import annotations

__all__ = ["put_uvarint", "uvarint_bytes"]


def put_uvarint(n: int, out: bytearray) -> None:
    """Append `n` (>= 0) to `out` as an unsigned varint."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint_bytes(n: int) -> bytes:
    """`n` (>= 0) as an unsigned varint."""
    out = bytearray()
    put_uvarint(n, out)
    return bytes(out)
