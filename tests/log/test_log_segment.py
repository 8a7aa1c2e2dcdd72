"""LogSegment: append, read, lookups, recovery, truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from logtest_util import T0, batch, headers

from wherry.log.segment import LogSegment, RollParams
from wherry.protocol.records import iter_batches, patch_batch


def seg_open(dir: Path, base: int = 100, **kw: int) -> LogSegment:
    return LogSegment.open(
        dir,
        base,
        index_interval_bytes=kw.get("interval", 200),
        max_index_bytes=kw.get("index_bytes", 4096),
        now_ms=kw.get("now", T0),
    )


def append_batches(seg: LogSegment, count: int, *, records: int = 2, first_ts: int = T0) -> int:
    """Append `count` batches after the segment's current end; returns the next offset."""
    offset = seg.read_next_offset()
    for i in range(count):
        buf = bytearray(batch(records, ts=first_ts + i))
        patch_batch(buf, 0, base_offset=offset, partition_leader_epoch=0)
        seg.append(buf, list(iter_batches(buf)))
        offset += records
    return offset


def test_file_names(tmp_path: Path) -> None:
    seg = seg_open(tmp_path, 42)
    assert seg.log_path.name == "00000000000000000042.log"
    assert seg.offset_index.path.name == "00000000000000000042.index"
    assert seg.time_index.path.name == "00000000000000000042.timeindex"
    seg.close()


def test_append_read_translate(tmp_path: Path) -> None:
    seg = seg_open(tmp_path)
    assert seg.read(100, 1000) is None
    end = append_batches(seg, 20)
    assert end == 140
    assert seg.offset_index.entries > 3  # every ~200 bytes
    data = seg.read(100, 10_000)
    assert data is not None and len(data) == seg.size
    first = seg.read(117, 1)  # too small for a batch: nothing unless min_one_message
    assert first == b""
    first = seg.read(117, 1, min_one_message=True)
    assert first is not None
    assert [h.base_offset for h in headers(first)] == [116]
    size = len(batch(2))
    some = seg.read(117, 3 * size - 1)
    assert some is not None
    assert [h.base_offset for h in headers(some)] == [116, 118]  # whole batches only
    pos = seg.translate_offset(131)
    assert pos is not None and pos.base_offset == 130 and pos.last_offset == 131
    bounded = seg.read(100, 10_000, max_position=pos.position)
    assert bounded is not None and headers(bounded)[-1].next_offset == 130
    assert seg.translate_offset(140) is None
    assert seg.read(140, 1000) is None
    assert seg.read_next_offset() == 140
    assert seg.find_offset_by_timestamp(T0 + 7) == (T0 + 7, 114)
    assert seg.find_offset_by_timestamp(T0 - 5) == (T0, 100)
    assert seg.find_offset_by_timestamp(T0 + 100) is None
    assert seg.find_offset_by_timestamp(T0, starting_offset=121) == (T0 + 10, 121)
    assert seg.max_timestamp_so_far == T0 + 19
    seg.close()


def test_reopen_trusts_indexes(tmp_path: Path) -> None:
    seg = seg_open(tmp_path)
    append_batches(seg, 20)
    entries = seg.offset_index.entries
    seg.close()
    seg = seg_open(tmp_path)
    seg.sanity_check(full=True)
    assert seg.offset_index.entries == entries
    assert seg.read_next_offset() == 140
    assert seg.max_timestamp_so_far == T0 + 19  # final time index entry written at close
    seg.close()


def test_recover_rebuilds_indexes_and_truncates_garbage(tmp_path: Path) -> None:
    seg = seg_open(tmp_path)
    append_batches(seg, 20)
    size = seg.size
    entries = seg.offset_index.entries
    seg.close()
    # garbage after the last batch, indexes gone
    with open(tmp_path / "00000000000000000100.log", "ab") as f:
        f.write(b"\x00" * 7 + os.urandom(100))
    (tmp_path / "00000000000000000100.index").unlink()
    (tmp_path / "00000000000000000100.timeindex").write_bytes(b"garbage")
    seg = seg_open(tmp_path)
    assert not seg.index_files_existed
    truncated = seg.recover()
    assert truncated == 107
    assert seg.size == size
    assert seg.offset_index.entries == entries
    assert seg.read_next_offset() == 140
    assert seg.find_offset_by_timestamp(T0 + 3) == (T0 + 3, 106)
    seg.close()


