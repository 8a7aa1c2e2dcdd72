"""Transactions in the partition log: producer state, LSO, the aborted-transaction index."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.log.logtest_util import SMALL, T0, open_log
from wherry.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from wherry.log.log import Log
from wherry.log.producer_state import ProducerStateManager, read_snapshot
from wherry.log.txn_index import TXN_INDEX_ENTRY_SIZE, AbortedTxn, TransactionIndex
from wherry.protocol.records import InvalidRecordError, build_batch, build_control_batch


def txn_batch(pid: int, seq: int, n: int = 2, *, epoch: int = 0, txn: bool = True) -> bytes:
    return build_batch(
        [(f"k{seq + i}".encode(), b"v" * 30) for i in range(n)],
        timestamp_ms=T0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def marker(pid: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(
        commit=commit,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=T0,
    )


def append(log: Log, data: bytes) -> int:
    info = log.append_as_leader(data, leader_epoch=0, now_ms=T0)
    return info.first_offset


def write_marker(log: Log, pid: int, *, commit: bool, **kw: int) -> int:
    info = log.append_as_leader(
        marker(pid, commit=commit, **kw), leader_epoch=0, now_ms=T0, from_coordinator=True
    )
    return info.first_offset


def test_transaction_begins_continues_and_commits(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, build_batch([(b"a", b"1")], timestamp_ms=T0))  # offset 0, no producer
    assert append(log, txn_batch(7, 0)) == 1  # 1..2
    append(log, txn_batch(7, 2))  # 3..4: same transaction
    assert log.producer_state.ongoing_transactions == {7: 1}
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 1
    assert log.last_stable_offset == 1
    m = write_marker(log, 7, commit=True)
    assert m == 5
    assert log.producer_state.ongoing_transactions == {}
    # The marker is not below the HW yet: still unstable.
    assert log.last_stable_offset == 1
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 6
    assert log.collect_aborted_transactions(0, 6) == []


def test_abort_indexes_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(1, 0))  # 0..1 pid 1
    append(log, txn_batch(2, 0))  # 2..3 pid 2
    assert write_marker(log, 1, commit=False) == 4
    entries = log.active_segment.txn_index.entries
    # LSO after pid 1's abort: pid 2's transaction is still open at offset 2.
    assert entries == [AbortedTxn(1, 0, 4, 2)]
    write_marker(log, 2, commit=True)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 6
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 4, 2)]
    assert log.collect_aborted_transactions(5, 6) == []  # ended before the fetch offset
    assert log.collect_aborted_transactions(0, 0) == []  # starts at/after the upper bound
    raw = log.active_segment.txn_index.path.read_bytes()
    assert len(raw) == TXN_INDEX_ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", raw) == (0, 1, 0, 4, 2)


def test_lso_is_bounded_by_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, build_batch([(b"a", b"1")] * 3, timestamp_ms=T0))
    append(log, txn_batch(5, 0))  # 3..4
    log.update_high_watermark(2)
    assert log.last_stable_offset == 2
    log.update_high_watermark(5)
    assert log.last_stable_offset == 3


def test_producer_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(3, 0, epoch=2))
    with pytest.raises(InvalidProducerEpochError):
        append(log, txn_batch(3, 0, epoch=1))
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(3, 2, epoch=2, txn=False))
    with pytest.raises(InvalidRecordError):  # clients may not write markers
        log.append_as_leader(marker(3, commit=True, epoch=2), leader_epoch=0, now_ms=T0)
    with pytest.raises(InvalidProducerEpochError):
        write_marker(log, 3, commit=True, epoch=1)
    write_marker(log, 3, commit=True, epoch=2, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError):
        write_marker(log, 3, commit=False, epoch=2, coordinator_epoch=4)
    write_marker(log, 3, commit=False, epoch=3, coordinator_epoch=5)  # epoch bump: fine


def test_snapshot_keeps_ongoing_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(9, 0))
    log.close()
    snaps = sorted((tmp_path / "topic-0").glob("*.snapshot"))
    entries = read_snapshot(snaps[-1])
    assert [(e.producer_id, e.current_txn_first_offset) for e in entries] == [(9, 0)]
    log = open_log(tmp_path, clean=True)
    assert log.producer_state.ongoing_transactions == {9: 0}
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 0
    write_marker(log, 9, commit=False)
    assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(9, 0, 2, 3)]
    log.close()


def test_crash_mid_transaction_recovers_state_and_index(tmp_path: Path) -> None:
    """kill -9: no clean shutdown, no snapshot of the last appends, txn index files lost."""
    log = open_log(tmp_path)  # SMALL: segments roll every ~1 KiB
    for i in range(10):
        append(log, txn_batch(1, 2 * i))
    write_marker(log, 1, commit=False)
    for i in range(10):
        append(log, txn_batch(1, 20 + 2 * i))  # second transaction of pid 1, open
    append(log, txn_batch(2, 0))  # pid 2, open
    assert log.num_segments > 2
    expected_entries = log.collect_aborted_transactions(0, log.log_end_offset)
    assert expected_entries == [AbortedTxn(1, 0, 20, 21)]
    ongoing = dict(log.producer_state.ongoing_transactions)
    end = log.log_end_offset
    # Simulate the crash: drop the in-memory state without closing; lose the txn index.
    for seg in log.segments:
        if seg.txn_index.path.exists():
            seg.txn_index.path.unlink()
    recovered = open_log(tmp_path, clean=False, recovery_point=0)
    assert recovered.log_end_offset == end
    assert dict(recovered.producer_state.ongoing_transactions) == ongoing
    assert recovered.collect_aborted_transactions(0, end) == expected_entries
    recovered.update_high_watermark(end)
    assert recovered.last_stable_offset == ongoing[1]
    recovered.close()


def test_truncation_drops_index_entries_and_reopens_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(4, 0))  # 0..1
    m = write_marker(log, 4, commit=False)  # 2
    append(log, build_batch([(b"x", b"y")], timestamp_ms=T0))  # 3
    assert log.collect_aborted_transactions(0, 4) == [AbortedTxn(4, 0, 2, 3)]
    log.truncate_to(m)
    assert log.collect_aborted_transactions(0, 4) == []
    assert log.producer_state.ongoing_transactions == {4: 0}
    assert not log.active_segment.txn_index.path.exists()
    log.close()


def test_follower_builds_the_same_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    append(leader, txn_batch(1, 0))
    append(leader, txn_batch(2, 0))
    write_marker(leader, 1, commit=False)
    data = leader.read(0, max_bytes=1 << 20)
    follower.append_as_follower(data)
    assert follower.producer_state.ongoing_transactions == {2: 2}
    assert follower.collect_aborted_transactions(0, 10) == leader.collect_aborted_transactions(
        0, 10
    )
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 2


def test_segment_deletion_removes_txn_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, txn_batch(1, 0))
    write_marker(log, 1, commit=False)
    path = log.active_segment.txn_index.path
    assert path.exists()
    log.roll(now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(log.log_end_offset)
    log.delete_log_start_offset_breached_segments(T0)
    log.delete_pending_files(T0 + 10**9)
    assert not path.exists()
    assert not list(path.parent.glob("*.txnindex*"))


def test_txn_index_round_trip_and_search(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    idx.append(AbortedTxn(1, 0, 10, 11))
    idx.append(AbortedTxn(2, 5, 20, 30))
    idx.append(AbortedTxn(3, 25, 40, 41))
    again = TransactionIndex(idx.path, 0)
    assert again.entries == idx.entries
    r = again.collect(12, 26)
    # (2) overlaps; its LSO 30 >= 26 completes the search before (3) is looked at.
    assert r.aborted == [AbortedTxn(2, 5, 20, 30)] and r.is_complete
    again.truncate_to(20)
    assert TransactionIndex(idx.path, 0).entries == [AbortedTxn(1, 0, 10, 11)]
    with pytest.raises(ValueError):
        again.append(AbortedTxn(4, 0, 5, 6))  # markers only move forward


def test_producer_state_manager_completed_txns(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    append(log, txn_batch(1, 0))
    state: ProducerStateManager = log.producer_state
    assert state.first_unstable_offset(10) == 0
    write_marker(log, 1, commit=True)
    assert state.first_unstable_offset(2) == 0  # marker at 2 not below the HW
    assert state.first_unstable_offset(3) is None


# --------------------------------------------------------------------------------------------
# Log cleaner
# --------------------------------------------------------------------------------------------


def _kv(log: Log) -> list[tuple[int, bytes | None, bytes | None, bool]]:
    """(offset, key, value, is_control) of every record left."""
    from wherry.protocol.records import iter_batches, iter_records

    out = []
    for seg in log.segments:
        data = seg.read_bytes(0, seg.size)
        for pos, h in iter_batches(data):
            for r in iter_records(data, pos):
                out.append((r.offset, r.key, r.value, h.is_control))
    return out


def test_cleaner_drops_aborted_data_and_later_the_markers(tmp_path: Path) -> None:
    from wherry.log.cleaner import clean_log
    from wherry.log.config import LogConfig

    compact = LogConfig(
        cleanup_policy=("compact",),
        segment_bytes=2048,
        index_interval_bytes=128,
        segment_index_bytes=4096,
        delete_retention_ms=10_000,
        file_delete_delay_ms=0,
    )
    log = open_log(tmp_path, compact)

    def txn(pid: int, seq: int, kvs: list[tuple[bytes, bytes]]) -> None:
        data = build_batch(
            kvs,
            timestamp_ms=T0,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=True,
        )
        log.append_as_leader(data, leader_epoch=0, now_ms=T0)

    append(log, build_batch([(b"a", b"a0"), (b"b", b"b0")], timestamp_ms=T0))  # 0,1
    txn(1, 0, [(b"a", b"a1-committed")])  # 2
    write_marker(log, 1, commit=True)  # 3
    txn(2, 0, [(b"b", b"b2-aborted"), (b"c", b"c2-aborted")])  # 4,5
    write_marker(log, 2, commit=False)  # 6
    txn(1, 1, [(b"c", b"c1-committed")])  # 7: a later committed txn of pid 1
    write_marker(log, 1, commit=True)  # 8
    # pid 2's last batch must come later, else it is kept (empty) for the producer's state,
    # and so is its abort marker (Kafka's rule).
    txn(2, 2, [(b"d", b"d2-committed")])  # 9
    write_marker(log, 2, commit=True)  # 10
    append(log, build_batch([(b"z", b"filler")], timestamp_ms=T0))  # 11: last plain batch
    log.roll(now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset

    clean_log(log, None, T0)
    data = [(o, k, v) for o, k, v, control in _kv(log) if not control]
    values = {k: v for _, k, v in data}
    # Committed data only: the aborted b2/c2 are gone, so b keeps b0 (not shadowed by b2).
    assert values == {
        b"a": b"a1-committed",
        b"b": b"b0",
        b"c": b"c1-committed",
        b"d": b"d2-committed",
        b"z": b"filler",
    }
    assert all(v not in (b"b2-aborted", b"c2-aborted") for _, _, v in data)
    markers = [o for o, _, _, control in _kv(log) if control]
    # The abort marker stays (its data was only removed by this clean), so do the commit
    # markers of transactions that still have data; the commit marker at 3 lost its data
    # (a1 is at 2 and still kept: the latest of its key) - so it stays too.
    assert 6 in markers and 8 in markers
    seg0 = log.segments[0]
    assert seg0.txn_index.entries and seg0.txn_index.entries[0].producer_id == 2

    # Second clean: the abort marker now has no data left: stamped with a delete horizon ...
    clean_log(log, None, T0 + 1)
    assert 6 in [o for o, _, _, control in _kv(log) if control]
    assert log.segments[0].txn_index.entries == []
    # ... and removed after delete.retention.ms.
    clean_log(log, None, T0 + 10_002)
    left = [o for o, _, _, control in _kv(log) if control]
    assert 6 not in left and 8 in left
    log.check_integrity()
    log.close()


def test_cleaner_stops_at_open_transaction(tmp_path: Path) -> None:
    from wherry.log.cleaner import cleanable_offsets
    from wherry.log.config import LogConfig

    log = open_log(tmp_path, LogConfig(cleanup_policy=("compact",), segment_bytes=2048))
    append(log, build_batch([(b"a", b"0")], timestamp_ms=T0))
    append(log, txn_batch(1, 0))  # 1..2 open
    log.roll(now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    assert cleanable_offsets(log, None, T0).first_uncleanable_offset == 1
