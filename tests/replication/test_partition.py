"""Partition leadership, leader-epoch fencing and the high-watermark rule, on a real log."""

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.protocol.interbroker import LeaderAndIsrPartitionState
from wherry.protocol.records import build_batch
from wherry.replication.partition import (
    CommittedPartitionState,
    Partition,
    PartitionError,
    PendingExpandIsr,
    PendingShrinkIsr,
)

TP = TopicPartition("t", 0)


def make(tmp_path: Path, broker_id: int = 1) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig(), topic_partition=TP, now_ms=0)
    return Partition(TP, broker_id, log)


def state(
    leader: int, epoch: int, isr: tuple[int, ...] = (1,), replicas: tuple[int, ...] = (1,)
) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState("t", 0, 1, leader, epoch, isr, epoch, replicas)


def test_leader_epoch_fencing(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(state(1, 3), now_ms=0)
    assert p.check_leader_epoch(-1) == ErrorCode.none
    assert p.check_leader_epoch(3) == ErrorCode.none
    assert p.check_leader_epoch(2) == ErrorCode.fenced_leader_epoch
    assert p.check_leader_epoch(4) == ErrorCode.unknown_leader_epoch


def test_follower_refuses_produce(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_follower(state(2, 1, isr=(1, 2), replicas=(1, 2)))
    with pytest.raises(PartitionError) as e:
        p.append_records_to_leader(
            bytearray(build_batch([(None, b"x")])), required_acks=1, min_insync_replicas=1, now_ms=0
        )
    assert e.value.error_code == ErrorCode.not_leader_or_follower


def test_high_watermark_waits_for_the_maximal_isr(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(state(1, 0, isr=(1, 2), replicas=(1, 2)), now_ms=0)
    p.append_records_to_leader(
        bytearray(build_batch([(None, b"a"), (None, b"b")])),
        required_acks=-1,
        min_insync_replicas=1,
        now_ms=0,
    )
    assert p.log.log_end_offset == 2 and p.high_watermark == 0  # follower 2 has nothing
    assert p.acks_all_satisfied(2, 1) is None
    out = p.update_follower_fetch_state(
        2, fetch_offset=1, log_start_offset=0, leader_end_offset=2, now_ms=1
    )
    assert out.hw_incremented and p.high_watermark == 1
    p.update_follower_fetch_state(
        2, fetch_offset=2, log_start_offset=0, leader_end_offset=2, now_ms=2
    )
    assert p.high_watermark == 2 and p.acks_all_satisfied(2, 1) == ErrorCode.none
    assert p.acks_all_satisfied(2, 3) == ErrorCode.not_enough_replicas_after_append


def test_acks_all_below_min_isr_is_refused(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(state(1, 0), now_ms=0)
    with pytest.raises(PartitionError) as e:
        p.append_records_to_leader(
            bytearray(build_batch([(None, b"x")])),
            required_acks=-1,
            min_insync_replicas=2,
            now_ms=0,
        )
    assert e.value.error_code == ErrorCode.not_enough_replicas
    assert p.log.log_end_offset == 0


def test_isr_states_maximal_isr() -> None:
    c = CommittedPartitionState(frozenset({1, 2}))
    assert c.maximal_isr == {1, 2} and not c.is_inflight
    e = PendingExpandIsr(frozenset({1}), 3)
    assert e.maximal_isr == {1, 3} and e.isr == {1} and e.is_inflight
    s = PendingShrinkIsr(frozenset({1, 2}), frozenset({2}))
    assert s.maximal_isr == {1, 2} and s.is_inflight


def _leader_with_a_follower_at(tmp_path: Path, follower_leo: int) -> Partition:
    """Leader 1 at epoch 0, 3 records, follower 2 fetched up to `follower_leo`."""
    p = make(tmp_path)
    p.make_leader(state(1, 0, isr=(1, 2), replicas=(1, 2)), now_ms=0)
    p.append_records_to_leader(
        bytearray(build_batch([(None, b"a"), (None, b"b"), (None, b"c")])),
        required_acks=1,
        min_insync_replicas=1,
        now_ms=0,
    )
    p.update_follower_fetch_state(
        2, fetch_offset=follower_leo, log_start_offset=0, leader_end_offset=3, now_ms=1
    )
    return p


def test_a_leader_that_missed_epochs_forgets_its_followers_positions(tmp_path: Path) -> None:
    """Seed 1250 of the simulation: leader 1 (epoch 0) is cut off from the controller while
    another broker leads at epoch 2 and its follower truncates; when 1 leads again (epoch 3) the
    follower position it learnt at epoch 0 no longer holds and must not lift the HW."""
    p = _leader_with_a_follower_at(tmp_path, 3)
    assert p.high_watermark == 3
    q = _leader_with_a_follower_at(tmp_path / "q", 1)
    assert q.high_watermark == 1
    q.make_leader(state(1, 3, isr=(1, 2), replicas=(1, 2)), now_ms=2)  # epochs 1, 2 missed
    assert q.remote_replicas[2].log_end_offset < 0  # unknown until it fetches again
    assert q.high_watermark == 1


def test_a_leader_epoch_bump_keeps_the_followers_positions(tmp_path: Path) -> None:
    """The next epoch with the same leader (the controller's epoch bump, e.g. for a
    reassignment): nobody else led in between, the positions hold."""
    p = _leader_with_a_follower_at(tmp_path, 2)
    p.make_leader(state(1, 1, isr=(1, 2), replicas=(1, 2)), now_ms=2)
    assert p.remote_replicas[2].log_end_offset == 2
