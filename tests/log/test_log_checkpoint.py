"""Checkpoint files and the leader epoch cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import CheckpointError, OffsetCheckpointFile, read_int_pairs
from wherry.log.leader_epoch import LeaderEpochCache


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    cp = OffsetCheckpointFile(path)
    assert cp.read() == {}
    offsets = {
        TopicPartition("b-topic", 1): 42,
        TopicPartition("a.topic-x", 0): 0,
        TopicPartition("b-topic", 0): 2**40,
    }
    cp.write(offsets)
    assert path.read_text() == "0\n3\na.topic-x 0 0\nb-topic 0 1099511627776\nb-topic 1 42\n"
    assert cp.read() == offsets
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    cp.write({})
    assert path.read_text() == "0\n0\n"
    assert cp.read() == {}
    path.write_bytes(b"")  # an empty checkpoint is written unsynced: read as Kafka does
    assert cp.read() == {}


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", "zero\n0\n"],
)
def test_malformed_checkpoint(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(path).read()


def test_topic_partition_dir_names() -> None:
    tp = TopicPartition("my-topic", 12)
    assert str(tp) == tp.dir_name == "my-topic-12"
    assert TopicPartition.parse("my-topic-12") == tp
    for bad in ("topic", "topic-", "-1", "topic-x"):
        with pytest.raises(ValueError):
            TopicPartition.parse(bad)


def test_leader_epoch_cache(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    assert cache.latest_epoch is None
    assert cache.end_offset_for(0, 10) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch, later offset: no change
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert [tuple(e) for e in cache.entries] == [(0, 0), (2, 10), (4, 30)]
    assert read_int_pairs(path) == [(0, 0), (2, 10), (4, 30)]
    assert cache.end_offset_for(4, 50) == (4, 50)  # latest epoch: log end offset
    assert cache.end_offset_for(3, 50) == (2, 30)
    assert cache.end_offset_for(0, 50) == (0, 10)
    assert cache.epoch_for_offset(15) == 2
    cache.truncate_from_end(30)
    assert cache.latest_epoch == 2
    cache.truncate_from_start(12)
    assert [tuple(e) for e in cache.entries] == [(2, 12)]
    cache.assign(5, 40)
    cache.assign(3, 20)  # lower epoch: drops later entries
    assert [tuple(e) for e in cache.entries] == [(2, 12), (3, 20)]
    reloaded = LeaderEpochCache(path)
    assert reloaded.entries == cache.entries
    assert cache.end_offset_for(1, 50) == (1, 12)  # older than any: first start offset


def test_only_checkpoints_with_entries_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first start writes empty checkpoints: nothing to make durable (a lost or empty file
    reads as no entries), so no fsync; one with entries is fsynced with its directory."""
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    cp = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    cp.write({})
    assert synced == [] and cp.read() == {}
    cp.write({TopicPartition("t", 0): 5})
    assert len(synced) == 2  # the file, then its directory
    assert cp.read() == {TopicPartition("t", 0): 5}
