"""A transaction's fixed cost: nothing between its steps waits for a timer.

* An AddPartitionsToTxn arriving while the previous transaction's markers are being written
  (librdkafka and the Java producer send it right after EndTxn is answered) waits for that
  end's Complete* record and is decided when it is written, in that same step; Kafka answers
  CONCURRENT_TRANSACTIONS at once and the client sleeps 20 ms before it tries again. The wait
  is bounded: at its deadline the answer is CONCURRENT_TRANSACTIONS, and an unloaded
  coordinator answers NOT_COORDINATOR.
* The marker sender writes the markers as soon as EndTxn is answered, this broker's own
  partitions in process, and the coordinator writes Complete* when they are written: on a
  clock that never moves and with no ticker running.

The coordinator runs on the in-memory storage of `test_txn_coordinator.py`; the sender is the
real one, its in-process writer a recording leader.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.txn.test_txn_coordinator import T0, T1, Harness
from wherry.common.topic_partition import TopicPartition
from wherry.coordinator.txn_markers import RETRY_BACKOFF_MS, TxnMarkerChannelManager
from wherry.outbound.connection import Connect
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.replication.metadata_cache import MetadataCache
from wherry.runtime.clock import ManualClock
from wherry.txn.metadata import TxnState
from wherry.txn.storage import PendingMarkers

E = ErrorCode
S = TxnState
BROKER = 1


def _commit_in_flight(h: Harness) -> list[ErrorCode]:
    """Transaction 1 committed (EndTxn answered, markers outstanding) and the next
    transaction's AddPartitionsToTxn sent: what it has been answered so far."""
    assert h.init() == (E.none, 100, 0)
    assert h.add(100, 0, T0) == E.none
    assert h.end(100, 0, True) == E.none
    assert h.txn().state is S.PREPARE_COMMIT
    answers: list[ErrorCode] = []
    h.coord.add_partitions("tx", 100, 0, [T1], h.now, answers.append)
    return answers


def test_an_add_during_the_markers_is_decided_when_complete_is_written() -> None:
    h = Harness()
    answers = _commit_in_flight(h)
    assert answers == [] and len(h.coord.waits) == 1  # waits: no CONCURRENT_TRANSACTIONS
    h.finish_markers()  # the markers are written; the clock has not moved
    assert answers == [E.none]
    assert h.txn().state is S.ONGOING and h.txn().partitions == {T1}
    assert h.storage.states(0)[-2:] == [S.COMPLETE_COMMIT, S.ONGOING]
    assert len(h.coord.waits) == 0


def test_the_wait_ends_at_its_deadline_with_concurrent_transactions() -> None:
    h = Harness(concurrent_transactions_wait_ms=100)
    woken: list[int] = []
    h.coord.waits.on_earlier_deadline = lambda: woken.append(1)
    answers = _commit_in_flight(h)
    assert woken == [1]  # the ticker is told of the deadline
    assert h.coord.next_expiration_ms() == h.now + 100
    h.coord.advance_clock(h.now + 99)
    assert answers == []
    h.coord.advance_clock(h.now + 100)
    assert answers == [E.concurrent_transactions]
    h.finish_markers()  # answered once only
    assert answers == [E.concurrent_transactions] and h.txn().state is S.COMPLETE_COMMIT


def test_a_waiting_add_is_answered_not_coordinator_when_its_partition_unloads() -> None:
    h = Harness()
    answers = _commit_in_flight(h)
    h.coord.unload_partition(0)
    assert answers == [E.not_coordinator] and len(h.coord.waits) == 0


class RecordingLeader:
    """This broker as the partitions' leader, in process: records the markers it is asked to
    write and answers NONE, or the errors queued in `fail` (once each)."""

    def __init__(self) -> None:
        self.written: list[tuple[PendingMarkers, list[TopicPartition]]] = []
        self.fail: dict[TopicPartition, ErrorCode] = {}

    def takes(self, tp: TopicPartition) -> bool:
        return True

    async def write(
        self, p: PendingMarkers, tps: list[TopicPartition], now_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        self.written.append((p, tps))
        return {tp: self.fail.pop(tp, E.none) for tp in tps}


def _no_connection(broker_id: int, host: str, port: int) -> Connect:
    raise AssertionError(f"no marker goes over the wire here (broker {broker_id})")


def _sender(h: Harness, clock: ManualClock, leader: RecordingLeader) -> TxnMarkerChannelManager:
    """The real marker sender for `h`'s coordinator, every partition of topic `t` led by this
    broker."""
    cache = MetadataCache(BROKER)
    cache.update(
        UpdateMetadataRequest(
            controller_id=0,
            controller_epoch=1,
            broker_epoch=-1,
            partition_states=tuple(
                UpdateMetadataPartitionState("t", i, 1, BROKER, 0, (BROKER,), 0, (BROKER,))
                for i in range(2)
            ),
            live_brokers=(BrokerEndpoint(BROKER, "127.0.0.1", 9092),),
        )
    )
    sender = TxnMarkerChannelManager(BROKER, cache, clock, _no_connection, local=leader)
    sender.coordinator = h.coord
    h.coord.markers = sender
    return sender


def test_a_commit_completes_without_a_tick() -> None:
    async def run() -> None:
        h = Harness()
        clock = ManualClock(h.now)
        leader = RecordingLeader()
        sender = _sender(h, clock, leader)
        sender.start()
        try:
            answers = _commit_in_flight(h)
            for _ in range(5):  # a few turns of the event loop, no time passing
                await asyncio.sleep(0)
            [(pending, tps)] = leader.written
            assert pending.commit and sorted(tps) == [T0]
            assert answers == [E.none] and h.txn().state is S.ONGOING
            assert h.storage.states(0)[-2:] == [S.COMPLETE_COMMIT, S.ONGOING]
            assert sender.pending() == {} and sender.requests_sent == 0
            assert clock.now_ms() == h.now
        finally:
            await sender.stop()

    asyncio.run(run())


def test_only_the_failed_partition_waits_for_the_retry_backoff() -> None:
    async def run() -> None:
        h = Harness()
        clock = ManualClock(h.now)
        leader = RecordingLeader()
        sender = _sender(h, clock, leader)  # not started: its rounds are driven here
        leader.fail[T1] = E.not_leader_or_follower
        assert h.init() == (E.none, 100, 0)
        assert h.add(100, 0, T0, T1) == E.none
        assert h.end(100, 0, True) == E.none
        assert sender.dispatch() is None
        await asyncio.sleep(0)  # the in-process write runs
        assert [sorted(tps) for _, tps in leader.written] == [[T0, T1]]
        assert sender.pending() == {next(iter(sender.pending())): {T1}}
        assert sender.dispatch() == RETRY_BACKOFF_MS  # T1 backs off, nothing resent yet
        assert len(leader.written) == 1
        clock.advance(RETRY_BACKOFF_MS)
        sender.dispatch()
        await asyncio.sleep(0)
        assert [sorted(tps) for _, tps in leader.written][1:] == [[T1]]
        assert sender.pending() == {} and h.txn().state is S.COMPLETE_COMMIT
        await sender.stop()

    asyncio.run(run())
