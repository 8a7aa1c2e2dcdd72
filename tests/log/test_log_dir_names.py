"""Partition directory names of any legal topic (up to 249 characters), and deleted logs'
directories whose rename or removal hits a file system error: retried, logged once."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, fill, read_all

from wherry.common.topic_partition import TopicPartition
from wherry.log.dir_deletions import MAX_RETRY_BACKOFF_MS, RETRY_BACKOFF_MS
from wherry.log.dir_names import (
    MAX_DIR_NAME_BYTES,
    delete_dir_name,
    future_dir_fits,
    future_dir_name,
    is_delete_dir,
    parse_future_dir_name,
    stray_dir_name,
)
from wherry.log.errors import StorageError
from wherry.log.manager import LogManager

LONGEST = "a" * 200 + "b" * 49  # a legal topic name of Kafka's largest length, 249
assert len(LONGEST) == 249


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def manager(dirs: list[Path], clock: Clock | None = None) -> LogManager:
    m = LogManager(dirs, SMALL, clock or Clock())
    m.startup()
    return m


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", [0, 7, 99_999, 2**31 - 1])
def test_delete_dir_name_is_kafkas_capped_rule(partition: int) -> None:
    tp = TopicPartition(LONGEST, partition)
    unique = "0123456789abcdef0123456789abcdef"
    name = delete_dir_name(tp, unique)
    tail = f"-{partition}.{unique}-delete"
    # Kafka's logDirNameWithSuffixCappedLength: the topic is cut to 255 - len(tail).
    assert name == LONGEST[: MAX_DIR_NAME_BYTES - len(tail)] + tail
    assert len(name.encode()) == MAX_DIR_NAME_BYTES
    assert is_delete_dir(name)
    stray = stray_dir_name(tp, unique)
    assert stray.endswith(f"-{partition}.{unique}-stray") and len(stray.encode()) == 255


def test_short_names_are_not_cut() -> None:
    tp = TopicPartition("orders.v2-eu", 3)
    name = delete_dir_name(tp)
    assert name.startswith("orders.v2-eu-3.") and name.endswith("-delete")
    assert len(name) == len("orders.v2-eu-3.") + 32 + len("-delete")
    assert delete_dir_name(tp) != delete_dir_name(tp)  # a fresh unique id each time


def test_future_dir_name_kept_whole_and_parsed_back() -> None:
    tp = TopicPartition("a-b-c", 12)
    name = future_dir_name(tp)
    assert parse_future_dir_name(name) == tp
    assert future_dir_fits(tp)
    # The largest topic whose future name fits: 255 - len("-0.<32 hex digits>-future") = 213.
    assert future_dir_fits(TopicPartition("x" * 213, 0))
    assert not future_dir_fits(TopicPartition("x" * 214, 0))
    assert not future_dir_fits(TopicPartition(LONGEST, 0))
    for bad in ("t-0-future", "t-x.abc-future", ".abc-future", "t-0.abc-delete", "t-0"):
        assert parse_future_dir_name(bad) is None


# --- deletion of a 249-character topic's logs ---------------------------------------------


def test_longest_topic_created_written_deleted(tmp_path: Path) -> None:
    clock = Clock()
    d = tmp_path / "d"
    m = manager([d], clock)
    tps = [TopicPartition(LONGEST, p) for p in (0, 1, 12345)]
    config = dataclasses.replace(SMALL, file_delete_delay_ms=1000)
    for tp in tps:
        fill(m.get_or_create_log(tp, config), 40)
        assert (d / tp.dir_name).is_dir()
    for tp in tps:
        assert m.delete_log(tp)
    deleted = sorted(p.name for p in d.iterdir() if p.is_dir())
    assert len(deleted) == 3 and all(is_delete_dir(n) for n in deleted)
    assert all(len(n.encode()) == 255 for n in deleted)
    # Shut down before they are due: the next start removes them.
    m.shutdown()
    m2 = manager([d], clock)
    assert [p for p in d.iterdir() if p.is_dir()] == []
    assert m2.topic_partitions() == []
    m2.shutdown()


def test_delay_then_removed_by_the_periodic_task(tmp_path: Path) -> None:
    clock = Clock()
    d = tmp_path / "d"
    m = manager([d], clock)
    tp = TopicPartition(LONGEST, 0)
    fill(m.get_or_create_log(tp, dataclasses.replace(SMALL, file_delete_delay_ms=500)), 5)
    m.delete_log(tp)
    assert len(m.pending_dir_deletions()) == 1
    assert m.delete_due_dirs() == 0
    clock.now += 500
    assert m.delete_due_dirs() == 1
    assert [p for p in d.iterdir() if p.is_dir()] == []
    m.shutdown()


# --- file system errors -------------------------------------------------------------------------


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """Make `path` immutable (chattr +i: not even root may rename or remove its entries)."""
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, timeout=10)
    if r.returncode != 0:
        pytest.skip(f"chattr +i not possible here: {r.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True, timeout=10)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_failed_rename_is_logged_once_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    d = tmp_path / "d"
    m = manager([d], clock)
    tp = TopicPartition(LONGEST, 0)
    lg = m.get_or_create_log(tp, dataclasses.replace(SMALL, file_delete_delay_ms=0))
    fill(lg, 20)
    caplog.set_level(logging.INFO, logger="wherry.log")
    # What closing the log writes is written already: only the rename meets the failure
    # (a failed write in the log dir itself would take the dir offline).
    lg.producer_state.update_map_end_offset(lg.log_end_offset)
    lg.producer_state.take_snapshot(fsync=True)
    lg.leader_epoch_cache.sync()
    with immutable(d / tp.dir_name):
        assert m.delete_log(tp)  # no exception reaches the caller
        assert m.get_log(tp) is None
        assert (d / tp.dir_name).is_dir()  # still there, under its own name
        assert m._deletions.next_due_ms() == clock.now + RETRY_BACKOFF_MS
        # A new log of the partition cannot take the directory of the deleted one.
        with pytest.raises(StorageError, match="could not be renamed yet"):
            m.get_or_create_log(tp)
        backoffs = []
        for _ in range(8):
            due = m._deletions.next_due_ms()
            assert due is not None
            backoffs.append(due - clock.now)
            clock.now = due
            assert m.delete_due_dirs() == 0
        assert (d / tp.dir_name).is_dir()
    warned = [w for w in _warnings(caplog) if "could not rename" in w]
    assert len(warned) == 1 and str(d / tp.dir_name) in warned[0], _warnings(caplog)
    # The creation attempt retried once more: backoffs 2 s, 4 s, ... up to the cap.
    assert backoffs[:3] == [2 * RETRY_BACKOFF_MS, 4 * RETRY_BACKOFF_MS, 8 * RETRY_BACKOFF_MS]
    assert backoffs == sorted(backoffs) and backoffs[-1] <= MAX_RETRY_BACKOFF_MS
    # The file system works again: the next attempt renames and removes it.
    clock.now = m._deletions.next_due_ms() or clock.now
    assert m.delete_due_dirs() == 1
    assert [p for p in d.iterdir() if p.is_dir()] == []
    assert m.pending_dir_deletions() == []
    # And the partition can live here again, empty.
    again = m.get_or_create_log(tp)
    assert again.log_end_offset == 0 and read_all(again) == b""
    m.shutdown()


def test_failed_removal_is_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    d = tmp_path / "d"
    m = manager([d], clock)
    tp = TopicPartition("t", 0)
    fill(m.get_or_create_log(tp, dataclasses.replace(SMALL, file_delete_delay_ms=100)), 20)
    m.delete_log(tp)
    (target,) = m.pending_dir_deletions()
    clock.now += 100
    caplog.set_level(logging.INFO, logger="wherry.log")
    with immutable(target):
        for _ in range(3):
            assert m.delete_due_dirs() == 0
            clock.now = m._deletions.next_due_ms() or clock.now
        assert target.is_dir()
    assert len([w for w in _warnings(caplog) if "could not remove" in w]) == 1
    assert m.delete_due_dirs() == 1
    assert not target.exists()
    m.shutdown()


def test_startup_with_an_undeletable_leftover_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "d"
    d.mkdir()
    leftover = d / delete_dir_name(TopicPartition(LONGEST, 0))
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    caplog.set_level(logging.INFO, logger="wherry.log")
    with immutable(leftover):
        m = manager([d])  # starts; the leftover waits for a retry
        assert m.pending_dir_deletions() == [leftover]
        assert m.topic_partitions() == []
    assert m.delete_due_dirs(T0 + MAX_RETRY_BACKOFF_MS) == 1
    assert not leftover.exists()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    m.shutdown()


def test_promotion_refused_by_the_destination_keeps_the_current_log(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager([a, b])
    tp = TopicPartition("mv", 0)
    m.set_preferred_dir(tp, a)
    current = m.get_or_create_log(tp)
    fill(current, 30)
    assert m.create_future_log(tp, b)
    while m.copy_to_future(tp, 1 << 20).copied:
        pass
    with immutable(b), pytest.raises(OSError):
        m.promote_future_log(tp)
    # The current log is where it was, under its own name, and keeps working.
    assert (a / "mv-0").is_dir() and m.log_dir_of(tp) == a
    assert not [p for p in a.iterdir() if is_delete_dir(p.name)]
    fill(current, 5)
    assert current.log_end_offset == 35
    # Once the destination works again, the move completes.
    assert m.promote_future_log(tp)
    assert m.log_dir_of(tp) == b and (b / "mv-0").is_dir() and not (a / "mv-0").exists()
    assert current.log_end_offset == 35
    m.shutdown()
    again = manager([a, b])
    moved = again.get_log(tp)
    assert moved is not None and moved.log_end_offset == 35
    again.shutdown()
