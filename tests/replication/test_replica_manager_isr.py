"""The replica manager's leader side on real logs and purgatories, time injected: follower
fetches (SPEC R9), ISR changes through the AlterPartitionManager (R4–R6), acks=all (P1–P3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.protocol.interbroker import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from wherry.protocol.records import build_batch
from wherry.purgatory import DelayedOperationPurgatory, Timer
from wherry.replication.alter_partition import AlterPartitionManager, parse_response
from wherry.replication.delayed import ProducePartitionStatus
from wherry.replication.fetch_reads import FetchPartition, FetchResult
from wherry.replication.isr import CommittedPartitionState, PendingExpandIsr, PendingShrinkIsr
from wherry.replication.replica_manager import ReplicaManager

TP = TopicPartition("t", 0)
TOPIC_ID = uuid.uuid4()
LAG = 10_000
Result = Mapping[TopicPartition, ProducePartitionStatus]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Env:
    def __init__(self, tmp_path: Path, min_isr: int = 1) -> None:
        self.clock = Clock()
        self.lm = LogManager([tmp_path], LogConfig(), self.clock)
        self.lm.startup()
        cfg = LogConfig(min_insync_replicas=min_isr)
        self.produce = DelayedOperationPurgatory("Produce", Timer(start_ms=self.clock.now))
        self.fetchp = DelayedOperationPurgatory("Fetch", Timer(start_ms=self.clock.now))
        self.alive = {1, 2, 3}
        self.apm = AlterPartitionManager(1, lambda: 100)
        self.rm = ReplicaManager(
            1, self.lm, lambda _: cfg, self.produce, self.fetchp, self.clock,
            replica_lag_time_max_ms=LAG, alter_partition_manager=self.apm,
            is_broker_alive=lambda b: b in self.alive, broker_epoch=lambda: 100,
        )

    def lead(self, epoch: int = 1, isr: tuple[int, ...] = (1, 2, 3),
             replicas: tuple[int, ...] = (1, 2, 3), pe: int = 0) -> None:
        st = LeaderAndIsrPartitionState("t", 0, 1, 1, epoch, isr, pe, replicas)
        self.rm.become_leader_or_follower(
            LeaderAndIsrRequest(0, 1, 0, (st,), {"t": TOPIC_ID}, ()), self.clock.now)

    def follow(self, epoch: int) -> None:
        st = LeaderAndIsrPartitionState("t", 0, 1, 2, epoch, (1, 2, 3), 0, (1, 2, 3))
        self.rm.become_leader_or_follower(
            LeaderAndIsrRequest(0, 1, 0, (st,), {"t": TOPIC_ID}, ()), self.clock.now)

    def produce_acks_all(self, n: int = 1, timeout_ms: int = 30_000) -> list[Result]:
        got: list[Result] = []
        self.rm.append_records(timeout_ms=timeout_ms, required_acks=-1,
                               entries={TP: build_batch([(None, b"v")] * n)},
                               respond=got.append, now_ms=self.clock.now)
        return got

    def follower_fetch(self, replica: int, offset: int, *, epoch: int = -1,
                       replica_epoch: int = -1) -> FetchResult:
        out: list[FetchResult] = []
        self.rm.fetch_messages(replica_id=replica, max_wait_ms=0, min_bytes=1,
                               max_bytes=1 << 20,
                               partitions=[FetchPartition(TP, offset, 1 << 20, epoch, 0)],
                               respond=out.append, replica_epoch=replica_epoch)
        assert len(out) == 1
        return out[0]

    @property
    def part(self):  # type: ignore[no-untyped-def]
        p = self.rm.get_partition(TP)
        assert p is not None
        return p

    def answer_alter_partition(self, isr_error: ErrorCode = ErrorCode.none,
                               partition_epoch: int | None = None) -> None:
        """Play the controller for the request the manager would send now."""
        nxt = self.apm.next_request(self.clock.now)
        assert nxt is not None
        body, items = nxt
        parts = []
        for t in body["topics"]:
            for p in t["partitions"]:
                parts.append(_Obj(partition_index=p["partition_index"], error_code=isr_error,
                                  leader_id=1, leader_epoch=p["leader_epoch"],
                                  isr=tuple(p["new_isr"]), leader_recovery_state=0,
                                  partition_epoch=partition_epoch
                                  if partition_epoch is not None else p["partition_epoch"] + 1))
        resp = _Obj(error_code=0, topics=(_Obj(topic_id=TOPIC_ID, partitions=tuple(parts)),))
        assert parse_response(resp)
        for it, res in self.apm.handle_response(items, resp, self.clock.now):
            it.callback(res)


class _Obj:
    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, min_isr=2)
    yield e
    e.lm.shutdown()


def test_follower_fetch_updates_state_and_completes_acks_all(env: Env) -> None:
    env.lead()
    got = env.produce_acks_all(2)
    assert got == []  # parked: followers have not fetched
    env.clock.now += 5
    r = env.follower_fetch(2, 0)
    assert r[TP].error_code == ErrorCode.none and r[TP].records  # followers read to the LEO
    st = env.part.remote_replicas[2]
    assert st.log_end_offset == 0 and st.last_fetch_time_ms == env.clock.now
    env.follower_fetch(2, 2)
    assert got == [] and env.part.high_watermark == 0  # 3 still at unknown
    r = env.follower_fetch(3, 2)
    assert env.part.high_watermark == 2 and r[TP].high_watermark == 2
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.none


def test_fetch_from_unassigned_replica_gets_not_leader(env: Env) -> None:
    env.lead(replicas=(1, 2, 3))
    assert env.follower_fetch(4, 0)[TP].error_code == ErrorCode.not_leader_or_follower


@pytest.mark.parametrize(("epoch", "code"), [(0, ErrorCode.fenced_leader_epoch),
                                              (9, ErrorCode.unknown_leader_epoch)])
def test_current_leader_epoch_fences_followers(env: Env, epoch: int, code: ErrorCode) -> None:
    env.lead(epoch=1)
    assert env.follower_fetch(2, 0, epoch=epoch)[TP].error_code == code
    assert env.part.remote_replicas[2].log_end_offset == -1  # not recorded


def test_acks_all_times_out(env: Env) -> None:
    env.lead()
    got = env.produce_acks_all(timeout_ms=100)
    env.clock.now += 101
    env.produce.advance_clock(env.clock.now)
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.request_timed_out


def test_acks_all_fails_on_leadership_loss(env: Env) -> None:
    env.lead(epoch=1)
    got = env.produce_acks_all()
    env.follow(epoch=2)
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.not_leader_or_follower


def test_not_enough_replicas_before_append(env: Env) -> None:
    env.lead(isr=(1,))
    got = env.produce_acks_all()
    assert got[0][TP].error_code == ErrorCode.not_enough_replicas
    assert env.part.log.log_end_offset == 0


def test_shrink_below_min_isr_gives_not_enough_replicas_after_append(env: Env) -> None:
    env.lead(isr=(1, 2), replicas=(1, 2))
    env.follower_fetch(2, 0)
    got = env.produce_acks_all()
    env.clock.now += LAG + 1
    assert env.rm.maybe_shrink_isr() == 1
    assert isinstance(env.part.state, PendingShrinkIsr) and got == []
    env.answer_alter_partition()
    assert env.part.state == CommittedPartitionState(frozenset({1}))
    assert env.rm.isr_shrinks == 1
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.not_enough_replicas_after_append


def test_expansion_through_manager_and_revert_on_ineligible(env: Env) -> None:
    env.lead(isr=(1, 2), replicas=(1, 2, 3))
    env.follower_fetch(2, 0)
    env.follower_fetch(3, 0, replica_epoch=55)
    assert isinstance(env.part.state, PendingExpandIsr)
    assert list(env.apm.unsent) == [TP]
    body = env.apm.next_request(env.clock.now)
    assert body is not None
    env.apm.unsent[TP] = body[1][0]  # put it back for the helper
    env.apm.inflight = None
    p = body[0]["topics"][0]["partitions"][0]
    assert p["new_isr_with_epochs"] == [{"broker_id": 1, "broker_epoch": 100},
                                        {"broker_id": 2, "broker_epoch": -1},
                                        {"broker_id": 3, "broker_epoch": 55}]
    env.answer_alter_partition(ErrorCode.ineligible_replica)
    assert env.part.state == CommittedPartitionState(frozenset({1, 2}))
    # Proposed again on the next fetch, and committed this time.
    env.follower_fetch(3, 0)
    env.answer_alter_partition()
    assert env.part.isr == {1, 2, 3} and env.rm.isr_expands == 1
    assert env.part.partition_epoch == 1


def test_retry_on_other_partition_error(env: Env) -> None:
    env.lead(isr=(1, 2), replicas=(1, 2, 3))
    env.follower_fetch(3, 0)
    env.answer_alter_partition(ErrorCode.unknown_server_error)
    assert isinstance(env.part.state, PendingExpandIsr)
    assert list(env.apm.unsent) == [TP]  # re-submitted
    env.answer_alter_partition()
    assert env.part.isr == {1, 2, 3}


def test_single_broker_path(tmp_path: Path) -> None:
    e = Env(tmp_path, min_isr=1)
    try:
        e.lead(isr=(1,), replicas=(1,))
        got = e.produce_acks_all(3)
        assert len(got) == 1 and got[0][TP].error_code == ErrorCode.none
        assert e.part.high_watermark == 3
        assert e.rm.maybe_shrink_isr(e.clock.now + 10 * LAG) == 0
    finally:
        e.lm.shutdown()


def test_proposal_behind_a_stale_queued_one_is_not_left_pending(env: Env) -> None:
    """A proposal made while an older one for the partition still holds the manager's queue
    slot (re-queued after its request to a controller that died failed, while the new
    controller's LeaderAndIsr replaced the state) is not attempted: the partition goes back to
    its committed state and proposes again later, as Kafka's OperationNotAttemptedException
    does, instead of staying pending with nothing sent (the ISR frozen, a reassignment waiting
    for it forever)."""
    env.lead(isr=(1, 2), replicas=(1, 2, 3))
    env.follower_fetch(3, 0)
    nxt = env.apm.next_request(env.clock.now)
    assert nxt is not None
    env.apm.handle_response(nxt[1], ConnectionError("controller gone"), env.clock.now)
    assert list(env.apm.unsent) == [TP]  # the stale proposal, queued again
    env.lead(epoch=2, isr=(1, 2), replicas=(1, 2, 3), pe=1)  # the new controller's state
    env.follower_fetch(3, 0)  # caught up: a new proposal, which cannot be queued
    assert env.part.state == CommittedPartitionState(frozenset({1, 2}))
    env.clock.now += 1_000
    env.answer_alter_partition(ErrorCode.fenced_leader_epoch)  # the stale one: ignored
    assert env.part.state == CommittedPartitionState(frozenset({1, 2}))
    env.follower_fetch(3, 0)
    assert isinstance(env.part.state, PendingExpandIsr)
    env.answer_alter_partition()
    assert env.part.isr == {1, 2, 3}


def test_a_caught_up_replica_whose_broker_goes_stops_holding_the_hw(env: Env) -> None:
    """A caught-up replica outside the ISR holds the HW while its broker is alive (it may join
    the ISR); once the metadata drops its broker (`on_brokers_gone`), the HW moves and parked
    acks=all produces complete at once, not at the next append."""
    env.lead(isr=(1, 2))
    env.alive = {1, 2}
    assert env.produce_acks_all() == []
    env.follower_fetch(3, 1)  # broker 3 caught up while not eligible: no ISR proposal
    env.follower_fetch(2, 1)
    env.alive = {1, 2, 3}
    got = env.produce_acks_all()
    env.follower_fetch(2, 2)
    assert got == [] and env.rm.get_partition(TP).high_watermark == 1  # 3 holds it at 1
    env.alive = {1, 2}
    env.rm.on_brokers_gone()
    assert env.rm.get_partition(TP).high_watermark == 2
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.none


def test_the_isr_expiration_task_moves_a_hw_held_by_a_replica_no_longer_caught_up(
    env: Env,
) -> None:
    """A replica outside the ISR holds the HW only while it counts as caught up; that ends
    with time alone (no fetch, no append), so the `isr-expiration` task re-checks the HW and
    completes the parked acks=all produce rather than leaving it to time out."""
    env.lead(isr=(1, 2))
    env.alive = {1, 2}
    env.follower_fetch(3, 0)  # caught up while not eligible: no ISR proposal
    env.alive = {1, 2, 3}  # its broker is back but cannot fetch (say, a wrong password)
    got = env.produce_acks_all()
    env.follower_fetch(2, 1)
    assert got == [] and env.part.high_watermark == 0  # 3 holds it: caught up just now
    env.clock.now += LAG + 1
    env.follower_fetch(2, 1)  # no progress: the HW is not looked at again here
    assert got == [] and env.part.high_watermark == 0
    assert env.rm.maybe_shrink_isr() == 0  # 3 is no ISR member: nothing to shrink
    assert env.part.high_watermark == 1
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.none


def test_a_replica_whose_broker_went_and_came_back_holds_the_hw_only_once_it_fetches(
    env: Env,
) -> None:
    """What a replica fetched before its broker left the live set does not make it caught up
    when the broker is back (a new incarnation): acks=all completes on the ISR's progress."""
    env.lead(isr=(1, 2))
    env.alive = {1, 2}
    env.follower_fetch(3, 0)  # caught up (while not eligible: no ISR proposal)
    env.rm.on_brokers_gone()  # broker 3 left the live set ...
    env.alive = {1, 2, 3}  # ... and is back, not fetching
    got = env.produce_acks_all()
    env.follower_fetch(2, 1)
    assert env.part.high_watermark == 1
    assert len(got) == 1 and got[0][TP].error_code == ErrorCode.none


def test_the_hw_check_after_an_append_uses_the_follower_clock(tmp_path: Path) -> None:
    """Follower fetch times are on the replica manager's (monotonic) clock; the produce's
    `now_ms` is the wall clock (append times). The HW check after an append must use the
    former: a caught-up replica about to join the ISR holds the HW there too."""
    env = Env(tmp_path, min_isr=1)
    try:
        env.lead(isr=(1,), replicas=(1, 2))
        env.alive = {1}
        env.follower_fetch(2, 0)  # caught up while not eligible: no ISR proposal
        env.alive = {1, 2}
        wall_ms = 1_700_000_000_000
        env.rm.append_records(timeout_ms=1_000, required_acks=1,
                              entries={TP: build_batch([(None, b"v")])},
                              respond=lambda _: None, now_ms=wall_ms)
        assert env.part.log.log_end_offset == 1
        assert env.part.high_watermark == 0  # replica 2 (caught up just now) holds it
        env.follower_fetch(2, 1)
        assert env.part.high_watermark == 1
    finally:
        env.lm.shutdown()


def test_lagging_followers_are_tracked_for_incremental_fetch_sessions(env: Env) -> None:
    """A follower outside the committed ISR is listed by `lagging` (its incremental fetches
    read the partition every time, so it can rejoin though its position does not move)."""
    env.lead(isr=(1, 2))
    assert TP in env.rm.lagging(3) and TP not in env.rm.lagging(2)
    env.produce_acks_all(2)
    env.follower_fetch(2, 2)
    env.follower_fetch(3, 2)  # caught up: expansion proposed, pending until committed
    assert isinstance(env.part.state, PendingExpandIsr)
    assert TP in env.rm.lagging(3) and TP in env.rm.lagging(2)
    env.answer_alter_partition()
    assert isinstance(env.part.state, CommittedPartitionState)
    assert env.part.isr == {1, 2, 3}
    assert TP not in env.rm.lagging(3) and TP not in env.rm.lagging(2)
    env.follow(epoch=2)  # no longer leading: nothing lags behind this broker
    assert TP not in env.rm.lagging(2) and TP not in env.rm.lagging(3)


def test_acks_all_parks_only_what_the_hw_does_not_cover(tmp_path: Path) -> None:
    """An acks=all append the HW already covers (an ISR of the leader alone) is answered at
    once, nothing parked; in a request with a partition that waits, it waits with it."""
    e = Env(tmp_path, min_isr=1)
    tp1 = TopicPartition("t", 1)
    try:
        states = (
            LeaderAndIsrPartitionState("t", 0, 1, 1, 1, (1,), 0, (1,)),
            LeaderAndIsrPartitionState("t", 1, 1, 1, 1, (1, 2), 0, (1, 2)),
        )
        e.rm.become_leader_or_follower(
            LeaderAndIsrRequest(0, 1, 0, states, {"t": TOPIC_ID}, ()), e.clock.now)
        alone = e.produce_acks_all(2)
        assert len(alone) == 1 and alone[0][TP].error_code == ErrorCode.none
        assert alone[0][TP].base_offset == 0 and e.produce.delayed == 0
        got: list[Result] = []
        e.rm.append_records(timeout_ms=30_000, required_acks=-1,
                            entries={TP: build_batch([(None, b"v")]),
                                     tp1: build_batch([(None, b"w")] * 3)},
                            respond=got.append, now_ms=e.clock.now)
        assert got == [] and e.produce.watched(tp1) == 1 and e.produce.watched(TP) == 0
        out: list[FetchResult] = []
        e.rm.fetch_messages(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                            partitions=[FetchPartition(tp1, 3, 1 << 20, -1, 0)],
                            respond=out.append)
        assert len(got) == 1
        assert {tp: (s.error_code, s.base_offset) for tp, s in got[0].items()} == {
            TP: (ErrorCode.none, 2), tp1: (ErrorCode.none, 0)}
    finally:
        e.lm.shutdown()
