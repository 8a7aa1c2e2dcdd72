"""Moving a partition's log to another log dir (AlterReplicaLogDirs) with real files: the
future log is filled while the current one keeps taking appends, promoted in place (the same
`Log` object carries on in the new dir), and a crash between any two steps of the promotion
leaves one complete log that the next start finds (resumed future, or promoted future)."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import threading
import time
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, batch, fill, offsets, read_all

from wherry.common.topic_partition import TopicPartition
from wherry.log.errors import LogDirNotFoundError, StorageError
from wherry.log.manager import LogManager

TP = TopicPartition("t", 0)
CONFIG = dataclasses.replace(SMALL, file_delete_delay_ms=0)


def manager(dirs: list[Path]) -> LogManager:
    m = LogManager(dirs, CONFIG, lambda: T0)
    m.startup()
    return m


def _filled(tmp_path: Path) -> tuple[LogManager, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    m.set_preferred_dir(TP, dirs[0])
    current = m.get_or_create_log(TP)
    fill(current, 30, records=3)
    current.leader_epoch_cache.assign(1, current.log_end_offset)  # an epoch with no records yet
    for _ in range(5):
        current.append_as_leader(batch(2), leader_epoch=1, now_ms=T0)
    current.update_high_watermark(current.log_end_offset)
    return m, dirs


def _copy_all(m: LogManager) -> None:
    while m.copy_to_future(TP, 700).copied > 0:
        pass


def test_move_keeps_every_batch_and_the_log_object(tmp_path: Path) -> None:
    m, (a, b) = _filled(tmp_path)
    current = m.get_log(TP)
    assert current is not None and m.log_dir_of(TP) == a
    before = read_all(current)
    assert m.create_future_log(TP, b)
    assert m.future_dir_of(TP) == b and m.future_lag(TP) == current.log_end_offset
    (future_dir,) = [p for p in b.iterdir() if p.name.endswith("-future")]
    assert future_dir.name.startswith("t-0.")
    # Copy in small steps while the current log keeps taking appends.
    m.copy_to_future(TP, 700)
    current.append_as_leader(batch(4), leader_epoch=1, now_ms=T0)
    _copy_all(m)
    current.append_as_leader(batch(1), leader_epoch=1, now_ms=T0)
    assert m.future_lag(TP) == 1
    changed = dataclasses.replace(CONFIG, retention_ms=123_456)
    m.update_config("t", changed)  # during the move: the moved log keeps it
    assert m.promote_future_log(TP)
    assert current.config == changed
    assert m.get_log(TP) is current and m.log_dir_of(TP) == b
    assert current.dir == b / "t-0" and not (a / "t-0").exists()
    assert m.future_log(TP) is None
    assert read_all(current)[: len(before)] == before
    assert offsets(read_all(current)) == list(range(current.log_end_offset))
    assert [(e.epoch, e.start_offset) for e in current.leader_epoch_cache.entries] == [
        (0, 0), (1, 90)]
    current.append_as_leader(batch(2), leader_epoch=1, now_ms=T0)  # carries on in b
    m.cleanup(T0)  # the old dir is gone after file.delete.delay.ms
    assert not [p for p in a.iterdir() if p.name.startswith("t-0")]
    end = current.log_end_offset
    m.shutdown()
    m2 = manager([a, b])
    moved = m2.get_log(TP)
    assert moved is not None and m2.log_dir_of(TP) == b and moved.log_end_offset == end
    m2.shutdown()


def test_future_follows_truncation_and_log_start_of_the_current_log(tmp_path: Path) -> None:
    m, (_, b) = _filled(tmp_path)
    current = m.get_log(TP)
    assert current is not None
    m.create_future_log(TP, b)
    _copy_all(m)
    future = m.future_log(TP)
    assert future is not None and future.log_end_offset == current.log_end_offset
    # The current log is truncated (a follower's truncation) and written again.
    current.truncate_to(60)
    current.append_as_leader(batch(3), leader_epoch=2, now_ms=T0)
    _copy_all(m)
    assert future.log_end_offset == current.log_end_offset == 63
    assert read_all(future) == read_all(current)
    # A log start offset moved past what the future holds: it starts over there.
    current.maybe_increment_log_start_offset(30)
    assert m.promote_future_log(TP)
    assert current.log_start_offset == 30 and current.log_end_offset == 63
    m.shutdown()


def test_same_dir_and_replacing_a_future(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    m = manager(dirs)
    m.set_preferred_dir(TP, dirs[0])
    fill(m.get_or_create_log(TP), 3)
    assert not m.create_future_log(TP, dirs[0])  # already there
    assert m.create_future_log(TP, dirs[1])
    assert not m.create_future_log(TP, dirs[1])  # already moving there
    assert m.create_future_log(TP, dirs[2])  # a new destination replaces the old future
    assert not [p for p in dirs[1].iterdir() if p.is_dir()]
    assert not m.create_future_log(TP, dirs[0])  # back home: the future is dropped
    assert m.future_log(TP) is None and not [p for p in dirs[2].iterdir() if p.is_dir()]
    with pytest.raises(LogDirNotFoundError):
        m.log_dir_online(tmp_path / "elsewhere")
    with pytest.raises(LogDirNotFoundError):
        m.log_dir_online("relative/dir")
    assert m.log_dir_online(str(dirs[1])) == dirs[1]
    with pytest.raises(StorageError):
        m.create_future_log(TopicPartition("t", 9), dirs[1])  # no such replica
    # A replica created later goes to the dir asked for it beforehand.
    m.set_preferred_dir(TopicPartition("t", 9), dirs[2])
    m.get_or_create_log(TopicPartition("t", 9))
    assert m.log_dir_of(TopicPartition("t", 9)) == dirs[2]
    m.shutdown()
    # A configured dir that is gone (a failed disk): KAFKA_STORAGE_ERROR, not LOG_DIR_NOT_FOUND.
    shutil.rmtree(dirs[1])
    with pytest.raises(StorageError):
        m.log_dir_online(dirs[1])


def test_deleting_the_topic_removes_its_future_too(tmp_path: Path) -> None:
    m, (_, b) = _filled(tmp_path)
    m.create_future_log(TP, b)
    m.copy_to_future(TP, 700)
    assert m.delete_log(TP)
    m.cleanup(T0 + 1)
    assert m.future_log(TP) is None
    assert not [p for d in (tmp_path / "a", b) for p in d.iterdir() if p.is_dir()]
    m.shutdown()


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", [None, "flushed", "current-renamed", "future-renamed"])
def test_a_crash_anywhere_in_the_move_loses_nothing(tmp_path: Path, step: str | None) -> None:
    m, (a, b) = _filled(tmp_path)
    current = m.get_log(TP)
    assert current is not None
    m.create_future_log(TP, b)
    m.copy_to_future(TP, 700)  # partly copied
    expected = read_all(current)
    end = current.log_end_offset
    if step is not None:

        def hook(at: str) -> None:
            if at == step:
                raise Crash(at)

        with pytest.raises(Crash):
            m.promote_future_log(TP, crash_hook=hook)
    m.abandon()  # kill -9: no flush, no checkpoints, no clean-shutdown marker
    m2 = manager([a, b])
    log = m2.get_log(TP)
    assert log is not None and log.log_end_offset == end
    assert read_all(log) == expected
    if step in (None, "flushed"):
        # The current log is intact in a; the move resumes from the future log.
        assert m2.log_dir_of(TP) == a and m2.future_dir_of(TP) == b
        while m2.copy_to_future(TP, 700).copied > 0:
            pass
        assert m2.promote_future_log(TP)
    assert m2.log_dir_of(TP) == b and m2.future_log(TP) is None
    assert read_all(log) == expected
    m2.cleanup(T0 + 1)
    assert [p.name for p in a.iterdir() if p.is_dir()] == []
    assert [p.name for p in b.iterdir() if p.is_dir()] == ["t-0"]
    m2.shutdown()


def _where(m: LogManager) -> tuple[list[Path], list[Path]]:
    logs, futures = m.placements()
    return [d for lg, d in logs if lg.topic_partition == TP], [
        d for f, d, _ in futures if f.topic_partition == TP]


def test_placements_show_a_move_whole_at_every_step_of_its_finish(tmp_path: Path) -> None:
    """DescribeLogDirs reads `placements`: between any two steps of the promotion the replica
    is still moving (current in a, future in b), and then moved (in b, no future). A view of
    the current dir taken before the finish and of the futures after it showed the replica
    in a with nothing moving it, and `reassign verify --wait` gave up on a move that had
    just completed."""
    m, (a, b) = _filled(tmp_path)
    m.create_future_log(TP, b)
    _copy_all(m)
    seen: list[tuple[str, tuple[list[Path], list[Path]]]] = []
    assert m.promote_future_log(TP, crash_hook=lambda at: seen.append((at, _where(m))))
    assert seen == [(at, ([a], [b])) for at in ("flushed", "current-renamed", "future-renamed")]
    assert _where(m) == ([b], [])
    m.shutdown()


def test_placements_read_beside_many_finishes_are_never_half_a_move(tmp_path: Path) -> None:
    m, dirs = _filled(tmp_path)
    views: set[tuple[tuple[Path, ...], tuple[Path, ...]]] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            logs, futures = _where(m)
            views.add((tuple(logs), tuple(futures)))
            time.sleep(0)  # let the mover's thread run

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(10):
            m.create_future_log(TP, dirs[(i + 1) % 2])
            _copy_all(m)
            assert m.promote_future_log(TP)
    finally:
        done.set()
        watcher.join(10)
    a, b = dirs
    assert views <= {((a,), ()), ((b,), ()), ((a,), (b,)), ((b,), (a,))}
    assert ((a,), (b,)) in views and ((b,), ()) in views
    m.shutdown()


def test_a_short_step_is_caught_up_only_at_the_current_log_end(tmp_path: Path) -> None:
    """Whole batches up to the step's bytes: a step that copies less than its bytes because the
    next batch does not fit has not caught up; one that reached the end has."""
    m, (_, b) = _filled(tmp_path)
    current = m.get_log(TP)
    assert current is not None and m.create_future_log(TP, b)
    size, caught_up = m.copy_to_future(TP, 1)  # at least one batch: exactly one
    assert size > 0 and not caught_up
    step = m.copy_to_future(TP, 2 * size + size // 2)  # two batches fit, the third does not
    assert step.copied == 2 * size and not step.caught_up
    while not (step := m.copy_to_future(TP, 1 << 20)).caught_up:
        pass
    assert m.future_lag(TP) == 0
    assert m.copy_to_future(TP, 700) == (0, True)


def test_the_mover_promotes_only_a_caught_up_future(tmp_path: Path) -> None:
    """Throttled to 2.5 batches a second, the mover copies two batches, waits, and has not
    promoted the half-copied future (it used to take a short step for the end and finish the
    whole move at once, unthrottled, under the log's lock); it finishes once caught up."""
    from wherry.replication.log_dir_mover import LogDirMover

    m, (a, b) = _filled(tmp_path)
    current = m.get_log(TP)
    assert current is not None and m.create_future_log(TP, b)
    size = len(current.read(0, max_bytes=1))  # one batch; the first 30 are the same size

    async def run() -> None:
        mover = LogDirMover(m, io_max_bytes_per_second=size * 5 // 2)
        mover.kick()
        for _ in range(500):  # the first step done, the throttle's wait under way
            if m.future_lag(TP) < current.log_end_offset:
                break
            await asyncio.sleep(0.01)
        assert m.future_dir_of(TP) == b and 0 < m.future_lag(TP) < current.log_end_offset
        assert mover.moves_completed == 0 and m.log_dir_of(TP) == a
        mover.set_rate(0)  # unthrottled from the next step on
        mover.kick()
        for _ in range(200):
            if mover.moves_completed:
                break
            await asyncio.sleep(0.01)
        await mover.stop()
        assert mover.moves_completed == 1 and m.log_dir_of(TP) == b

    asyncio.run(run())
    assert m.future_dir_of(TP) is None and (b / TP.dir_name).is_dir()
