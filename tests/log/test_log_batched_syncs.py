"""Creating and deleting many logs at once costs one directory fsync per log dir, not one (or
three) per log: a LeaderAndIsr or StopReplica of hundreds of partitions on a busy disk, where
each fsync waits for the file system's journal, took seconds. The logs are as durable when
the call returns: created logs are found by a new LogManager, deleted ones are not."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, batch

from wherry.common.topic_partition import TopicPartition
from wherry.log.manager import LogManager


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """How many fsyncs this process made (each still done: the real `os.fsync` is called)."""
    real = os.fsync
    count = [0]

    def counted(fd: int) -> None:
        count[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    yield lambda: count[0]


def manager(dirs: list[Path]) -> LogManager:
    m = LogManager(dirs, SMALL, lambda: T0)
    m.startup()
    return m


def tps(n: int) -> list[TopicPartition]:
    return [TopicPartition(f"t{i // 4}", i % 4) for i in range(n)]


def test_logs_created_in_a_batch_sync_each_dir_once(
    tmp_path: Path, fsyncs: Callable[[], int]
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    start = fsyncs()
    with m.batched_dir_syncs():
        for tp in tps(200):
            m.get_or_create_log(tp)
        with m.batched_dir_syncs():  # a nested batch leaves the sync to the outer one
            m.get_or_create_log(TopicPartition("nested", 0))
    assert fsyncs() - start == len(dirs)
    start = fsyncs()
    m.get_or_create_log(TopicPartition("alone", 0))  # outside a batch: synced at once
    assert fsyncs() - start == 1
    m.shutdown()
    again = manager(dirs)
    assert len(again.topic_partitions()) == 202
    again.shutdown()


def test_deleting_many_logs_syncs_each_dir_once(
    tmp_path: Path, fsyncs: Callable[[], int]
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    gone = tps(200)
    for tp in [*gone, TopicPartition("kept", 0)]:
        m.get_or_create_log(tp).append_as_leader(batch(2), leader_epoch=0, now_ms=T0)
    start = fsyncs()
    assert m.delete_logs(gone) == gone
    # A directory fsync per log dir, and the two checkpoint files of each dir (a file and a
    # directory fsync each): 2 + 8. It was about five per deleted log (a producer snapshot,
    # the leader epochs, the rename's directory): 1,004 for these 200.
    assert fsyncs() - start <= 2 + 8, fsyncs() - start
    assert m.topic_partitions() == [TopicPartition("kept", 0)]
    for d in dirs:
        left = [p.name for p in d.iterdir() if p.is_dir()]
        assert all(n.endswith("-delete") or n == "kept-0" for n in left), left
        # No producer snapshot written for a log on its way out.
        for n in left:
            if n.endswith("-delete"):
                assert not list((d / n).glob("*.snapshot")), n
    m.shutdown()
    again = manager(dirs)
    assert again.topic_partitions() == [TopicPartition("kept", 0)]
    again.shutdown()


def test_shutdown_syncs_the_producer_snapshots_at_once(
    tmp_path: Path, fsyncs: Callable[[], int]
) -> None:
    """A clean shutdown writes every log's producer snapshot, made durable by one sync of
    the file systems (not two fsyncs per log: 2,800 partitions took 25 s); the next start
    finds them, so an idempotent producer's retry is still known as a duplicate."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    with m.batched_dir_syncs():
        for tp in tps(200):
            m.get_or_create_log(tp)
    producing = TopicPartition("idempotent", 0)
    data = batch(2, pid=7, epoch=0, seq=0)
    m.get_or_create_log(producing).append_as_leader(data, leader_epoch=0, now_ms=T0)
    start = fsyncs()
    m.shutdown()
    # The producing log's flush, three checkpoints and the clean-shutdown marker per dir
    # (a file and a directory fsync each): about 20; it was 400 more.
    assert fsyncs() - start <= 30, fsyncs() - start
    again = manager(dirs)
    lg = again.get_log(producing)
    assert lg is not None and lg.log_end_offset == 2
    assert lg.append_as_leader(data, leader_epoch=0, now_ms=T0).duplicate
    snapshots = [p for d in dirs for p in d.glob("t*-*/*.snapshot")]
    assert len(snapshots) == 200
    again.shutdown()
