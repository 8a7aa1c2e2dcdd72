"""Follower fetchers (SPEC R8, H5): the pure fetch-state machine and truncation rules, and the
KIP-101 / KIP-279 scenarios on real logs in temporary directories.

The leader is reached through `LocalLeader`, a tiny in-process "network": it answers
OffsetForLeaderEpoch with the real handler logic (`partition.epoch_end_offset`
on a real `Partition`) and Fetch by reading the leader's log the way the Fetch handler does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.log.logtest_util import read_all
from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.errors import OffsetOutOfRangeError
from wherry.log.log import Log
from wherry.protocol.records import build_batch
from wherry.replication.fetcher import (
    EpochAnswer,
    FetchedPartition,
    FetcherConfig,
    FetchLimits,
    FetchPosition,
    FetchStateKind,
    FetchStates,
    LeaderAddress,
    LogOffsets,
    ReplicaFetcher,
    ReplicaFetcherManager,
)
from wherry.replication.partition import Partition, epoch_end_offset
from wherry.replication.truncation import (
    EpochEndOffset,
    OutOfRangeAction,
    TruncationState,
    out_of_range_action,
    truncation_point,
)

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
LEADER, FOLLOWER = 1, 2
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=128, segment_index_bytes=4096)


# --- pure rules ------------------------------------------------------------------------------
def test_fetch_states_add_truncates_first_and_keeps_state_for_the_same_epoch() -> None:
    s = FetchStates()
    assert s.add(TP, 3, 10)
    st = s.get(TP)
    assert st is not None and st.kind is FetchStateKind.TRUNCATING and st.fetch_offset == 10
    s.fetching_at(TP, 12, 3)
    assert not s.add(TP, 3, 99)  # same epoch: keep fetching where we are
    st = s.get(TP)
    assert st is not None and st.kind is FetchStateKind.FETCHING and st.fetch_offset == 12
    assert s.add(TP, 4, 12)  # newer epoch: truncate again
    st = s.get(TP)
    assert st is not None and st.kind is FetchStateKind.TRUNCATING and st.current_leader_epoch == 4


def test_fetch_states_backoff_fencing_and_stale_answers() -> None:
    s = FetchStates()
    s.add(TP, 5, 0)
    s.fetching_at(TP, 0, None)
    sent = s.get(TP)
    assert sent is not None
    assert TP in s.ready(FetchStateKind.FETCHING, 0)
    s.on_error(TP, sent, ErrorCode.not_leader_or_follower, now_ms=100, backoff_ms=1000)
    assert s.ready(FetchStateKind.FETCHING, 500) == {}
    assert s.next_ready_ms() == 1100
    assert TP in s.ready(FetchStateKind.FETCHING, 1100)
    # An answer for a request sent before a re-add no longer applies.
    s.add(TP, 6, 0)
    assert not s.unchanged(TP, sent)
    # FENCED_LEADER_EPOCH for an older request epoch does not fence the new state...
    s.on_error(TP, sent, ErrorCode.fenced_leader_epoch, now_ms=0, backoff_ms=1000)
    st = s.get(TP)
    assert st is not None and st.kind is FetchStateKind.TRUNCATING
    # ...but for the current epoch it parks the partition until a new LeaderAndIsr.
    s.on_error(TP, st, ErrorCode.fenced_leader_epoch, now_ms=0, backoff_ms=1000)
    st = s.get(TP)
    assert st is not None and st.kind is FetchStateKind.FENCED
    assert s.ready(FetchStateKind.TRUNCATING, 10**12) == {}
    assert s.next_ready_ms() is None
    assert s.add(TP, 7, 0)
    assert TP in s.ready(FetchStateKind.TRUNCATING, 0)


@pytest.mark.parametrize(
    ("leader", "own", "leo", "hw", "expected"),
    [
        # same epoch: min(leader end, follower end), done (KIP-101)
        (EpochEndOffset(3, 10), (3, 12), 12, 5, TruncationState(10, True)),
        (EpochEndOffset(3, 15), (3, 12), 12, 5, TruncationState(12, True)),
        # leader answers an older epoch the follower ends elsewhere: iterate (KIP-279)
        (EpochEndOffset(2, 4), (1, 3), 5, 0, TruncationState(3, False)),
        # follower knows no epoch <= the leader's: the leader's end offset
        (EpochEndOffset(2, 4), None, 9, 0, TruncationState(4, True)),
        # leader knows nothing for the epoch: the high watermark
        (EpochEndOffset(-1, -1), (3, 12), 12, 7, TruncationState(7, True)),
        # old-format leader: its offset
        (EpochEndOffset(-1, 6), (3, 12), 12, 0, TruncationState(6, True)),
    ],
)
def test_truncation_point(
    leader: EpochEndOffset,
    own: tuple[int, int] | None,
    leo: int,
    hw: int,
    expected: TruncationState,
) -> None:
    got = truncation_point(
        leader, follower_end_offset_for=own, follower_log_end_offset=leo, follower_high_watermark=hw
    )
    assert got == expected


def test_out_of_range_rules() -> None:
    # Follower ahead of the leader (unclean election): truncate to the leader's end.
    assert out_of_range_action(
        follower_log_end_offset=20, leader_log_end_offset=15, leader_log_start_offset=0
    ) == OutOfRangeAction(15, truncate_fully=False)
    # Leader deleted what the follower lacks: start over at its log start.
    assert out_of_range_action(
        follower_log_end_offset=5, leader_log_end_offset=50, leader_log_start_offset=30
    ) == OutOfRangeAction(30, truncate_fully=True)
    assert out_of_range_action(
        follower_log_end_offset=40, leader_log_end_offset=50, leader_log_start_offset=30
    ) == OutOfRangeAction(40, truncate_fully=False)


def test_offset_for_leader_epoch_answers_and_errors(tmp_path: Path) -> None:
    llog = new_log(tmp_path, "leader")
    append(llog, 0, b"a", b"b")
    append(llog, 3, b"c")
    part = leader_partition(llog, 3)

    def ask(current: int, epoch: int, replica_id: int = FOLLOWER) -> tuple[ErrorCode, int, int]:
        return epoch_end_offset(
            part, current_leader_epoch=current, leader_epoch=epoch, replica_id=replica_id
        )

    assert ask(3, 3) == (ErrorCode.none, 3, 3)  # current epoch: the log end offset
    assert ask(-1, 2) == (ErrorCode.none, 0, 2)  # largest epoch <= 2 is 0, ending at 2
    assert ask(-1, 0) == (ErrorCode.none, 0, 2)
    assert ask(-1, 9) == (ErrorCode.none, -1, -1)  # unknown epoch
    assert ask(2, 3) == (ErrorCode.fenced_leader_epoch, -1, -1)
    assert ask(4, 3) == (ErrorCode.unknown_leader_epoch, -1, -1)
    part.leader_id = 3
    assert ask(3, 3) == (ErrorCode.not_leader_or_follower, -1, -1)
    assert ask(3, 3, replica_id=-2) == (ErrorCode.none, 3, 3)  # debugging replica
    no_part = epoch_end_offset(None, current_leader_epoch=-1, leader_epoch=0, replica_id=-1)
    assert no_part == (ErrorCode.unknown_topic_or_partition, -1, -1)
    stale = epoch_end_offset(
        None, current_leader_epoch=-1, leader_epoch=0, replica_id=-1, known_partition=True
    )
    assert stale == (ErrorCode.not_leader_or_follower, -1, -1)


# --- an in-process leader --------------------------------------------------------------------
class LocalLeader:
    """`LeaderEndpoint` answering from a real leader `Partition` in this process."""

    def __init__(self, part: Partition, *, diverging_epoch: bool = False) -> None:
        self.part = part
        self.diverging_epoch = diverging_epoch
        self.down = False
        self.epoch_requests: list[dict[TopicPartition, tuple[int, int]]] = []

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("leader unreachable")

    async def fetch(
        self,
        partitions: Mapping[TopicPartition, FetchPosition],
        limits: FetchLimits,
    ) -> dict[TopicPartition, FetchedPartition]:
        self._check()
        out: dict[TopicPartition, FetchedPartition] = {}
        for tp, pos in partitions.items():
            part = self.part
            err = part.check_leader_epoch(pos.current_leader_epoch)
            if err is ErrorCode.none and not part.is_leader:
                err = ErrorCode.not_leader_or_follower
            if err is not ErrorCode.none:
                out[tp] = FetchedPartition(err)
                continue
            plog = part.log
            if self.diverging_epoch and pos.last_fetched_epoch >= 0:
                # What Kafka's leader does (KIP-320, Partition.readRecords).
                epoch, end = plog.end_offset_for_epoch(pos.last_fetched_epoch)
                if epoch < pos.last_fetched_epoch or end < pos.fetch_offset:
                    out[tp] = FetchedPartition(
                        ErrorCode.none,
                        part.high_watermark,
                        plog.log_start_offset,
                        b"",
                        EpochEndOffset(epoch, end),
                    )
                    continue
            try:
                data = plog.read(pos.fetch_offset, max_bytes=limits.partition_max_bytes)
            except OffsetOutOfRangeError:
                out[tp] = FetchedPartition(ErrorCode.offset_out_of_range)
                continue
            out[tp] = FetchedPartition(
                ErrorCode.none, part.high_watermark, plog.log_start_offset, data
            )
        return out

    async def end_offsets_for_epochs(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochAnswer]:
        self._check()
        self.epoch_requests.append(dict(partitions))
        out = {}
        for tp, (current, epoch) in partitions.items():
            err, e, end = epoch_end_offset(
                self.part, current_leader_epoch=current, leader_epoch=epoch, replica_id=FOLLOWER
            )
            out[tp] = EpochAnswer(err, e, end)
        return out

    async def log_offsets(self, tp: TopicPartition, current_leader_epoch: int) -> LogOffsets:
        self._check()
        plog = self.part.log
        return LogOffsets(ErrorCode.none, plog.log_start_offset, plog.log_end_offset)

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def new_log(path: Path, name: str) -> Log:
    return Log.open(path / name / "t-0", CONFIG, topic_partition=TP, now_ms=T0)


def append(log: Log, epoch: int, *values: bytes, pid: int = -1, seq: int = -1) -> None:
    batch = build_batch(
        [(None, v) for v in values],
        timestamp_ms=T0,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
    )
    log.append_as_leader(batch, leader_epoch=epoch, now_ms=T0)


def leader_partition(log: Log, epoch: int) -> Partition:
    part = Partition(TP, LEADER, log, leader_id=LEADER, leader_epoch=epoch)
    log.update_high_watermark(log.log_end_offset)
    return part


def follower(leader: LocalLeader, flog: Log, clock: Clock | None = None) -> ReplicaFetcher:
    f = ReplicaFetcher(
        broker_id=FOLLOWER,
        source_broker_id=LEADER,
        endpoint=leader,
        log_for=lambda tp: flog if tp == TP else None,
        monotonic_ms=clock or Clock(),
        config=FetcherConfig(backoff_ms=1000),
    )
    f.add_partition(TP, leader.part.leader_epoch)
    return f


def run_until_caught_up(f: ReplicaFetcher, leader_log: Log, flog: Log, rounds: int = 20) -> None:
    async def go() -> None:
        for _ in range(rounds):
            st = f.states.get(TP)
            if (
                st is not None
                and st.kind is FetchStateKind.FETCHING
                and flog.log_end_offset == leader_log.log_end_offset
            ):
                return
            assert await f.do_work(), "fetcher had nothing to do"
        raise AssertionError(f"not caught up after {rounds} rounds")

    asyncio.run(go())


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries]


# --- KIP-101 ---------------------------------------------------------------------------------
def test_kip101_follower_keeps_data_above_its_high_watermark(tmp_path: Path) -> None:
    """Scenario 1 of KIP-101: a follower that restarts with HW < LEO must not truncate to its
    HW (the leader has the data), or a later leader change loses a committed message."""
    llog, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    for log in (llog, flog):
        append(log, 0, b"m1")
        append(log, 0, b"m2")
    flog.update_high_watermark(1)  # the follower had not yet learnt that m2 is committed
    leader = LocalLeader(leader_partition(llog, 1))
    f = follower(leader, flog)
    run_until_caught_up(f, llog, flog)
    assert flog.log_end_offset == 2
    assert read_all(flog) == read_all(llog)
    assert leader.epoch_requests == [{TP: (1, 0)}]
    assert asyncio.run(f.do_work())  # a fetch round brings the leader's high watermark
    assert flog.high_watermark == 2


def test_kip101_divergent_suffix_is_replaced(tmp_path: Path) -> None:
    """Scenario 2 of KIP-101: both replicas crash; B comes back first, leads epoch 1 and
    writes m3 at offset 1; A comes back with an uncommitted m2 at offset 1 (epoch 0). As a
    follower, A must drop m2 and take m3."""
    a, b = new_log(tmp_path, "a"), new_log(tmp_path, "b")
    append(a, 0, b"m1")
    append(b, 0, b"m1")
    append(a, 0, b"m2")  # never replicated
    append(b, 1, b"m3")
    leader = LocalLeader(leader_partition(b, 1))
    f = follower(leader, a)
    run_until_caught_up(f, b, a)
    assert read_all(a) == read_all(b)
    assert epochs(a) == epochs(b) == [(0, 0), (1, 1)]


def test_diverging_epoch_in_fetch_response_truncates(tmp_path: Path) -> None:
    """KIP-320: a leader answering a Fetch with `diverging_epoch` has the same effect."""
    a, b = new_log(tmp_path, "a"), new_log(tmp_path, "b")
    append(a, 0, b"m1")
    append(b, 0, b"m1")
    leader = LocalLeader(leader_partition(b, 1), diverging_epoch=True)
    f = follower(leader, a)
    run_until_caught_up(f, b, a)  # truncation round + catch-up
    # Now A writes a suffix the leader never sees (e.g. it briefly led an epoch 1 of its own
    # in a split brain the controller fenced), and the leader moves on.
    append(a, 0, b"x1", b"x2")
    append(b, 1, b"m2")
    append(b, 1, b"m3", b"m4")
    b.update_high_watermark(b.log_end_offset)
    st = f.states.get(TP)
    assert st is not None
    f.states.fetching_at(TP, a.log_end_offset, a.latest_epoch)
    run_until_caught_up(f, b, a)
    assert read_all(a) == read_all(b)


# --- KIP-279 ---------------------------------------------------------------------------------
def test_kip279_iterates_until_epochs_match(tmp_path: Path) -> None:
    """Fast leader changes leave the follower with epochs the leader never had: leader epochs
    0@0, 2@2, 4@4; follower epochs 0@0, 1@1, 3@3. A single KIP-101 step would keep the
    follower's offsets 1-3 (epochs 1 and 3), which the leader does not have."""
    leader_log, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    append(leader_log, 0, b"a0")
    append(leader_log, 0, b"a1")  # the follower had replicated only a0 when it diverged
    append(leader_log, 2, b"L2", b"L3")
    append(leader_log, 4, b"L4", b"L5")
    append(flog, 0, b"a0")
    append(flog, 1, b"F1", b"F2")
    append(flog, 3, b"F3", b"F4")
    assert epochs(leader_log) == [(0, 0), (2, 2), (4, 4)]
    assert epochs(flog) == [(0, 0), (1, 1), (3, 3)]
    leader = LocalLeader(leader_partition(leader_log, 5))
    f = follower(leader, flog)
    run_until_caught_up(f, leader_log, flog)
    # Asked with epoch 3 (answer: epoch 2 ends at 4 → truncate to 3, not done), then with
    # epoch 1 (answer: epoch 0 ends at 2; the follower's epoch 0 ends at 1 → truncate to 1).
    assert leader.epoch_requests == [{TP: (5, 3)}, {TP: (5, 1)}]
    assert read_all(flog) == read_all(leader_log)
    assert epochs(flog) == epochs(leader_log)


