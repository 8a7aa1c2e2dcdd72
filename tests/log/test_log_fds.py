"""File descriptors and memory: one fd per partition, bounded caches, lagging index files."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, batch, fill, offsets, open_fds_under, open_log, read_all

from wherry.common.topic_partition import TopicPartition
from wherry.log import cache
from wherry.log.config import LogConfig
from wherry.log.index import OffsetIndex, OffsetPosition
from wherry.log.log import Log
from wherry.log.manager import LogManager

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="counts fds through /proc/self/fd"
)


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def small_caches() -> Iterator[None]:
    old_files, old_bytes = cache.OPEN_FILES.capacity, cache.INDEXES.capacity
    cache.configure(max_open_segment_files=8, index_cache_bytes=4096)
    try:
        yield
    finally:
        cache.configure(max_open_segment_files=old_files, index_cache_bytes=old_bytes)


def test_many_segments_bounded_fds_and_index_memory(tmp_path: Path, small_caches: None) -> None:
    log = open_log(tmp_path)
    fill(log, 600, records=2, ts=T0)
    segments = log.segments
    assert len(segments) > 50
    assert open_fds_under(tmp_path) <= 1 + cache.OPEN_FILES.capacity
    expected = list(range(log.log_end_offset))
    assert offsets(read_all(log)) == expected
    for offset in range(0, log.log_end_offset, 13):  # random-ish access over all segments
        assert offsets(log.read(offset, max_bytes=1))[0] in (offset, offset - 1)
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert open_fds_under(tmp_path) <= 1 + cache.OPEN_FILES.capacity
    assert len(cache.OPEN_FILES) <= cache.OPEN_FILES.capacity
    assert cache.INDEXES.total_cost <= cache.INDEXES.capacity
    loaded = sum(s.offset_index.loaded + s.time_index.loaded for s in segments[:-1])
    assert 0 < loaded < len(segments)  # the rest were evicted (and reload when needed)
    assert log.active_segment.offset_index.loaded and log.active_segment.has_open_fd
    log.check_integrity()
    log.close()
    assert open_fds_under(tmp_path) == 0


def test_inactive_segment_fd_reopens_after_eviction(tmp_path: Path, small_caches: None) -> None:
    log = open_log(tmp_path)
    fill(log, 100, records=2)
    first = log.segments[0]
    assert log.read(0, max_bytes=1)
    assert first.has_open_fd
    cache.OPEN_FILES.clear()  # evicts every fd not in use
    assert not first.has_open_fd and log.active_segment.has_open_fd
    assert offsets(log.read(0, max_bytes=1)) == [0, 1]
    assert first.has_open_fd
    # an fd in use (its lock held, as during a read) is never closed by eviction
    with first._fd_lock:
        assert cache.OPEN_FILES.clear() >= 1
        assert first.has_open_fd
    log.close()


def test_index_eviction_never_drops_unwritten_entries(tmp_path: Path, small_caches: None) -> None:
    idx = OffsetIndex(tmp_path / "a.index", base_offset=0, max_index_size=8000)
    for i in range(1, 50):
        idx.append(i, i * 10)
    assert cache.INDEXES.clear() == 0 and idx.loaded  # dirty: not even in the cache
    idx.write()
    assert idx in cache.INDEXES
    cache.INDEXES.clear()
    assert not idx.loaded
    assert idx.entries == 49  # known without loading
    assert idx.lookup(25) == OffsetPosition(25, 250)  # reloaded
    idx.set_active(True)  # pinned
    cache.INDEXES.clear()
    assert idx.loaded
    idx.close()


def test_flush_writes_and_syncs_active_indexes(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=128)
    log = open_log(tmp_path, config)
    fill(log, 40, records=2)
    active = log.active_segment
    entries = active.offset_index.entries
    assert entries > 5
    assert active.index_path.stat().st_size == 0  # entries in memory only, so far
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert active.index_path.stat().st_size == entries * 8
    assert not active.offset_index.needs_sync and not active.time_index.needs_sync
    log.close()
    for path in active.files():
        assert path.exists()


_KILLED_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from logtest_util import T0, batch
    from wherry.log.config import LogConfig
    from wherry.log.manager import LogManager
    from wherry.common.topic_partition import TopicPartition
    config = LogConfig(segment_bytes=16384, index_interval_bytes=128, segment_index_bytes=4096)
    manager = LogManager([Path({dir!r})], config, lambda: T0)
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("topic", 0))
    seq = 0
    def append(n):
        global seq
        for _ in range(n):
            log.append_as_leader(batch(2, pid=9, epoch=0, seq=seq), leader_epoch=0, now_ms=T0)
            seq += 2
    append(150)
    log.flush()
    manager.checkpoint_recovery_points()
    append(40)  # the active segment's index grows in memory only
    active = log.active_segment
    print(log.log_end_offset, log.recovery_point, active.base_offset,
          active.offset_index.entries, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_sigkill_with_lagging_index_file_recovers(tmp_path: Path) -> None:
    code = _KILLED_CHILD.format(tests=str(Path(__file__).parent), dir=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    end, recovery_point, active_base, entries = map(int, proc.stdout.split())
    assert end == 380 and 0 < recovery_point < end
    part = tmp_path / "topic-0"
    index_file = part / f"{active_base:020d}.index"
    on_disk = index_file.stat().st_size // 8 if index_file.exists() else 0
    assert on_disk < entries  # the file lags the log

    manager = LogManager([tmp_path], SMALL, Clock())
    manager.startup()
    assert not manager.had_clean_shutdown(tmp_path)
    log = manager.get_log(TopicPartition("topic", 0))
    assert log is not None
    assert log.log_end_offset == end and log.recovery_point == recovery_point
    assert offsets(read_all(log)) == list(range(end))
    active = log.active_segment
    assert active.base_offset == active_base and active.offset_index.entries == entries
    for segment in log.segments:
        segment.sanity_check(full=True)
    for offset in range(0, end, 7):
        assert offsets(log.read(offset, max_bytes=1))[0] in (offset, offset - 1)
    dup = log.append_as_leader(batch(2, pid=9, epoch=0, seq=end - 2), leader_epoch=0, now_ms=T0)
    assert dup.duplicate and dup.first_offset == end - 2
    manager.shutdown()


def test_abandoned_manager_with_rolled_segments_recovers(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], SMALL, Clock())
    manager.startup()
    tp = TopicPartition("topic", 0)
    log = manager.get_or_create_log(tp)
    fill(log, 30, records=2)
    log.flush(up_to=log.segments[2].base_offset)
    manager.checkpoint_recovery_points()
    fill(log, 30, records=2)
    end = log.log_end_offset
    active_index = log.active_segment.index_path
    manager.abandon()  # crash: nothing closed
    log.close()  # (release this process's fds; a crash would have)
    active_index.unlink(missing_ok=True)

    again = LogManager([tmp_path], SMALL, Clock())
    again.startup()
    recovered = again.get_log(tp)
    assert recovered is not None and recovered.log_end_offset == end
    assert offsets(read_all(recovered)) == list(range(end))
    recovered.check_integrity()
    again.shutdown()


def test_rename_dir_of_open_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30, records=2)
    cache.OPEN_FILES.clear()
    log.rename_dir(tmp_path / "moved-0")
    assert offsets(read_all(log)) == list(range(60))
    log.close()
    assert len(list((tmp_path / "moved-0").glob("*.index"))) == log.num_segments


def test_eviction_by_other_threads_during_reads(tmp_path: Path, small_caches: None) -> None:
    cache.configure(max_open_segment_files=3, index_cache_bytes=1024)
    logs = []
    for name in ("a", "b"):
        log = open_log(tmp_path / name)
        fill(log, 150, records=2)
        logs.append(log)
    expected = list(range(300))
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(log: Log) -> None:
        try:
            while not stop.is_set():
                for offset in range(0, 300, 11):
                    got = offsets(log.read(offset, max_bytes=300))
                    assert got and got[0] in (offset, offset - 1), (offset, got)
                assert offsets(read_all(log)) == expected
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            stop.set()

    def evictor() -> None:
        while not stop.is_set():
            cache.OPEN_FILES.clear()
            cache.INDEXES.clear()
            time.sleep(0.0005)

    threads = [threading.Thread(target=reader, args=(lg,)) for lg in logs]
    threads.append(threading.Thread(target=evictor))
    for t in threads:
        t.start()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors[0]
    assert cache.OPEN_FILES.evictions > 0 and cache.INDEXES.evictions > 0
    for log in logs:
        log.check_integrity()
        log.close()


def test_a_flush_opens_and_syncs_its_files_without_the_log_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append on the event loop waits for the log's lock: the flush after a roll holds it
    for no open or fsync of the rolled segment's files."""
    import os

    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=128)
    log = open_log(tmp_path, config)
    fill(log, 40, records=2)
    log.roll(now_ms=T0)
    fill(log, 5, records=2)
    rolled = log.segments[0]
    calls: list[tuple[str, str, bool]] = []
    real_open, real_fsync = os.open, os.fsync

    def opened(path: object, *args: object, **kwargs: object) -> int:
        calls.append(("open", str(path), log.lock._is_owned()))  # type: ignore[attr-defined]
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def synced(fd: int) -> None:
        calls.append(("fsync", "", log.lock._is_owned()))  # type: ignore[attr-defined]
        real_fsync(fd)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "fsync", synced)
    log.flush(rolled.base_offset + 80)
    monkeypatch.undo()
    assert log.recovery_point == 80
    names = {Path(path).name for op, path, _ in calls if op == "open"}
    assert {rolled.log_path.name, rolled.index_path.name} <= names
    assert calls and not any(held for _, _, held in calls), calls
    log.close()


def test_a_file_renamed_away_during_a_flush_leaves_the_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=128)
    log = open_log(tmp_path, config)
    fill(log, 40, records=2)
    log.roll(now_ms=T0)
    rolled = log.segments[0]
    real_open = os.open

    def gone(path: object, *args: object, **kwargs: object) -> int:
        if Path(str(path)) == rolled.index_path:  # as if a cleaner's swap were renaming it
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", gone)
    log.flush(80)
    monkeypatch.undo()
    assert log.recovery_point == 0
    assert rolled.offset_index.needs_sync  # claimed, then given back for the next flush
    log.flush(80)
    assert log.recovery_point == 80 and not rolled.offset_index.needs_sync
    log.close()
