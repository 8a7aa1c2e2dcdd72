"""Log compaction (wherry.log.cleaner) against real log directories."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.log.logtest_util import T0, TP, open_log
from wherry.log import cache
from wherry.log.cleaner import (
    CLEANER_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
    clean_log,
    cleanable_offsets,
)
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.log.validator import RecordValidationError
from wherry.protocol.records import (
    ATTR_DELETE_HORIZON,
    RecordSpec,
    build_batch,
    iter_batches,
    iter_records,
)

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=2048,
    index_interval_bytes=128,
    segment_index_bytes=4096,
    min_cleanable_dirty_ratio=0.5,
    delete_retention_ms=10_000,
    file_delete_delay_ms=0,
)


class Crash(Exception):
    pass


def produce(
    log: Log,
    items: list[tuple[bytes, bytes | None]],
    *,
    now_ms: int = T0,
    compression: int = 0,
    per_batch: int = 1,
    pid: int = -1,
    seq: int = -1,
) -> None:
    for i in range(0, len(items), per_batch):
        chunk = items[i : i + per_batch]
        data = build_batch(
            [RecordSpec(k, v, headers=(("h", b"x"),)) for k, v in chunk],
            timestamp_ms=now_ms,
            compression=compression,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=(seq + i) if pid >= 0 else -1,
        )
        log.append_as_leader(data, leader_epoch=3, now_ms=now_ms)
    log.update_high_watermark(log.log_end_offset)


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for seg in log.segments:
        data = seg.read_bytes(0, seg.size)
        for pos, _ in iter_batches(data):
            for r in iter_records(data, pos):
                out.append((r.offset, r.key, r.value))
    return out


def latest(log: Log) -> dict[bytes | None, tuple[int, bytes | None]]:
    view: dict[bytes | None, tuple[int, bytes | None]] = {}
    for offset, key, value in records(log):
        view[key] = (offset, value)
    return view


def updates(keys: int, rounds: int) -> list[tuple[bytes, bytes | None]]:
    return [
        (f"k{k}".encode(), f"v{r}-{k}".encode() * 3) for r in range(rounds) for k in range(keys)
    ]


def test_many_updates_shrink_to_one_per_key(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(10, 20))
    log.roll(now_ms=T0)
    before = latest(log)
    size_before = log.size_in_bytes
    result = clean_log(log, None, T0)
    assert result is not None and not result.aborted
    recs = records(log)
    assert sorted(k or b"" for _, k, _ in recs) == sorted(f"k{k}".encode() for k in range(10))
    assert latest(log) == before  # offsets and values preserved
    assert log.size_in_bytes < size_before / 5
    assert result.end_offset == 200
    log.check_integrity()
    # headers, leader epoch kept
    seg = log.segments[0]
    data = seg.read_bytes(0, seg.size)
    for pos, h in iter_batches(data):
        assert h.partition_leader_epoch == 3
        assert all(r.headers == (("h", b"x"),) for r in iter_records(data, pos))
    # reads by offset still work
    assert log.read(0, max_bytes=1 << 20)
    log.close()
    reopened = open_log(tmp_path, COMPACT)
    assert latest(reopened) == before
    reopened.close()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches(tmp_path: Path, codec: int) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(5, 8), compression=codec, per_batch=7)
    log.roll(now_ms=T0)
    before = latest(log)
    assert clean_log(log, None, T0) is not None
    assert latest(log) == before
    assert len(records(log)) == 5
    for seg in log.segments:
        data = seg.read_bytes(0, seg.size)
        for _, h in iter_batches(data):
            assert h.compression == codec
    log.check_integrity()
    log.close()


def test_active_segment_and_high_watermark_not_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(3, 4))
    log.roll(now_ms=T0)
    produce(log, updates(3, 4))  # in the active segment
    clean_log(log, None, T0)
    assert len(records(log)) == 3 + 12
    log.update_high_watermark(0)
    info = cleanable_offsets(log, None, T0)
    assert info.first_uncleanable_offset == 0
    log.close()


def test_tombstones_kept_until_delete_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(4, 3))
    produce(log, [(b"k1", None), (b"k2", None)])
    log.roll(now_ms=T0)
    clean_log(log, None, T0)
    view = latest(log)
    assert view[b"k1"][1] is None and view[b"k2"][1] is None
    seg = log.segments[0]
    data = seg.read_bytes(0, seg.size)
    stamped = [h for _, h in iter_batches(data) if h.attributes & ATTR_DELETE_HORIZON]
    assert stamped and all(h.base_timestamp == T0 + 10_000 for h in stamped)
    # not yet
    clean_log(log, 12, T0 + 9_999)
    assert latest(log)[b"k1"][1] is None
    # after delete.retention.ms
    clean_log(log, 14, T0 + 10_000)
    assert set(latest(log)) == {b"k0", b"k3"}
    log.check_integrity()
    log.close()


def test_cleaner_removes_tombstones_via_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, [*updates(4, 3), (b"k0", None)])
    log.roll(now_ms=T0)
    cleaner = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path)
    assert cleaner.clean_once(T0) is not None
    assert b"k0" in latest(log)
    assert cleaner.clean_once(T0 + 1) is None  # nothing to do
    assert cleaner.clean_once(T0 + 10_001) is not None
    assert b"k0" not in latest(log)
    log.close()


def test_dirty_ratio_honoured(tmp_path: Path) -> None:
    cfg = _with(COMPACT, min_cleanable_dirty_ratio=0.9)
    log = open_log(tmp_path, cfg)
    produce(log, updates(10, 3))
    log.roll(now_ms=T0)
    cleaner = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path)
    first = cleaner.clean_once(T0)  # all dirty: ratio 1.0 > 0.9
    assert first is not None
    n = len(records(log))
    produce(log, updates(1, 1))  # a little more dirt
    log.roll(now_ms=T0)
    info = cleanable_offsets(log, cleaner.checkpoint_of(TP), T0)
    assert 0 < info.cleanable_ratio < 0.9
    assert cleaner.clean_once(T0) is None
    assert len(records(log)) == n + 1
    log.close()


def _with(cfg: LogConfig, **changes: Any) -> LogConfig:
    return dataclasses.replace(cfg, **changes)


def test_min_compaction_lag(tmp_path: Path) -> None:
    cfg = _with(COMPACT, min_compaction_lag_ms=60_000)
    log = open_log(tmp_path, cfg)
    produce(log, updates(3, 3), now_ms=T0)
    log.roll(now_ms=T0)
    produce(log, updates(3, 3), now_ms=T0 + 50_000)
    log.roll(now_ms=T0 + 50_000)
    info = cleanable_offsets(log, None, T0 + 70_000)
    assert info.first_uncleanable_offset == 9  # the second segment is too recent
    clean_log(log, None, T0 + 70_000)
    assert len(records(log)) == 3 + 9
    clean_log(log, 9, T0 + 120_000)
    assert len(records(log)) == 3
    log.close()


def test_keyless_records_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    with pytest.raises(RecordValidationError) as info:  # KIP-467: INVALID_RECORD, per record
        log.append_as_leader(
            build_batch([(b"k", b"v"), (None, b"v"), (b"k", b"v")]), leader_epoch=0, now_ms=T0
        )
    assert info.value.error_code == 87 and [i for i, _ in info.value.record_errors] == [1]
    assert log.log_end_offset == 0
    log.close()


def test_last_batch_of_producer_kept_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, [(b"a", b"1"), (b"b", b"1")], pid=7, seq=0)
    produce(log, [(b"a", b"2"), (b"b", b"2")])  # no producer id
    log.roll(now_ms=T0)
    clean_log(log, None, T0)
    seg = log.segments[0]
    data = seg.read_bytes(0, seg.size)
    hs = [h for _, h in iter_batches(data)]
    assert hs[0].producer_id == 7 and hs[0].record_count == 0 and hs[0].last_offset == 1
    assert hs[0].base_sequence == 1
    log.close()
    reopened = open_log(tmp_path, COMPACT)
    entry = reopened.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 1
    reopened.close()


STEPS = [
    "cleaned-written",
    "before-swap",
    "after-swap-rename",
    "after-first-delete",
    "after-deletes",
    "after-swap",
]


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_each_step_then_reopen(tmp_path: Path, step: str) -> None:
    cfg = _with(COMPACT, segment_bytes=1024)
    log = open_log(tmp_path, cfg)
    produce(log, updates(6, 12))
    log.roll(now_ms=T0)
    produce(log, [(b"k0", b"tail")])
    before = latest(log)
    end = log.log_end_offset
    assert log.num_segments > 3

    def hook(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        clean_log(log, None, T0, crash_hook=hook)
    # "kill -9": reopen from the files without closing
    crashed = log
    reopened = open_log(tmp_path, cfg)
    assert latest(reopened) == before
    assert reopened.log_end_offset == end
    reopened.check_integrity()
    names = os.listdir(tmp_path / "topic-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    # and it can be cleaned to the end afterwards
    reopened.update_high_watermark(reopened.log_end_offset)
    clean_log(reopened, None, T0)
    assert latest(reopened) == before
    assert len(records(reopened)) == 7
    reopened.close()
    # release what the "crashed" process held (its files are gone or replaced already)
    with contextlib.suppress(Exception):
        crashed.close()
    cache.OPEN_FILES.clear()


def test_checkpoint_survives_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(5, 5))
    log.roll(now_ms=T0)
    cleaner = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path, CleanerConfig())
    assert cleaner.clean_once(T0) is not None
    assert cleaner.checkpoint_of(TP) == 25
    text = (tmp_path / CLEANER_CHECKPOINT).read_text().split("\n")
    assert text[:3] == ["0", "1", "topic 0 25"]
    log.close()
    log = open_log(tmp_path, COMPACT)
    again = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path)
    assert again.checkpoint_of(TP) == 25
    assert again.clean_once(T0) is None
    log.close()


def test_dedupe_buffer_bounds_the_map(tmp_path: Path) -> None:
    cfg = _with(COMPACT, segment_bytes=600)
    log = open_log(tmp_path, cfg)
    produce(log, [(f"key{i}".encode(), b"x" * 10) for i in range(60)])
    log.roll(now_ms=T0)
    small = CleanerConfig(dedupe_buffer_size=40 * 24)  # ~36 keys
    result = clean_log(log, None, T0, max_map_entries=small.max_map_entries)
    assert result is not None
    assert 0 < result.end_offset < 60
    log.close()


def test_concurrent_reads_and_appends_during_cleaning(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(20, 30))
    log.roll(now_ms=T0)
    before = latest(log)
    views: list[dict[bytes | None, tuple[int, bytes | None]]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            view: dict[bytes | None, tuple[int, bytes | None]] = {}
            offset = log.log_start_offset
            end = 600  # the cleaned part; appends go after it
            while offset < end:
                data = log.read(offset, max_bytes=4096, max_offset=end)
                if not data:
                    break
                for pos, h in iter_batches(data):
                    for r in iter_records(data, pos):
                        view[r.key] = (r.offset, r.value)
                    offset = h.next_offset
            views.append(view)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(3):
            clean_log(log, None, T0)
            produce(log, [(b"new", b"1")])
    finally:
        stop.set()
        t.join()
    assert views and all(v == before for v in views)
    assert latest(log)[b"new"][1] == b"1"
    log.close()


def test_clean_aborts_if_log_changes_meanwhile(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(5, 10))
    log.roll(now_ms=T0)
    produce(log, [(b"k0", b"x")])

    def hook(at: str) -> None:
        if at == "cleaned-written":
            log.truncate_to(0, now_ms=T0)  # a follower truncation drops every old segment

    result = clean_log(log, None, T0, crash_hook=hook)
    assert result is not None and result.aborted
    assert not [n for n in os.listdir(tmp_path / "topic-0") if n.endswith((".cleaned", ".swap"))]
    assert log.log_end_offset == 0 and records(log) == []
    log.close()


def test_compact_delete_also_applies_retention(tmp_path: Path) -> None:
    cfg = _with(COMPACT, cleanup_policy=("compact", "delete"), retention_ms=5000)
    now = time.time_ns() // 1_000_000  # empty cleaned segments fall back to their mtime
    log = open_log(tmp_path, cfg, now_ms=now)
    produce(log, updates(5, 10), now_ms=now - 10_000)
    log.roll(now_ms=now)
    produce(log, [(b"k0", b"new")], now_ms=now)
    for seg in log.segments[:-1]:
        os.utime(seg.log_path, ((now - 10_000) / 1000, (now - 10_000) / 1000))
    clean_log(log, None, now)
    assert log.delete_old_segments(now + 1000) > 0
    assert latest(log) == {b"k0": (50, b"new")}
    log.close()


def test_max_compaction_lag_forces_cleaning(tmp_path: Path) -> None:
    cfg = _with(COMPACT, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    log = open_log(tmp_path, cfg)
    produce(log, updates(10, 3), now_ms=T0)
    log.roll(now_ms=T0)
    cleaner = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path)
    assert cleaner.clean_once(T0) is not None  # everything dirty: ratio 1.0
    produce(log, updates(1, 1), now_ms=T0)
    log.roll(now_ms=T0)
    assert cleaner.clean_once(T0 + 1000) is None  # ratio too low, lag not reached
    assert cleaner.clean_once(T0 + 60_001) is not None  # the oldest dirty record is too old
    log.close()


def test_non_compacted_logs_left_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path, _with(COMPACT, cleanup_policy=("delete",)))
    produce(log, updates(5, 5))
    log.roll(now_ms=T0)
    cleaner = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path)
    assert cleaner.clean_once(T0) is None
    assert len(records(log)) == 25
    log.close()