def test_follower_that_led_an_empty_epoch_finishes_truncating(tmp_path: Path) -> None:
    """Sim seed 577: the follower led epoch 2 from offset 2 without writing anything (its
    epoch cache ends with 2@2 at its log end); the leader never had epoch 2 and wrote epoch 1
    from offset 2. Asked about epoch 2, the leader answers epoch 1 ending at 3; the follower's
    own epoch 1 ends at 2 (its epoch 0), so it truncates to 2 and asks again: the truncation
    to its log end must drop the empty epoch 2, else it asks about epoch 2 forever and never
    rejoins the ISR."""
    leader_log, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    for log in (leader_log, flog):
        append(log, 0, b"a0", b"a1")
    flog.leader_epoch_cache.assign(2, 2)  # what becoming the leader of epoch 2 does
    append(leader_log, 1, b"L2")
    leader_log.leader_epoch_cache.assign(3, 3)  # what becoming the leader of epoch 3 does
    leader = LocalLeader(leader_partition(leader_log, 3))
    f = follower(leader, flog)
    run_until_caught_up(f, leader_log, flog, rounds=6)
    assert leader.epoch_requests == [{TP: (3, 2)}, {TP: (3, 0)}]
    assert read_all(flog) == read_all(leader_log)
    assert epochs(flog) == [(0, 0), (1, 2)]


