"""The transaction coordinator on in-memory storage and markers, with a manual clock:
Kafka's state transitions, errors, fencing, KIP-360, timeouts, expiry, loading."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import build_batch
from wherry.txn.coordinator import InitResult, TransactionCoordinator, TxnCoordinatorConfig
from wherry.txn.metadata import (
    IllegalTxnTransition,
    TransactionMetadata,
    TxnState,
)
from wherry.txn.records import decode_key, decode_value
from wherry.txn.storage import AppendDone, PendingMarkers, Record

E = ErrorCode
S = TxnState
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


class MemStorage:
    def __init__(self) -> None:
        self.log: dict[int, list[Record]] = {}
        self.fail: ErrorCode | None = None

    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        if self.fail is not None:
            done(self.fail, -1)
            return
        self.log.setdefault(partition, []).extend(records)
        done(E.none, 0)

    def states(self, partition: int) -> list[TxnState]:
        return [
            S.DEAD if v is None else S.from_id(decode_value(v).state_id)
            for _, v in self.log.get(partition, [])
        ]


class MemMarkers:
    def __init__(self) -> None:
        self.sent: list[PendingMarkers] = []
        self.removed: list[int] = []

    def add_markers(self, pending: PendingMarkers) -> None:
        self.sent.append(pending)

    def remove_partition(self, txn_partition: int) -> None:
        self.removed.append(txn_partition)


class Harness:
    def __init__(self, **config: int) -> None:
        self.now = 1_000_000
        self.storage = MemStorage()
        self.markers = MemMarkers()
        self.coord = TransactionCoordinator(
            1,
            TxnCoordinatorConfig(transaction_state_log_num_partitions=1, **config),
            self.storage,
            self.markers,
            now_ms=self.now,
        )
        self.coord.begin_loading(0, 5)
        self.coord.load_partition(0, [], now_ms=self.now, epoch=5)
        self.next_pid = 100

    def init(
        self, tid: str = "tx", timeout: int = 60_000, expected: tuple[int, int] | None = None
    ) -> InitResult:
        out: list[InitResult] = []
        pid = None
        if self.coord.needs_producer_id(tid):
            pid, self.next_pid = self.next_pid, self.next_pid + 1
        self.coord.init_producer_id(tid, timeout, expected, pid, self.now, out.append)
        return out[0]

    def add(self, pid: int, epoch: int, *tps: TopicPartition, tid: str = "tx") -> ErrorCode:
        out: list[ErrorCode] = []
        self.coord.add_partitions(tid, pid, epoch, tps or (T0,), self.now, out.append)
        return out[0]

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "tx") -> ErrorCode:
        out: list[ErrorCode] = []
        self.coord.end_transaction_result(
            tid, pid, epoch, commit, self.now, lambda r: out.append(r[0])
        )
        return out[0]

    def txn(self, tid: str = "tx") -> TransactionMetadata:
        t = self.coord.transaction(tid)
        assert t is not None
        return t

    def finish_markers(self) -> None:
        for p in self.markers.sent:
            for tp in p.partitions:
                self.coord.marker_written(p, tp)
            self.coord.markers_written(p, self.now)
        self.markers.sent.clear()


def test_state_table_refuses_illegal_moves() -> None:
    t = TransactionMetadata("x", 1, timeout_ms=1000, last_update_timestamp_ms=0)
    with pytest.raises(IllegalTxnTransition):
        t.prepare_abort_or_commit(S.PREPARE_COMMIT, 1)  # Empty -> PrepareCommit
    transit = t.prepare_add_partitions([T0], 5)
    with pytest.raises(IllegalTxnTransition):  # one change at a time
        t.prepare_add_partitions([T1], 6)
    t.complete_transition(transit)
    assert t.state is S.ONGOING and t.start_timestamp_ms == 5


def test_commit_flow_writes_prepare_then_markers_then_complete() -> None:
    h = Harness(concurrent_transactions_wait_ms=0)  # Kafka's answers, at once
    assert h.init() == (E.none, 100, 0)
    assert h.add(100, 0, T0, T1) == E.none
    assert h.txn().state is S.ONGOING
    assert h.end(100, 0, True) == E.none
    assert h.txn().state is S.PREPARE_COMMIT
    [pending] = h.markers.sent
    assert pending.commit and pending.partitions == {T0, T1} and pending.coordinator_epoch == 5
    # While markers are outstanding: retry later.
    assert h.end(100, 0, True) == E.concurrent_transactions
    assert h.add(100, 0) == E.concurrent_transactions
    assert h.init(expected=(100, 0))[0] == E.concurrent_transactions
    h.finish_markers()
    assert h.txn().state is S.COMPLETE_COMMIT and not h.txn().partitions
    assert h.storage.states(0) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert h.end(100, 0, True) == E.none  # a retried commit
    assert h.end(100, 0, False) == E.invalid_txn_state
    # The next transaction starts from CompleteCommit.
    assert h.add(100, 0, T1) == E.none and h.txn().partitions == {T1}


def test_errors_for_wrong_ids_epochs_and_states() -> None:
    h = Harness()
    assert h.end(1, 0, True) == E.invalid_producer_id_mapping  # unknown id
    h.init()
    assert h.add(999, 0) == E.invalid_producer_id_mapping
    assert h.add(100, 7) == E.producer_fenced
    assert h.end(100, 0, True) == E.invalid_txn_state  # Empty: nothing to end
    assert h.init(timeout=0)[0] == E.invalid_transaction_timeout
    assert h.init(timeout=900_001)[0] == E.invalid_transaction_timeout
    assert h.init(tid="")[0] == E.invalid_request
    h.add(100, 0)
    h.end(100, 0, False)
    # Markers outstanding (Complete* pending): Kafka checks the pending change first.
    assert h.end(100, 0, True) == E.concurrent_transactions
    assert h.end(100, 0, False) == E.concurrent_transactions
    h.finish_markers()
    assert h.end(100, 0, True) == E.invalid_txn_state  # CompleteAbort then commit
    assert h.end(100, 0, False) == E.none  # a retried abort


def test_not_coordinator_and_loading() -> None:
    h = Harness()
    h.coord.unload_partition(0)
    assert h.markers.removed == [0]
    assert h.init()[0] == E.not_coordinator
    h.coord.begin_loading(0, 6)
    assert h.init()[0] == E.coordinator_load_in_progress
    assert h.coord.list_transactions([], [], now_ms=h.now)[0] == E.coordinator_load_in_progress


def test_new_producer_fences_the_old_one_and_aborts_its_transaction() -> None:
    h = Harness()
    h.init()
    h.add(100, 0, T0)
    # A second producer with the same id: the ongoing transaction is aborted with epoch 1.
    assert h.init()[0] == E.concurrent_transactions
    t = h.txn()
    assert t.state is S.PREPARE_ABORT and t.producer_epoch == 1
    [pending] = h.markers.sent
    assert not pending.commit and pending.producer_epoch == 1
    assert h.add(100, 0) == E.producer_fenced  # the zombie
    assert h.end(100, 0, True) == E.producer_fenced
    h.finish_markers()
    assert h.txn().state is S.COMPLETE_ABORT
    assert h.init() == (E.none, 100, 2)  # the retry gets the next epoch
    assert h.end(100, 1, True) == E.producer_fenced


def test_kip360_epoch_bump_after_abortable_error() -> None:
    h = Harness()
    h.init()
    assert h.init(expected=(100, 0)) == (E.none, 100, 1)  # current epoch: bump
    assert h.init(expected=(100, 0)) == (E.none, 100, 1)  # retry of that bump: same epoch
    assert h.init(expected=(100, 5))[0] == E.producer_fenced  # neither current nor last
    assert h.init(expected=(555, 1))[0] == E.producer_fenced  # another producer id


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    h = Harness()
    h.init()
    t = h.txn()
    t.producer_epoch = 0x7FFE  # Short.MaxValue - 1: exhausted
    pid, epoch = h.init(expected=(100, 0x7FFE))[1:]
    assert (pid, epoch) == (101, 0)
    assert h.txn().last_producer_id == 100 and h.txn().last_producer_epoch == 0x7FFE
    # A retry with the old id and exhausted epoch is still valid (KIP-360), not fenced.
    assert h.init(expected=(100, 0x7FFE))[0] == E.none


def test_failed_write_leaves_the_state_and_maps_errors() -> None:
    h = Harness()
    h.init()
    h.storage.fail = E.not_enough_replicas
    assert h.add(100, 0) == E.coordinator_not_available
    assert h.txn().state is S.EMPTY and not h.txn().pending_transition_in_progress
    h.storage.fail = E.not_leader_or_follower
    assert h.add(100, 0) == E.not_coordinator


def test_timed_out_transaction_is_aborted_with_an_epoch_bump() -> None:
    h = Harness(abort_timed_out_transaction_cleanup_interval_ms=1000)
    h.init(timeout=5000)
    h.add(100, 0)
    h.now += 5000
    h.coord.advance_clock(h.now)
    assert h.txn().state is S.ONGOING  # not past the timeout yet
    h.now += 1001
    assert h.coord.next_expiration_ms() is not None
    h.coord.advance_clock(h.now)
    t = h.txn()
    assert t.state is S.PREPARE_ABORT and t.producer_epoch == 1
    h.finish_markers()
    assert h.txn().state is S.COMPLETE_ABORT
    assert h.end(100, 0, True) == E.producer_fenced  # the producer that stopped is fenced


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    h = Harness(
        transactional_id_expiration_ms=10_000,
        remove_expired_transaction_cleanup_interval_ms=1000,
    )
    h.init()
    h.init(tid="busy")
    h.add(101, 0, tid="busy")
    h.now += 10_001
    h.coord.advance_clock(h.now)
    assert h.coord.transaction("tx") is None
    assert h.coord.transaction("busy") is not None  # an open transaction does not expire
    assert (encode := [k for k, v in h.storage.log[0] if v is None]) and decode_key(
        encode[0]
    ) == "tx"


def test_load_resumes_markers_of_prepared_transactions() -> None:
    h = Harness()
    h.init()
    h.add(100, 0, T0, T1)
    h.end(100, 0, True)
    batch = build_batch(list(h.storage.log[0]))
    # Another broker becomes the coordinator and loads the partition.
    other = Harness()
    other.coord.unload_partition(0)
    other.coord.begin_loading(0, 9)
    assert other.coord.load_partition(0, [batch], now_ms=other.now, epoch=9)
    t = other.txn()
    assert t.state is S.PREPARE_COMMIT and t.pending_state is S.COMPLETE_COMMIT
    [pending] = other.markers.sent
    assert pending.commit and pending.coordinator_epoch == 9 and pending.partitions == {T0, T1}
    other.finish_markers()
    assert other.txn().state is S.COMPLETE_COMMIT


def test_describe_and_list() -> None:
    h = Harness()
    h.init()
    h.add(100, 0, T0)
    h.init(tid="other")
    err, txn = h.coord.describe("tx")
    assert err == E.none and txn is not None and txn.state is S.ONGOING
    assert h.coord.describe("nope")[0] == E.transactional_id_not_found
    _, unknown, txns = h.coord.list_transactions(["Ongoing", "Bogus"], [], now_ms=h.now)
    assert unknown == ["Bogus"] and [t.transactional_id for t in txns] == ["tx"]
    _, _, txns = h.coord.list_transactions([], [101], now_ms=h.now)
    assert [t.transactional_id for t in txns] == ["other"]
    _, _, txns = h.coord.list_transactions([], [], now_ms=h.now, pattern="t.")
    assert [t.transactional_id for t in txns] == ["tx"]
    assert h.coord.list_transactions([], [], now_ms=h.now, pattern="(")[0] == (
        E.invalid_regular_expression
    )
