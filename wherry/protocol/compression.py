"""Kafka record-batch compression codecs (sans-I/O), backed by ``cramjam``.

Codec ids are the values of bits 0-2 of a record batch's ``attributes``:
0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Kafka specifics:

* snappy: the Java client (snappy-java ``SnappyOutputStream``) and librdkafka write the *xerial*
  framing: an 8 byte magic ``\\x82SNAPPY\\x00``, int32 version, int32 min-compatible version, then
  ``[int32 length][raw snappy block]`` chunks.  We write that framing and read both framed and raw
  snappy blocks.
* lz4: the LZ4 *frame* format with independent blocks (KIP-57; what KafkaLZ4BlockOutputStream
  writes).

Decompression is bounded: a payload is decompressed into a scratch area of at most `max_size`
bytes (anonymous memory whose pages exist only once written, one per thread), so a few
kilobytes that claim gigabytes (a "zip bomb") cost at most `max_size` bytes and end in
`CompressionError`, never in a process that balloons.
"""

from __future__ import annotations

import mmap
import struct
import threading
from typing import TYPE_CHECKING, Any, Final

from wherry.protocol.primitives import INT32

if TYPE_CHECKING:
    import cramjam

__all__ = [
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "CompressionError",
    "UnsupportedCompressionError",
    "codec_from_name",
    "compress",
    "decompress",
]

NONE: Final = 0
GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4

CODEC_NAMES: Final[dict[int, str]] = {
    NONE: "none",
    GZIP: "gzip",
    SNAPPY: "snappy",
    LZ4: "lz4",
    ZSTD: "zstd",
}

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = struct.Struct(">8sii")
_XERIAL_HEADER_SIZE: Final = _XERIAL_HEADER.size  # 16
_XERIAL_VERSION: Final = 1
_XERIAL_COMPAT_VERSION: Final = 1
# snappy-java's SnappyOutputStream default block size.
_XERIAL_BLOCK_SIZE: Final = 32 * 1024

# What a batch may decompress to when the caller names no bound.
DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 256 * 1024 * 1024
# Scratch pages up to this size stay resident between calls; past it they are given back.
_KEEP_SCRATCH_BYTES: Final = 8 * 1024 * 1024
_PAGE: Final = mmap.PAGESIZE


class UnsupportedCompressionError(ValueError):
    """Unknown / unsupported codec id (5, 6, 7 or anything outside 0-4)."""


class CompressionError(ValueError):
    """Compressed payload is corrupt and cannot be decompressed."""


def codec_from_name(name: str) -> int:
    """Map a ``compression.type`` style name (``gzip``, ``snappy``...) to a codec id."""
    lowered = name.strip().lower()
    for codec, codec_name in CODEC_NAMES.items():
        if codec_name == lowered:
            return codec
    raise UnsupportedCompressionError(f"unknown compression codec name {name!r}")


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with ``codec`` using the framing Kafka clients expect."""
    match codec:
        case 0:
            return bytes(data)
        case 1:
            return bytes(cramjam.gzip.compress(data))
        case 2:
            return _xerial_compress(data)
        case 3:
            return _lz4_compress(data)
        case 4:
            return bytes(cramjam.zstd.compress(data, level=3))
        case _:
            raise UnsupportedCompressionError(f"unsupported compression codec {codec}")


class _LazyCramjam:
    """cramjam, imported with the first compressed batch (its native module is ~1.5 MB of an
    idle broker's memory): replaces itself with the module on first use."""

    def __getattr__(self, name: str) -> Any:
        import cramjam as module

        globals()["cramjam"] = module
        return getattr(module, name)


if not TYPE_CHECKING:
    cramjam = _LazyCramjam()

_MODULE_NAMES: Final[dict[int, str]] = {GZIP: "gzip", LZ4: "lz4", ZSTD: "zstd"}


class _Scratch(threading.local):
    area: mmap.mmap | None = None


_SCRATCH = _Scratch()


def _scratch(size: int) -> mmap.mmap:
    area = _SCRATCH.area
    if area is None or len(area) < size:
        if area is not None:
            area.close()
        area = _SCRATCH.area = mmap.mmap(-1, size)
    return area


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress ``data`` to at most ``max_size`` bytes; raises :class:`CompressionError` on
    corrupt input or a larger result and :class:`UnsupportedCompressionError` on an unknown
    codec."""
    if codec == 0:
        return bytes(data)
    if codec not in (1, 2, 3, 4):
        raise UnsupportedCompressionError(f"unsupported compression codec {codec}")
    payload = bytes(data)
    name = CODEC_NAMES[codec]
    try:
        if codec == 2:
            return _snappy_decompress(payload, max_size)
        return _decompress_bounded(
            getattr(cramjam, _MODULE_NAMES[codec]), payload, max_size, name
        )
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError / etc.
        raise CompressionError(f"corrupt {name} payload: {exc}") from exc


def _decompress_bounded(module: object, payload: bytes, max_size: int, name: str) -> bytes:
    """`module`'s decompression into the thread's scratch area: one byte more than allowed
    means too large (cramjam stops once the area is full)."""
    limit = max_size + 1
    area = _scratch(limit)
    view = memoryview(area)[:limit]
    used = limit
    try:
        used = int(module.decompress_into(payload, view))  # type: ignore[attr-defined]
        if used > max_size:
            raise CompressionError(f"{name} payload decompresses to more than {max_size} bytes")
        return bytes(view[:used])
    except CompressionError:
        raise
    except Exception as exc:
        if "whole buffer" in str(exc):  # cramjam: the output area is full
            raise CompressionError(
                f"{name} payload decompresses to more than {max_size} bytes"
            ) from exc
        raise
    finally:
        view.release()
        if used > _KEEP_SCRATCH_BYTES:
            start = _KEEP_SCRATCH_BYTES
            area.madvise(
                mmap.MADV_DONTNEED, start, min(len(area), -(-used // _PAGE) * _PAGE) - start
            )


def _lz4_compress(data: bytes) -> bytes:
    # KafkaLZ4BlockInputStream (Java) cannot read linked blocks (KIP-57); cramjam's one-shot
    # lz4.compress links them, so use the streaming compressor with independent blocks.
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _xerial_compress(data: bytes) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPAT_VERSION)]
    # An empty payload still gets one (empty) block: some readers (e.g. aiokafka) only
    # recognise the xerial framing when there is data after the 16-byte header.
    for start in range(0, max(len(view), 1), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_block(block: bytes | memoryview, room: int) -> bytes:
    """One raw snappy block, whose header states its decompressed size: checked first."""
    size = int(cramjam.snappy.decompress_raw_len(block))
    if size > room:
        raise CompressionError(f"snappy block of {size} bytes exceeds the {room} bytes allowed")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, max_size)
    if len(data) < _XERIAL_HEADER_SIZE:
        raise CompressionError("truncated xerial snappy header")
    out: list[bytes] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    while pos < end:
        # snappy-java accepts concatenated streams, each with its own header.
        if data.startswith(XERIAL_MAGIC, pos):
            if pos + _XERIAL_HEADER_SIZE > end:
                raise CompressionError("truncated xerial snappy header")
            pos += _XERIAL_HEADER_SIZE
            continue
        if pos + 4 > end:
            raise CompressionError("truncated xerial snappy block length")
        (length,) = INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CompressionError(f"bad xerial snappy block length {length}")
        block = _snappy_block(data[pos : pos + length], max_size - total)
        total += len(block)
        out.append(block)
        pos += length
    return b"".join(out)