# --- other paths -----------------------------------------------------------------------------
def test_replicated_idempotent_batches_are_duplicates_on_the_follower(tmp_path: Path) -> None:
    """A follower rebuilds producer state from what it replicates, so after a leader change
    a producer's retry of an already replicated batch is recognised as a duplicate."""
    llog, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    append(llog, 0, b"p0", b"p1", pid=7, seq=0)
    append(llog, 0, b"p2", pid=7, seq=2)
    leader = LocalLeader(leader_partition(llog, 0))
    f = follower(leader, flog)
    run_until_caught_up(f, llog, flog)
    retry = build_batch(
        [(None, b"p2")], timestamp_ms=T0, producer_id=7, producer_epoch=0, base_sequence=2
    )
    info = flog.append_as_leader(retry, leader_epoch=1, now_ms=T0)
    assert info.duplicate and info.first_offset == 2
    assert flog.log_end_offset == 3


def test_follower_high_watermark_and_log_start_follow_the_leader(tmp_path: Path) -> None:
    llog, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    for i in range(5):
        append(llog, 0, b"v%d" % i)
    part = leader_partition(llog, 0)
    llog.update_high_watermark(3)
    leader = LocalLeader(part)
    f = follower(leader, flog)
    run_until_caught_up(f, llog, flog)
    assert flog.high_watermark == 3
    llog.update_high_watermark(5)
    llog.maybe_increment_log_start_offset(2)
    append(llog, 0, b"v5")
    run_until_caught_up(f, llog, flog)
    assert flog.high_watermark == 5  # min(leader HW 5, own LEO 6)
    assert flog.log_start_offset == 2


