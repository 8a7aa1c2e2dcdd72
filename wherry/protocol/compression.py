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
"""

from __future__ import annotations

import struct
from typing import Final

import cramjam

__all__ = [
    "CODEC_NAMES",
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
_INT32: Final = struct.Struct(">i")


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


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress ``data``; raises :class:`CompressionError` on corrupt input and
    :class:`UnsupportedCompressionError` on an unknown codec."""
    if codec == 0:
        return bytes(data)
    if codec not in (1, 2, 3, 4):
        raise UnsupportedCompressionError(f"unsupported compression codec {codec}")
    payload = bytes(data)
    try:
        match codec:
            case 1:
                return bytes(cramjam.gzip.decompress(payload))
            case 2:
                return _snappy_decompress(payload)
            case 3:
                return bytes(cramjam.lz4.decompress(payload))
            case _:
                return bytes(cramjam.zstd.decompress(payload))
    except CompressionError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError / etc.
        name = CODEC_NAMES[codec]
        raise CompressionError(f"corrupt {name} payload: {exc}") from exc


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
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < _XERIAL_HEADER_SIZE:
        raise CompressionError("truncated xerial snappy header")
    out: list[bytes] = []
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
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CompressionError(f"bad xerial snappy block length {length}")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)
