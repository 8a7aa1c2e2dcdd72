"""The leader's ISR state machine, after Kafka's PartitionTest: pure rules and a Partition on a
real log, time injected (SPEC R4–R6, R9, R10, I1, I3)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.protocol.interbroker import LeaderAndIsrPartitionState
from wherry.protocol.records import build_batch
from wherry.replication.isr import (
    NEVER,
    AlterOutcome,
    CommittedLeaderAndIsr,
    CommittedPartitionState,
    FollowerState,
    PendingExpandIsr,
    PendingShrinkIsr,
    high_watermark_candidate,
    update_fetch_state,
)
from wherry.replication.partition import FollowerFetchOutcome, Partition, PartitionError

TP = TopicPartition("t", 0)
LAG = 10_000


def leader_state(epoch: int = 5, isr: tuple[int, ...] = (1, 2, 3),
                 replicas: tuple[int, ...] = (1, 2, 3),
                 partition_epoch: int = 7) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState("t", 0, 1, 1, epoch, isr, partition_epoch, replicas)


def make(tmp_path: Path, *, alive: set[int] | None = None) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig(), topic_partition=TP, now_ms=0)
    live = alive if alive is not None else {1, 2, 3}
    return Partition(TP, 1, log, topic_id=uuid.uuid4(), replica_lag_time_max_ms=LAG,
                     is_replica_isr_eligible=lambda b: b in live)


def append(p: Partition, n: int, now_ms: int = 0) -> None:
    p.append_records_to_leader(bytearray(build_batch([(None, b"x")] * n)), required_acks=-1,
                               min_insync_replicas=1, now_ms=now_ms)


def fetch(p: Partition, replica: int, offset: int, now_ms: int,
          broker_epoch: int = -1) -> FollowerFetchOutcome:
    return p.update_follower_fetch_state(replica, fetch_offset=offset, log_start_offset=0,
                                         leader_end_offset=p.log.log_end_offset,
                                         now_ms=now_ms, broker_epoch=broker_epoch)


def leader_at_hw_4(tmp_path: Path, fetched_at_ms: int) -> Partition:
    """Leader 1 of replicas 1, 2, 3 with ISR {1, 2}: 4 records, which follower 2 fetched at
    `fetched_at_ms` (HW 4); follower 3 has not fetched."""
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2), replicas=(1, 2, 3)), now_ms=0)
    append(p, 4)
    fetch(p, 2, 4, fetched_at_ms)
    assert p.high_watermark == 4
    return p


# --- follower bookkeeping (R9) ---------------------------------------------------------------
def test_follower_fetch_state_tracks_leo_and_caught_up_time() -> None:
    f = FollowerState(2)
    f = update_fetch_state(f, fetch_offset=3, log_start_offset=0, fetch_time_ms=100,
                           leader_end_offset=10, broker_epoch=-1)
    assert f.log_end_offset == 3 and f.last_fetch_time_ms == 100
    assert f.last_caught_up_time_ms == NEVER  # behind the leader, never caught up
    # Now it has all the leader had at its previous fetch: caught up as of that fetch.
    f = update_fetch_state(f, fetch_offset=10, log_start_offset=0, fetch_time_ms=200,
                           leader_end_offset=12, broker_epoch=-1)
    assert f.last_caught_up_time_ms == 100
    f = update_fetch_state(f, fetch_offset=12, log_start_offset=0, fetch_time_ms=300,
                           leader_end_offset=12, broker_epoch=-1)
    assert f.last_caught_up_time_ms == 300
    assert f.is_caught_up(12, 10_000_000, LAG)  # at the leader's LEO: never out of sync
    assert not f.is_caught_up(13, 300 + LAG + 1, LAG)


def test_fetch_from_unassigned_replica_is_refused(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(replicas=(1, 2, 3)), now_ms=0)
    for rid in (4, 1):  # not assigned; the leader itself
        with pytest.raises(PartitionError) as e:
            fetch(p, rid, 0, 1)
        assert e.value.error_code == ErrorCode.not_leader_or_follower


def test_stale_broker_epoch_fetch_is_fenced(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(), now_ms=0)
    fetch(p, 2, 0, 1, broker_epoch=50)
    with pytest.raises(PartitionError) as e:
        fetch(p, 2, 0, 2, broker_epoch=40)  # an older incarnation of broker 2
    assert e.value.error_code == ErrorCode.not_leader_or_follower
    fetch(p, 2, 0, 3, broker_epoch=60)
    assert p.remote_replicas[2].broker_epoch == 60


# --- expansion (R5) --------------------------------------------------------------------------
def test_expand_isr_when_follower_catches_up_to_hw(tmp_path: Path) -> None:
    p = leader_at_hw_4(tmp_path, fetched_at_ms=10)
    out = fetch(p, 3, 2, 20)  # behind the HW: not in sync
    assert out.proposal is None and isinstance(p.state, CommittedPartitionState)
    out = fetch(p, 3, 4, 30, broker_epoch=77)
    pending = out.proposal
    assert isinstance(pending, PendingExpandIsr) and p.state is pending
    assert pending.isr == {1, 2} and pending.maximal_isr == {1, 2, 3}
    assert pending.sent is not None
    assert pending.sent.isr == (1, 2, 3) and pending.sent.partition_epoch == 7
    assert pending.sent.leader_epoch == 5
    assert dict(zip(pending.sent.isr, pending.sent.broker_epochs, strict=True))[3] == 77
    # Pending: nothing more is proposed, neither expansion nor shrink.
    assert fetch(p, 3, 4, 40).proposal is None
    assert p.maybe_shrink_isr(10_000_000) is None


def test_no_expansion_of_ineligible_replica(tmp_path: Path) -> None:
    p = make(tmp_path, alive={1, 2})  # broker 3 is not alive
    p.make_leader(leader_state(isr=(1, 2), replicas=(1, 2, 3)), now_ms=0)
    assert fetch(p, 3, 0, 10).proposal is None
    assert isinstance(p.state, CommittedPartitionState) and p.isr == {1, 2}


def test_no_expansion_below_leader_epoch_start_offset(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(epoch=1, isr=(1,), replicas=(1, 2)), now_ms=0)
    append(p, 3)  # HW 3 (ISR = {1})
    p.make_leader(leader_state(epoch=2, isr=(1,), replicas=(1, 2)), now_ms=0)
    assert p.leader_epoch_start_offset == 3
    append(p, 2)
    # A follower at 3 == HW... but the HW is 5 now; a follower at 3 is below both.
    assert fetch(p, 2, 3, 10).proposal is None
    assert isinstance(fetch(p, 2, 5, 20).proposal, PendingExpandIsr)


def test_expansion_commit_on_success(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1,), replicas=(1, 2)), now_ms=0)
    pending = fetch(p, 2, 0, 10).proposal
    assert isinstance(pending, PendingExpandIsr)
    outcome, _ = p.handle_alter_partition_result(
        pending, CommittedLeaderAndIsr(1, 5, (1, 2), 8), now_ms=20)
    assert outcome is AlterOutcome.COMMITTED
    assert p.state == CommittedPartitionState(frozenset({1, 2}))
    assert p.partition_epoch == 8


def test_expansion_rejected_with_ineligible_replica_reverts(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1,), replicas=(1, 2)), now_ms=0)
    append(p, 2)
    pending = fetch(p, 2, 2, 10).proposal
    assert isinstance(pending, PendingExpandIsr)
    outcome, _ = p.handle_alter_partition_result(pending, ErrorCode.ineligible_replica, 20)
    assert outcome is AlterOutcome.REVERTED
    assert p.state == CommittedPartitionState(frozenset({1})) and p.partition_epoch == 7
    # Reverted: a later fetch may propose again.
    assert isinstance(fetch(p, 2, 2, 30).proposal, PendingExpandIsr)


@pytest.mark.parametrize("error", [ErrorCode.fenced_leader_epoch,
                                   ErrorCode.invalid_update_version,
                                   ErrorCode.unknown_topic_or_partition])
def test_errors_where_controller_moved_on_keep_pending_until_leader_and_isr(
        tmp_path: Path, error: ErrorCode) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1,), replicas=(1, 2)), now_ms=0)
    pending = fetch(p, 2, 0, 10).proposal
    assert pending is not None
    outcome, _ = p.handle_alter_partition_result(pending, error, 20)
    assert outcome is AlterOutcome.KEPT_PENDING and p.state is pending
    # The controller's LeaderAndIsr supersedes it.
    p.make_leader(leader_state(epoch=6, isr=(1,), replicas=(1, 2), partition_epoch=9), 30)
    assert p.state == CommittedPartitionState(frozenset({1})) and p.partition_epoch == 9


def test_other_errors_ask_for_a_retry(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1,), replicas=(1, 2)), now_ms=0)
    pending = fetch(p, 2, 0, 10).proposal
    assert pending is not None
    outcome, _ = p.handle_alter_partition_result(pending, ErrorCode.unknown_server_error, 20)
    assert outcome is AlterOutcome.RETRY and p.state is pending


def test_answer_after_superseding_leader_and_isr_is_ignored(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2, 3)), now_ms=0)
    append(p, 1)
    pending = p.maybe_shrink_isr(LAG + 1)
    assert isinstance(pending, PendingShrinkIsr)
    p.make_leader(leader_state(epoch=6, isr=(1, 2), partition_epoch=9), now_ms=LAG + 2)
    outcome, _ = p.handle_alter_partition_result(
        pending, CommittedLeaderAndIsr(1, 5, (1,), 8), LAG + 3)
    assert outcome is AlterOutcome.IGNORED
    assert p.state == CommittedPartitionState(frozenset({1, 2})) and p.partition_epoch == 9


def test_success_for_another_leader_epoch_is_ignored(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1,), replicas=(1, 2)), now_ms=0)
    pending = fetch(p, 2, 0, 10).proposal
    assert pending is not None
    outcome, _ = p.handle_alter_partition_result(
        pending, CommittedLeaderAndIsr(1, 4, (1, 2), 8), 20)
    assert outcome is AlterOutcome.IGNORED and p.state is pending


# --- shrinking (R4) --------------------------------------------------------------------------
def test_shrink_after_lag_time(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2, 3)), now_ms=0)
    append(p, 2, now_ms=0)
    fetch(p, 2, 2, 1_000)  # caught up at 1000
    fetch(p, 3, 1, 1_000)  # behind; in the ISR since 0
    assert p.maybe_shrink_isr(LAG) is None  # 3's lag is exactly the limit
    pending = p.maybe_shrink_isr(LAG + 1)
    assert isinstance(pending, PendingShrinkIsr)
    assert pending.out_of_sync_replicas == {3} and pending.isr == {1, 2, 3}
    assert pending.maximal_isr == {1, 2, 3}  # the HW still waits for 3 until committed
    assert pending.sent is not None and pending.sent.isr == (1, 2)
    assert p.maybe_shrink_isr(LAG * 5) is None  # one change in flight
    assert p.high_watermark == 1
    outcome, hw = p.handle_alter_partition_result(
        pending, CommittedLeaderAndIsr(1, 5, (1, 2), 8), LAG + 2)
    assert outcome is AlterOutcome.COMMITTED and p.isr == {1, 2}
    assert hw and p.high_watermark == 2  # no longer held by 3


def test_follower_at_leader_leo_is_never_out_of_sync(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2), replicas=(1, 2)), now_ms=0)
    append(p, 1)
    fetch(p, 2, 1, 5)
    assert p.maybe_shrink_isr(10 * LAG) is None


def test_follower_that_never_fetched_is_dropped_after_lag(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2), replicas=(1, 2)), now_ms=100)
    append(p, 1)
    assert p.maybe_shrink_isr(100 + LAG) is None
    pending = p.maybe_shrink_isr(100 + LAG + 1)
    assert pending is not None and pending.out_of_sync_replicas == {2}


# --- high watermark (R10) --------------------------------------------------------------------
def test_hw_is_min_over_maximal_isr_and_monotonic(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2, 3)), now_ms=0)
    append(p, 10)
    assert p.high_watermark == 0  # 2 and 3 have not fetched: their LEO is unknown
    fetch(p, 2, 10, 1)
    assert p.high_watermark == 0
    fetch(p, 3, 6, 1)
    assert p.high_watermark == 6
    assert p.log.maybe_increment_high_watermark(5) is False  # monotonic
    assert p.high_watermark == 6
    # The controller took 3 out of the ISR: it no longer holds the HW back.
    p.make_leader(leader_state(epoch=6, isr=(1, 2), partition_epoch=9), now_ms=2)
    assert p.high_watermark == 10  # 2 is at 10 already (kept across the epoch bump)


def test_pending_expansion_holds_hw_for_joining_replica(tmp_path: Path) -> None:
    p = leader_at_hw_4(tmp_path, fetched_at_ms=1)
    append(p, 4)
    assert isinstance(fetch(p, 3, 4, 2).proposal, PendingExpandIsr)
    fetch(p, 2, 8, 3)
    assert p.high_watermark == 4  # 3 is in the maximal ISR
    fetch(p, 3, 8, 4)
    assert p.high_watermark == 8


def test_hw_ignores_lagging_non_isr_replica(tmp_path: Path) -> None:
    p = leader_at_hw_4(tmp_path, fetched_at_ms=1)
    out = fetch(p, 3, 1, 2)  # not in the ISR, never caught up, below the HW
    assert out.proposal is None and p.high_watermark == 4
    append(p, 1)
    fetch(p, 2, 5, 3)
    assert p.high_watermark == 5


def test_hw_candidate_rule() -> None:
    fs = {2: FollowerState(2, log_end_offset=5, last_caught_up_time_ms=0),
          3: FollowerState(3, log_end_offset=3, last_caught_up_time_ms=0)}
    # 3 out of the maximal ISR and lagging: ignored.
    assert high_watermark_candidate(10, fs, frozenset({1, 2}), leader_id=1, now_ms=LAG + 1,
                                    max_lag_ms=LAG, eligible=lambda _: True) == 5
    # 3 caught up recently and eligible: waited for.
    assert high_watermark_candidate(10, fs, frozenset({1, 2}), leader_id=1, now_ms=5,
                                    max_lag_ms=LAG, eligible=lambda _: True) == 3
    # ... unless it cannot join.
    assert high_watermark_candidate(10, fs, frozenset({1, 2}), leader_id=1, now_ms=5,
                                    max_lag_ms=LAG, eligible=lambda b: b != 3) == 5


def test_an_isr_member_outside_the_replicas_holds_the_hw(tmp_path: Path) -> None:
    """A reassignment's step B3 gives the leader the target replicas with the old ISR, step
    B4 the shrunk ISR; a controller lost in between leaves the removed replica in the ISR
    until the next one takes over. It counts toward min.insync.replicas, so the HW waits."""
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2, 3), replicas=(1, 2, 3)), now_ms=0)
    append(p, 4)
    fetch(p, 2, 4, 1)
    fetch(p, 3, 2, 1)
    assert p.high_watermark == 2
    p.make_leader(leader_state(epoch=6, isr=(1, 2, 3), replicas=(1, 2)), now_ms=2)  # B3
    fetch(p, 2, 4, 3)
    assert p.high_watermark == 2 and p.acks_all_satisfied(4, 2) is None  # 3: still waited for
    p.make_leader(leader_state(epoch=7, isr=(1, 2), replicas=(1, 2)), now_ms=4)  # B4
    assert p.high_watermark == 4 and p.acks_all_satisfied(4, 2) == ErrorCode.none
    assert high_watermark_candidate(9, {}, frozenset({1, 3}), leader_id=1, now_ms=0,
                                    max_lag_ms=LAG, eligible=lambda _: True) == -1


def test_single_replica_hw_is_leo(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1,), replicas=(1,)), now_ms=0)
    append(p, 3)
    assert p.high_watermark == 3 and p.maybe_shrink_isr(10 * LAG) is None


# --- acks=all over the maximal ISR (P1) --------------------------------------------------------
def test_acks_all_uses_maximal_isr_for_min_isr(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(leader_state(isr=(1, 2), replicas=(1, 2)), now_ms=0)
    append(p, 1)
    fetch(p, 2, 1, 1)
    assert p.acks_all_satisfied(1, 2) == ErrorCode.none
    pending = p.maybe_shrink_isr(10 * LAG)  # 2 stopped fetching... and is at LEO: no shrink
    assert pending is None
    append(p, 1, now_ms=2)
    pending = p.maybe_shrink_isr(10 * LAG)
    assert pending is not None
    assert p.acks_all_satisfied(1, 2) == ErrorCode.none  # maximal ISR still {1, 2}
    p.handle_alter_partition_result(pending, CommittedLeaderAndIsr(1, 5, (1,), 8), 10 * LAG)
    assert p.high_watermark == 2
    assert p.acks_all_satisfied(2, 2) == ErrorCode.not_enough_replicas_after_append