def test_out_of_range_truncates_fully_to_the_leader_log_start(tmp_path: Path) -> None:
    llog, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    append(flog, 0, b"old")
    llog.truncate_fully_and_start_at(10)
    for i in range(3):
        append(llog, 0, b"n%d" % i)
    leader = LocalLeader(leader_partition(llog, 0))
    f = follower(leader, flog)
    run_until_caught_up(f, llog, flog)
    assert flog.log_start_offset == 10 and flog.log_end_offset == 13
    assert read_all(flog) == read_all(llog)


def test_errors_back_off_and_fence(tmp_path: Path) -> None:
    llog, flog = new_log(tmp_path, "leader"), new_log(tmp_path, "follower")
    append(llog, 0, b"v")
    part = leader_partition(llog, 4)
    leader = LocalLeader(part)
    clock = Clock()
    f = follower(leader, flog, clock)

    async def go() -> None:
        # Connection loss: everything backs off, then retries.
        assert await f.do_work()  # truncation (empty log: no epoch to ask about)
        st = f.states.get(TP)
        assert st is not None and st.kind is FetchStateKind.FETCHING
        leader.down = True
        assert await f.do_work()  # the fetch fails
        assert not await f.do_work()  # backing off
        leader.down = False
        clock.ms = 1000
        assert await f.do_work()  # fetch
        assert flog.log_end_offset == 1
        # The leader moved on to epoch 5 that we have not heard of: FENCED, parked.
        part.leader_epoch = 5
        append(llog, 5, b"w")
        assert await f.do_work()
        st = f.states.get(TP)
        assert st is not None and st.kind is FetchStateKind.FENCED
        assert not await f.do_work()
        # A newer LeaderAndIsr re-adds it.
        f.add_partition(TP, 5)
        assert await f.do_work()
        assert await f.do_work()
        assert flog.log_end_offset == 2
        # The leader we fetch from is no longer leader: back off.
        part.leader_id = 3
        assert await f.do_work()
        st = f.states.get(TP)
        assert st is not None and st.delayed_until_ms == clock.ms + 1000

    asyncio.run(go())


