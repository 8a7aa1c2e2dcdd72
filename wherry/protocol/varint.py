"""Kafka's unsigned varints (UNSIGNED_VARINT: 7 bits a byte, low group first) written by the
lean codecs that do not go through kio: Fetch v12 requests and answers, ApiVersions during
the start, the length prefixes around a Fetch answer's file regions, record batches; and by
`wire.Writer`; and read, position in and out, by the readers that keep positions in locals
rather than a `wire.Reader` (the ApiVersions and Produce fast paths, the decode guard's
walkers). Free of kio, so the start can use it before kio is imported."""

from __future__ import annotations

__all__ = ["VarintTooLongError", "put_uvarint", "uvarint_at", "uvarint_bytes"]


class VarintTooLongError(ValueError):
    """An unsigned varint goes on past the bytes its type may take."""


def uvarint_at(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 5
) -> tuple[int, int]:
    """(value, position after) of the unsigned varint at `pos` of `buf`, of at most
    `max_bytes` bytes (5: an int32's). IndexError past the end of `buf`; `VarintTooLongError`
    past `max_bytes`."""
    value = shift = 0
    for _ in range(max_bytes):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise VarintTooLongError(f"varint longer than {max_bytes} bytes at offset {pos - max_bytes}")


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
