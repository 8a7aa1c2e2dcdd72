"""Offset and time index files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from wherry.log.errors import CorruptIndexError, LogOffsetError
from wherry.log.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset


def test_offset_index_append_lookup(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", base_offset=100, max_index_size=80)
    assert idx.max_entries == 10
    assert idx.lookup(150) == OffsetPosition(100, 0)
    for i in range(1, 10):
        idx.append(100 + i * 10, i * 1000)
    assert idx.entries == 9
    assert idx.lookup(99) == OffsetPosition(100, 0)
    assert idx.lookup(109) == OffsetPosition(100, 0)
    assert idx.lookup(110) == OffsetPosition(110, 1000)
    assert idx.lookup(155) == OffsetPosition(150, 5000)
    assert idx.lookup(10**9) == OffsetPosition(190, 9000)
    with pytest.raises(LogOffsetError):
        idx.append(190, 9999)  # not increasing
    idx.append(200, 10_000)
    assert idx.is_full
    with pytest.raises(LogOffsetError):
        idx.append(210, 11_000)


def test_offset_index_truncate_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "b.index"
    idx = OffsetIndex(path, base_offset=0, max_index_size=4096)
    for i in range(1, 21):
        idx.append(i * 5, i * 100)
    idx.truncate_to(50)  # removes offsets >= 50
    assert idx.entries == 9
    assert idx.last_entry == OffsetPosition(45, 900)
    idx.truncate_to(47)  # no entry at 47: keeps 45
    assert idx.entries == 9
    idx.close()
    assert path.stat().st_size == 9 * 8  # trimmed on close

    idx = OffsetIndex(path, base_offset=0, max_index_size=4096)
    assert idx.entries == 9
    assert idx.lookup(46) == OffsetPosition(45, 900)
    idx.sanity_check(log_size=1000, full=True)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=900)  # last entry points past the log
    idx.resize(4096)
    idx.append(60, 1200)
    assert idx.entries == 10
    idx.reset()
    assert idx.entries == 0
    idx.close()


def test_preallocated_index_file_counts_only_real_entries(tmp_path: Path) -> None:
    # Files preallocated with a zero tail (Kafka's, or this broker's before indexes moved to
    # memory) after a crash: the zero entries are not counted.
    path = tmp_path / "c.index"
    entries = b"".join(struct.pack(">ii", i, i * 64) for i in range(1, 6))
    path.write_bytes(entries + bytes(8000 - len(entries)))
    reopened = OffsetIndex(path, base_offset=0, max_index_size=8000)
    assert reopened.entries == 5
    assert reopened.max_entries == 1000
    assert reopened.last_entry == OffsetPosition(5, 320)
    reopened.sanity_check(log_size=1000, full=True)
    reopened.close()
    assert path.stat().st_size == 40  # written back with just its entries


def test_index_file_lags_memory_until_written(tmp_path: Path) -> None:
    path = tmp_path / "e.index"
    idx = OffsetIndex(path, base_offset=0, max_index_size=8000)
    for i in range(1, 8):
        idx.append(i, i * 64)
    assert not path.exists()  # nothing written yet: no fd, no file
    assert idx.needs_write
    idx.write()
    assert path.stat().st_size == 7 * 8 and not idx.needs_write and idx.needs_sync
    idx.append(8, 8 * 64)
    assert OffsetIndex(path, base_offset=0).entries == 7  # the file lags
    idx.truncate_to(6)
    idx.flush()  # write + fsync
    assert path.stat().st_size == 5 * 8 and not idx.needs_sync
    again = OffsetIndex(path, base_offset=0)
    assert again.entries == 5 and again.last_entry == OffsetPosition(5, 320)
    idx.close()
    assert again.lookup(4) == OffsetPosition(4, 256)


def test_corrupt_index_detected(tmp_path: Path) -> None:
    path = tmp_path / "d.index"
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10" + b"junk")  # not a multiple of 8
    idx = OffsetIndex(path, base_offset=0)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close()
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10" + b"\x00\x00\x00\x03\x00\x00\x00\x20")
    idx = OffsetIndex(path, base_offset=0)
    idx.sanity_check()  # only the last entry is checked quickly
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(full=True)  # offsets go backwards
    idx.close()


def test_time_index(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    idx = TimeIndex(path, base_offset=10, max_index_size=12 * 5)
    assert idx.lookup(5) == TimestampOffset(-1, 10)
    assert idx.maybe_append(1000, 12)
    assert not idx.maybe_append(1000, 13)  # same timestamp: ignored
    assert idx.maybe_append(2000, 20)
    assert idx.maybe_append(3000, 30)
    with pytest.raises(LogOffsetError):
        idx.maybe_append(4000, 25)  # offset goes backwards
    assert idx.maybe_append(4000, 40)
    assert idx.is_full  # one slot kept for the final entry
    with pytest.raises(LogOffsetError):
        idx.maybe_append(5000, 50)
    assert idx.maybe_append(5000, 50, skip_full_check=True)
    assert idx.maybe_append(6000, 60, skip_full_check=True)  # grows the file
    assert idx.lookup(999) == TimestampOffset(-1, 10)
    assert idx.lookup(1000) == TimestampOffset(1000, 12)
    assert idx.lookup(2500) == TimestampOffset(2000, 20)
    assert idx.lookup(10**12) == TimestampOffset(6000, 60)
    idx.truncate_to(30)
    assert idx.last_entry == TimestampOffset(2000, 20)
    idx.close()
    assert path.stat().st_size == 24
    idx = TimeIndex(path, base_offset=10)
    assert idx.entries == 2
    idx.sanity_check(full=True)
    idx.close()


def test_empty_preallocated_time_index_has_no_entries(tmp_path: Path) -> None:
    path = tmp_path / "b.timeindex"
    path.write_bytes(bytes(1200))
    idx = TimeIndex(path, base_offset=0, max_index_size=1200)
    assert idx.entries == 0
    idx.close()
    assert path.stat().st_size == 0
