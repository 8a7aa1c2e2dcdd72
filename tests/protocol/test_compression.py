"""Kafka compression codecs: round trips, Kafka framing specifics, interop and corrupt input."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec

from wherry.protocol.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_MAGIC,
    ZSTD,
    CompressionError,
    UnsupportedCompressionError,
    codec_from_name,
    compress,
    decompress,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]

PAYLOADS = {
    "empty": b"",
    "small": b"hello kafka",
    "text_100k": b"the quick brown fox jumps over the lazy dog " * 2500,
    "random_200k": os.urandom(200_000),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("payload_name", sorted(PAYLOADS))
def test_round_trip(codec: int, payload_name: str) -> None:
    payload = PAYLOADS[payload_name]
    compressed = compress(codec, payload)
    assert isinstance(compressed, bytes)
    assert decompress(codec, compressed) == payload
    assert decompress(codec, memoryview(compressed)) == payload
    assert decompress(codec, bytearray(compressed)) == payload


def test_compression_actually_compresses() -> None:
    payload = PAYLOADS["text_100k"]
    for codec in (GZIP, SNAPPY, LZ4, ZSTD):
        assert len(compress(codec, payload)) < len(payload) // 5


def test_snappy_writes_xerial_framing() -> None:
    payload = PAYLOADS["text_100k"]  # > 32 KiB: several xerial blocks
    out = compress(SNAPPY, payload)
    assert out.startswith(XERIAL_MAGIC)
    assert struct.unpack_from(">ii", out, 8) == (1, 1)
    # Walk the [len][block] chunks: every block decompresses to <= 32 KiB.
    pos, blocks = 16, []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(out)
    assert len(blocks) == -(-len(payload) // 32768)
    assert all(len(b) <= 32768 for b in blocks)
    assert b"".join(blocks) == payload


def test_snappy_reads_raw_blocks() -> None:
    payload = PAYLOADS["text_100k"]
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(SNAPPY, raw) == payload


def test_snappy_reads_concatenated_xerial_streams() -> None:
    a, b = b"first stream " * 100, b"second stream " * 100
    assert decompress(SNAPPY, compress(SNAPPY, a) + compress(SNAPPY, b)) == a + b


def test_lz4_uses_frame_format_with_independent_blocks() -> None:
    out = compress(LZ4, PAYLOADS["random_200k"])
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg = out[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence (KafkaLZ4BlockInputStream needs it, KIP-57)
    assert out[5] & 0x70 == 0x40  # max block size 64 KiB


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_interop_with_aiokafka_codecs(codec: int) -> None:
    """aiokafka's codecs follow the Java client (xerial snappy, lz4 frame, ...)."""
    encoders = {
        GZIP: (aiokafka_codec.gzip_encode, aiokafka_codec.gzip_decode),
        SNAPPY: (aiokafka_codec.snappy_encode, aiokafka_codec.snappy_decode),
        LZ4: (aiokafka_codec.lz4_encode, aiokafka_codec.lz4_decode),
        ZSTD: (aiokafka_codec.zstd_encode, aiokafka_codec.zstd_decode),
    }
    encode, decode = encoders[codec]
    for payload in PAYLOADS.values():
        assert decompress(codec, encode(payload)) == payload
        assert decode(compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionError):
        decompress(codec, b"x")
    assert issubclass(UnsupportedCompressionError, ValueError)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize(
    "garbage",
    [b"\x00", b"definitely not compressed data" * 3, b"\xff" * 64, os.urandom(512)],
)
def test_corrupt_payload_raises_compression_error(codec: int, garbage: bytes) -> None:
    try:
        result = decompress(codec, garbage)
    except CompressionError:
        return
    # A few byte strings happen to be valid raw snappy; anything returned must be bytes.
    assert codec == SNAPPY
    assert isinstance(result, bytes)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_truncated_payload_raises_compression_error(codec: int) -> None:
    compressed = compress(codec, PAYLOADS["text_100k"])
    for cut in (1, len(compressed) // 2, len(compressed) - 1):
        with pytest.raises(CompressionError):
            decompress(codec, compressed[:cut])


def test_xerial_bad_block_length() -> None:
    good = compress(SNAPPY, b"abc" * 100)
    bad = good[:16] + struct.pack(">i", 10_000) + good[20:]
    with pytest.raises(CompressionError):
        decompress(SNAPPY, bad)
    with pytest.raises(CompressionError):
        decompress(SNAPPY, good[:16] + struct.pack(">i", -5))
    with pytest.raises(CompressionError):
        decompress(SNAPPY, good[:16] + b"\x00\x00")


def test_codec_from_name() -> None:
    assert [codec_from_name(n) for n in ("none", "gzip", "snappy", "lz4", "ZSTD")] == CODECS
    with pytest.raises(UnsupportedCompressionError):
        codec_from_name("brotli")
