"""Bounded decompression: a payload that decompresses past its bound is a CompressionError (a
produced batch: CorruptRecordError, Kafka's CORRUPT_MESSAGE), and memory stays near the bound
whatever the payload claims (a "zip bomb")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wherry.protocol import compression
from wherry.protocol.records import (
    CorruptRecordError,
    build_batch,
    decompressed_limit,
    iter_records,
    validate_batch,
)

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
MiB = 1024 * 1024


@pytest.mark.parametrize("codec", CODECS, ids=[compression.CODEC_NAMES[c] for c in CODECS])
def test_bound_refuses_more_and_keeps_exact(codec: int) -> None:
    data = bytes(range(256)) * 4096 + b"\0" * (3 * MiB)  # 4 MiB
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed, len(data)) == data
    assert compression.decompress(codec, packed) == data
    with pytest.raises(compression.CompressionError, match=r"more than|exceeds"):
        compression.decompress(codec, packed, len(data) - 1)
    with pytest.raises(compression.CompressionError):
        compression.decompress(codec, packed, MiB)
    # the thread's scratch area serves again after a refusal
    assert compression.decompress(codec, compression.compress(codec, b"abc")) == b"abc"


@pytest.mark.parametrize("codec", CODECS, ids=[compression.CODEC_NAMES[c] for c in CODECS])
def test_corrupt_payloads_are_compression_errors(codec: int) -> None:
    packed = bytearray(compression.compress(codec, b"hello world " * 1000))
    for at in range(0, len(packed), max(1, len(packed) // 40)):
        broken = bytes(packed[:at]) + b"\xff\xff\xff\xff" + bytes(packed[at + 4 :])
        try:
            out = compression.decompress(codec, broken, 64 * 1024)
        except compression.CompressionError:
            continue
        assert len(out) <= 64 * 1024


def test_decompressed_limit() -> None:
    assert decompressed_limit(1_000_000) == 16 * MiB
    assert decompressed_limit(1_048_588) == 16 * 1_048_588
    assert decompressed_limit(10 * MiB) == 160 * MiB


_BUILD = """
    import sys
    from wherry.protocol.records import build_batch
    codec, size, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with open(path, "wb") as f:
        f.write(build_batch([(b"k", bytes(size))], compression=codec))
"""

_VALIDATE = """
    import resource, sys
    from wherry.protocol.records import RecordError, validate_batch
    batch = open(sys.argv[1], "rb").read()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        validate_batch(batch, max_message_bytes=1_048_588)
        print("accepted")
    except RecordError as e:
        print(type(e).__name__, e.error_code if hasattr(e, "error_code") else "", file=sys.stderr)
        print("refused")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) // 1024)
"""


@pytest.mark.parametrize("codec", CODECS, ids=[compression.CODEC_NAMES[c] for c in CODECS])
def test_zip_bomb_batch_is_refused_within_bounded_memory(codec: int, tmp_path: Path) -> None:
    """A batch of a few KiB whose one record decompresses to 192 MiB: refused as corrupt, the
    peak memory rising by less than the 16 MiB bound plus slack, not by the 192 MiB. (Snappy
    packs zeros about 21:1 only: its batch under 1 MiB decompresses to 19 MiB.)"""
    path = tmp_path / "bomb.batch"
    size = 19 * MiB if codec == compression.SNAPPY else 192 * MiB
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_BUILD), str(codec), str(size), str(path)],
        check=True,
        timeout=120,
    )
    assert path.stat().st_size < 1_048_588
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_VALIDATE), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    verdict, grown_mib = child.stdout.split()
    assert verdict == "refused", child.stderr
    assert "CorruptRecordError" in child.stderr
    assert int(grown_mib) < 16 + 24, child.stdout


def test_small_compressed_batch_still_reads() -> None:
    for codec in CODECS:
        batch = build_batch([(b"k", b"v" * 1000)] * 50, compression=codec)
        validate_batch(batch, max_message_bytes=1_048_588)
        assert [r.value for r in iter_records(batch)] == [b"v" * 1000] * 50


def test_bomb_over_the_bound_in_validate_is_corrupt() -> None:
    batch = build_batch([(b"k", bytes(17 * MiB))], compression=compression.ZSTD)
    with pytest.raises(CorruptRecordError, match="more than"):
        validate_batch(batch, max_message_bytes=1_048_588)
