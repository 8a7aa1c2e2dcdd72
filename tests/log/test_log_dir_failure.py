"""A full log dir (KIP-112) at the log layer: the I/O error becomes KAFKA_STORAGE_ERROR, the
dir goes offline once, the other dir keeps working, and a restart after space is freed
recovers every record appended before the failure. Real files on a small tmpfs."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from logtest_util import SMALL, T0, batch

from wherry.common.topic_partition import TopicPartition
from wherry.log.dir_failure import LogDirFailureChannel
from wherry.log.errors import StorageError
from wherry.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from wherry.testing.tmpfs import fill_up


@pytest.fixture
def tmpfs(small_disk: Callable[[int], Path]) -> Path:
    return small_disk(2 << 20)


def test_channel_reports_a_dir_once(tmp_path: Path) -> None:
    ch = LogDirFailureChannel()
    heard: list[Path] = []
    ch.add_listener(heard.append)
    err = OSError(errno.ENOSPC, "No space left on device")
    assert ch.maybe_add_offline(tmp_path, "appending to t-0", err)
    assert not ch.maybe_add_offline(tmp_path, "appending to t-1", err)
    assert heard == [tmp_path] and ch.has_offline(tmp_path) and ch.errors(tmp_path) == 2
    assert "appending to t-0" in ch.offline_dirs()[tmp_path]


def test_full_dir_goes_offline_other_dir_serves_restart_recovers(
    tmp_path: Path, tmpfs: Path
) -> None:
    good = tmp_path / "good"
    ch = LogDirFailureChannel()
    heard: list[Path] = []
    ch.add_listener(heard.append)
    m = LogManager([tmpfs, good], SMALL, lambda: T0, dir_failure=ch)
    m.startup()
    full_tp, ok_tp = TopicPartition("t", 0), TopicPartition("t", 1)
    full_log = m.get_or_create_log(full_tp)
    ok_log = m.get_or_create_log(ok_tp)
    assert m.log_dir_of(full_tp) == tmpfs and m.log_dir_of(ok_tp) == good
    acked = 0
    for _ in range(20):
        full_log.append_as_leader(batch(5), leader_epoch=0, now_ms=T0)
        acked += 5
    full_log.flush()
    filler = fill_up(tmpfs)
    with pytest.raises(StorageError) as raised:
        for _ in range(10_000):  # a new segment or the next batch finds the disk full
            full_log.append_as_leader(batch(2, value=b"x" * 300), leader_epoch=0, now_ms=T0)
            acked += 2
    assert raised.value.error_code == ErrorCode.kafka_storage_error
    assert isinstance(raised.value.__cause__, OSError)
    assert heard == [tmpfs] and m.is_dir_offline(tmpfs) and m.live_log_dirs == [good]
    assert m.handle_log_dir_failure(tmpfs) == [full_tp]
    assert m.get_log(full_tp) is None and full_log.closed
    # The other dir keeps taking appends, checkpoints and new logs.
    ok_log.append_as_leader(batch(3), leader_epoch=0, now_ms=T0)
    m.checkpoint_recovery_points()
    assert m.log_dir_of(m.get_or_create_log(TopicPartition("t", 2)).topic_partition) == good
    with pytest.raises(StorageError):
        m.log_dir_online(tmpfs)
    m.shutdown()
    assert (good / CLEAN_SHUTDOWN_FILE).exists()
    assert not (tmpfs / CLEAN_SHUTDOWN_FILE).exists()  # recovered at the next start
    # Space freed: the next start recovers the dir, every appended record is there.
    filler.unlink()
    again = LogManager([tmpfs, good], SMALL, lambda: T0)
    again.startup()
    recovered = again.get_log(full_tp)
    assert recovered is not None and recovered.log_end_offset >= acked
    recovered.check_integrity()
    recovered.append_as_leader(batch(1), leader_epoch=0, now_ms=T0)
    again.shutdown()


def test_checkpoint_failure_takes_only_that_dir_offline(tmp_path: Path, tmpfs: Path) -> None:
    good = tmp_path / "good"
    m = LogManager([tmpfs, good], SMALL, lambda: T0)
    m.startup()
    for p in range(4):
        m.get_or_create_log(TopicPartition("t", p)).append_as_leader(
            batch(2), leader_epoch=0, now_ms=T0
        )
    fill_up(tmpfs)
    m.checkpoint_high_watermarks()  # no exception: the full dir goes offline
    assert m.is_dir_offline(tmpfs) and not m.is_dir_offline(good)
    assert "replication-offset-checkpoint" in m.dir_failure.offline_dirs()[tmpfs]
    m.handle_log_dir_failure(tmpfs)
    m.shutdown()


def test_no_write_after_a_failed_one_even_with_space_freed(tmpfs: Path) -> None:
    m = LogManager([tmpfs], SMALL, lambda: T0)
    m.startup()
    lg = m.get_or_create_log(TopicPartition("t", 0))
    filler = fill_up(tmpfs)
    with pytest.raises(StorageError):
        for _ in range(10_000):
            lg.append_as_leader(batch(2, value=b"x" * 300), leader_epoch=0, now_ms=T0)
    end = lg.log_end_offset
    filler.unlink()  # room again, but the log may hold a partial batch: refused
    with pytest.raises(StorageError, match="earlier I/O error"):
        lg.append_as_leader(batch(1), leader_epoch=0, now_ms=T0)
    with pytest.raises(StorageError, match="earlier I/O error"):
        lg.roll()
    assert lg.log_end_offset == end
    m.handle_log_dir_failure(tmpfs)
    m.shutdown()


def test_a_dir_that_fails_to_load_is_offline_the_others_load(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    m = LogManager([good, bad], SMALL, lambda: T0)
    m.startup()
    for p in range(2):
        m.get_or_create_log(TopicPartition("t", p)).append_as_leader(
            batch(3), leader_epoch=0, now_ms=T0
        )
    assert m.log_dir_of(TopicPartition("t", 1)) == bad
    m.abandon()  # a crash: recovery at the next start
    # The segment of t-1 cannot be opened (a directory where its file should be).
    seg = bad / "t-1" / "00000000000000000000.log"
    seg.unlink()
    seg.mkdir()
    again = LogManager([good, bad], SMALL, lambda: T0)
    again.startup()
    assert again.is_dir_offline(bad) and again.live_log_dirs == [good]
    assert again.get_log(TopicPartition("t", 0)) is not None
    assert again.get_log(TopicPartition("t", 1)) is None
    # An existing replica (not new) is not created elsewhere while a dir is offline: its log
    # may be there. A new one goes to the live dir.
    with pytest.raises(StorageError, match="offline"):
        again.get_or_create_log(TopicPartition("t", 1), is_new=False)
    assert again.get_or_create_log(TopicPartition("u", 0)).dir.parent == good
    again.shutdown()
    # Every dir failing to load fails the start, in one line.
    seg2 = good / "t-0" / "00000000000000000000.log"
    seg2.unlink()
    seg2.mkdir()
    with pytest.raises(StorageError, match="Shutdown broker because all log dirs in"):
        LogManager([good, bad], SMALL, lambda: T0).startup()