def test_recover_stops_at_bad_crc_and_torn_batch(tmp_path: Path) -> None:
    seg = seg_open(tmp_path)
    append_batches(seg, 10)
    pos = seg.translate_offset(110)
    assert pos is not None
    seg.close()
    path = tmp_path / "00000000000000000100.log"
    raw = bytearray(path.read_bytes())
    raw[pos.position + 70] ^= 0xFF  # flip a byte inside batch 110's records
    path.write_bytes(bytes(raw))
    seg = seg_open(tmp_path)
    assert seg.recover() == len(raw) - pos.position
    assert seg.read_next_offset() == 110
    seg.close()
    # torn tail: half a batch
    good = path.read_bytes()
    path.write_bytes(good + batch(3)[:40])
    seg = seg_open(tmp_path)
    assert seg.recover() == 40
    assert seg.size == len(good)
    seg.close()


def test_truncate_to(tmp_path: Path) -> None:
    seg = seg_open(tmp_path)
    append_batches(seg, 20)
    assert seg.truncate_to(121) > 0  # mid-batch: the whole batch 120-121 goes
    assert seg.read_next_offset() == 120
    assert seg.offset_index.last_offset < 120
    assert seg.time_index.last_entry.offset < 120
    assert seg.max_timestamp_so_far <= T0 + 9
    end = append_batches(seg, 2, first_ts=T0 + 50)
    assert end == 124
    assert seg.truncate_to(100, now_ms=T0 + 1) == seg.size or seg.size == 0
    assert seg.size == 0 and seg.created_ms == T0 + 1
    seg.close()


def test_should_roll(tmp_path: Path) -> None:
    seg = seg_open(tmp_path, 0, now=T0)

    def params(**kw: int) -> RollParams:
        return RollParams(
            max_segment_bytes=kw.get("max_bytes", 10_000),
            max_segment_ms=kw.get("max_ms", 1000),
            max_timestamp_in_messages=kw.get("ts", T0),
            max_offset_in_messages=kw.get("offset", 0),
            messages_size=kw.get("size", 100),
            now_ms=kw.get("now", T0),
        )

    assert not seg.should_roll(params(now=T0 + 5000))  # empty never rolls by time
    append_batches(seg, 1, first_ts=T0)
    assert not seg.should_roll(params(ts=T0 + 1000))
    assert seg.should_roll(params(ts=T0 + 1001))  # by message timestamps
    assert seg.should_roll(params(max_bytes=seg.size + 50))  # by size
    assert seg.should_roll(params(offset=2**31))  # relative offset overflow
    seg.close()


def test_a_read_at_a_recent_batch_reads_no_file_to_find_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch at the log's end asks for the base of a batch appended since its last fetch:
    its position is known from the append, with no index lookup and no read of the file."""
    seg = seg_open(tmp_path)
    append_batches(seg, 60)
    fresh = seg_open(tmp_path)  # the same file, no batch appended through it
    reads: list[int] = []
    real_pread = os.pread

    def counted(fd: int, n: int, pos: int) -> bytes:
        reads.append(n)
        return real_pread(fd, n, pos)

    monkeypatch.setattr(os, "pread", counted)
    for offset in (210, 212, 218):  # among the last 32 batches' bases
        assert seg.translate_offset(offset) == fresh.translate_offset(offset)
        reads.clear()
        assert seg.translate_offset(offset) is not None and reads == []
    for offset in (100, 211, 219, 400):  # an old batch, inside a batch, past the end
        assert seg.translate_offset(offset) == fresh.translate_offset(offset)
    monkeypatch.undo()
    region = seg.read_region(216, 10_000)
    expected = fresh.read(216, 10_000)
    assert region is not None and expected is not None
    data = region if isinstance(region, bytes) else region.read()
    assert [h.base_offset for h in headers(data)] == [h.base_offset for h in headers(expected)]
    fresh.close()
    seg.close()


def test_positions_of_recent_batches_go_with_a_truncation_and_a_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seg = seg_open(tmp_path)
    append_batches(seg, 10)  # offsets 100..119, two a batch
    seg.truncate_to(110)
    assert seg.translate_offset(110) is None
    append_batches(seg, 1, records=5)  # 110..114: 112 is inside it now
    assert seg.translate_offset(112) == seg.translate_offset(110)
    assert seg.translate_offset(110) is not None and seg.translate_offset(110).base_offset == 110

    def full(fd: int, data: object, pos: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError):
        append_batches(seg, 2)  # 115..118 never reach the file
    monkeypatch.undo()
    assert seg.translate_offset(115) is None and seg.translate_offset(117) is None
    assert seg.translate_offset(110) is not None  # written before: still found
    seg.close()
