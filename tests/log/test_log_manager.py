"""LogManager: startup/shutdown, checkpoints, clean-shutdown marker, placement, cleanup."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, batch, fill, offsets, read_all

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import OffsetCheckpointFile
from wherry.log.errors import LogDirLockedError, StorageError
from wherry.log.manager import CLEAN_SHUTDOWN_FILE, LogManager


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def manager(dirs: list[Path], clock: Clock | None = None, **kw: object) -> LogManager:
    m = LogManager(dirs, SMALL, clock or Clock(), **kw)  # type: ignore[arg-type]
    m.startup()
    return m


def tp(topic: str = "t", partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


def test_placement_and_clean_restart(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = manager(dirs)
    logs = [m.get_or_create_log(tp("t", i)) for i in range(4)]
    assert m.get_or_create_log(tp("t", 0)) is logs[0]
    per_dir = [len([p for p in d.iterdir() if p.is_dir()]) for d in dirs]
    assert per_dir == [2, 2]
    for lg in logs:
        fill(lg, 30)
        lg.update_high_watermark(25)
    m.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        rp = OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read()
        assert set(rp.values()) == {30}
        hw = OffsetCheckpointFile(d / "replication-offset-checkpoint").read()
        assert set(hw.values()) == {25}
        assert (d / "log-start-offset-checkpoint").exists()

    m2 = manager(dirs)
    assert all(m2.had_clean_shutdown(d) for d in dirs)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert sorted(m2.topic_partitions()) == [tp("t", i) for i in range(4)]
    for lg in m2.all_logs():
        assert lg.log_end_offset == 30 and lg.recovery_point == 30
        assert lg.high_watermark == 25
        assert offsets(read_all(lg)) == list(range(30))
    assert m2.read_high_watermarks() == {tp("t", i): 25 for i in range(4)}
    m2.shutdown()


def test_crash_restart_recovers(tmp_path: Path) -> None:
    dirs = [tmp_path / "d"]
    m = manager(dirs)
    lg = m.get_or_create_log(tp())
    for seq in range(0, 40, 2):
        lg.append_as_leader(batch(2, pid=1, epoch=0, seq=seq), leader_epoch=0, now_ms=T0)
    m.checkpoint_recovery_points()  # recovery point 0 (nothing flushed)
    m.abandon()  # crash: no flush, no marker
    m2 = manager(dirs)
    assert not m2.had_clean_shutdown(dirs[0])
    recovered = m2.get_log(tp())
    assert recovered is not None
    assert recovered.log_end_offset == 40
    assert recovered.append_as_leader(
        batch(2, pid=1, epoch=0, seq=38), leader_epoch=0, now_ms=T0
    ).duplicate
    m2.shutdown()


def test_dir_lock(tmp_path: Path) -> None:
    m = manager([tmp_path / "d"])
    with pytest.raises(LogDirLockedError):
        manager([tmp_path / "d"])
    m.shutdown()
    manager([tmp_path / "d"]).shutdown()


def test_duplicate_partition_dirs_rejected(tmp_path: Path) -> None:
    (tmp_path / "a" / "t-0").mkdir(parents=True)
    (tmp_path / "b" / "t-0").mkdir(parents=True)
    m = LogManager([tmp_path / "a", tmp_path / "b"], SMALL, Clock())
    with pytest.raises(StorageError):
        m.startup()
    m.abandon()


def test_delete_log(tmp_path: Path) -> None:
    clock = Clock()
    d = tmp_path / "d"
    m = manager([d], clock)
    config = dataclasses.replace(SMALL, file_delete_delay_ms=1000)
    lg = m.get_or_create_log(tp("gone"), config)
    m.get_or_create_log(tp("kept"))
    fill(lg, 3)
    assert m.delete_log(tp("gone"))
    assert not m.delete_log(tp("gone"))
    assert m.get_log(tp("gone")) is None
    assert not (d / "gone-0").exists()
    pending = [p for p in d.iterdir() if p.name.endswith("-delete")]
    assert len(pending) == 1
    rp = OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read()
    assert tp("gone") not in rp and tp("kept") in rp
    clock.now += 999
    m.cleanup()
    assert pending[0].exists()
    clock.now += 1
    m.cleanup()
    assert not pending[0].exists()
    # a leftover "-delete" dir (crash during deletion) is removed at startup
    m.shutdown()
    (d / "x-0.abc-delete").mkdir()
    m2 = manager([d])
    assert not (d / "x-0.abc-delete").exists()
    assert m2.topic_partitions() == [tp("kept")]
    m2.shutdown()


def test_delete_logs_at_once(tmp_path: Path) -> None:
    """Many logs deleted in one call (a StopReplica's): those that existed are returned, each
    dir's checkpoints are left with only the kept logs."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    gone = [tp("gone", p) for p in range(6)]
    for t in [*gone, tp("kept", 0), tp("kept", 1)]:
        fill(m.get_or_create_log(t), 2)
    assert m.delete_logs([*gone, tp("never")]) == gone
    assert m.delete_logs(gone) == []
    assert m.topic_partitions() == [tp("kept", 0), tp("kept", 1)]
    listed: set[TopicPartition] = set()
    for d in dirs:
        for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
            offsets_in = OffsetCheckpointFile(d / name).read()
            assert not set(offsets_in) & set(gone), (d, name)
            listed |= set(offsets_in)
    assert listed == {tp("kept", 0), tp("kept", 1)}
    m.shutdown()


def test_update_config_and_cleanup(tmp_path: Path) -> None:
    clock = Clock()
    m = manager([tmp_path / "d"], clock)
    lg = m.get_or_create_log(tp())
    fill(lg, 40, records=2)
    lg.update_high_watermark(lg.log_end_offset)
    assert m.cleanup() == 0  # default retention: a week
    m.update_config("t", dataclasses.replace(SMALL, retention_ms=1000, file_delete_delay_ms=0))
    assert lg.config.retention_ms == 1000
    clock.now += 1001
    assert m.cleanup() == 5
    assert lg.num_segments == 1 and lg.log_start_offset == 80
    m.checkpoint_log_start_offsets()
    cp = OffsetCheckpointFile(tmp_path / "d" / "log-start-offset-checkpoint").read()
    assert cp == {tp(): 80}
    m.shutdown()
    m2 = manager([tmp_path / "d"])
    reloaded = m2.get_log(tp())
    assert reloaded is not None and reloaded.log_start_offset == 80
    m2.shutdown()


def test_flush_dirty(tmp_path: Path) -> None:
    clock = Clock()
    m = manager([tmp_path / "d"], clock)
    lg = m.get_or_create_log(tp(), dataclasses.replace(SMALL, flush_ms=5000))
    other = m.get_or_create_log(tp("u"))
    fill(lg, 3)
    fill(other, 3)
    assert m.flush_dirty() == 0
    clock.now += 5000
    assert m.flush_dirty() == 1
    assert lg.recovery_point == 3 and other.recovery_point == 0
    fill(other, 40)  # rolls: the rolled segments get flushed by the next pass
    assert m.flush_dirty() == 1
    assert other.recovery_point == other.active_segment.base_offset
    m.shutdown()


def test_flush_dirty_passes_logs_with_nothing_to_flush_without_their_lock(
    tmp_path: Path,
) -> None:
    """The flusher asks every log each round: one with nothing to flush is passed over without
    waiting for its lock (held here by another thread, as an append or a read would)."""
    import threading

    m = manager([tmp_path / "d"])
    lg = m.get_or_create_log(tp())
    fill(lg, 3)
    lg.flush()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lg._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        flusher = threading.Thread(target=m.flush_dirty)
        flusher.start()
        flusher.join(2)
        assert not flusher.is_alive()
    finally:
        release.set()
        holder.join(5)
    fill(lg, 40)  # rolls: now it has segments to flush, and is flushed under its lock
    assert m.flush_dirty() == 1
    assert lg.recovery_point == lg.active_segment.base_offset
    m.shutdown()


def test_high_watermark_checkpoint_mapping(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    m.get_or_create_log(tp("t", 0))
    m.get_or_create_log(tp("t", 1))
    m.checkpoint_high_watermarks({tp("t", 0): 0, tp("t", 1): 0, tp("zzz", 0): 5})
    assert m.read_high_watermarks() == {tp("t", 0): 0, tp("t", 1): 0}
    with pytest.raises(StorageError):
        LogManager(dirs, SMALL, Clock()).get_or_create_log(tp())  # not started
    m.shutdown()