def test_the_fetcher_manager_logs_one_line_per_fetcher_not_per_partition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Thousands of partitions moving at a failover: one "Added fetcher" / "Removed fetcher"
    line per source broker, naming every partition (Kafka's ReplicaFetcherManager lines), and
    nothing for a partition already followed at that epoch."""
    leader = LocalLeader(leader_partition(new_log(tmp_path, "leader"), 1))
    tps = [TopicPartition("t", p) for p in range(50)]
    a, b = LeaderAddress(1, "127.0.0.1", 1), LeaderAddress(2, "127.0.0.1", 2)

    async def go() -> list[str]:
        m = ReplicaFetcherManager(
            FOLLOWER,
            log_for=lambda tp: None,
            endpoint_factory=lambda _: leader,
            monotonic_ms=Clock(),
            config=FetcherConfig(backoff_ms=1000),
        )
        with caplog.at_level("INFO", logger="wherry.replication.fetcher"):
            m.add_partitions({tp: (a, 3) for tp in tps})
            m.add_partitions({tp: (a, 3) for tp in tps})  # already followed: no line
            m.add_partitions({tp: (b, 4) for tp in tps[:20]})
            m.remove_partitions(tps)
        await m.shutdown()
        return [r.getMessage() for r in caplog.records if "ReplicaFetcherManager" in r.getMessage()]

    lines = asyncio.run(go())
    assert [line.split("]")[1].split(":")[0].strip() for line in lines] == [
        "Added fetcher to broker 1 for 50 partitions",
        "Removed fetcher from broker 1 for 20 partitions",
        "Added fetcher to broker 2 for 20 partitions",
        "Removed fetcher from broker 2 for 20 partitions",
        "Removed fetcher from broker 1 for 30 partitions",
    ]
    assert "t-49 (leader epoch 3, log end offset 0)" in lines[0]

