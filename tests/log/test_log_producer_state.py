"""Idempotent producer state: duplicates, sequence/epoch checks, snapshots, recovery."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, batch, open_log, read_all

from wherry.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from wherry.log.log import AppendInfo, Log
from wherry.log.producer_state import read_snapshot
from wherry.protocol.records import build_batch, patch_batch

PID = 4242


def produce(log: Log, seq: int, *, epoch: int = 0, pid: int = PID, n: int = 2) -> AppendInfo:
    return log.append_as_leader(batch(n, pid=pid, epoch=epoch, seq=seq), leader_epoch=0, now_ms=T0)


def test_duplicates_of_last_five_return_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    originals = [produce(log, seq) for seq in range(0, 14, 2)]  # 7 batches, 2 records each
    end = log.log_end_offset
    for seq, original in zip(range(4, 14, 2), originals[2:], strict=True):  # the last five
        dup = produce(log, seq)
        assert dup.duplicate
        assert (dup.first_offset, dup.last_offset) == (original.first_offset, original.last_offset)
        assert log.log_end_offset == end  # nothing written
    # older than the last five: out of order
    for seq in (0, 2):
        with pytest.raises(OutOfOrderSequenceError) as info:
            produce(log, seq)
        assert info.value.error_code == 45
    # a retry with a different sequence range is not a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 12, n=1)
    assert produce(log, 14).first_offset == end
    log.close()


def test_sequence_gap_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0, epoch=3)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 3, epoch=3)  # expected 2
    with pytest.raises(InvalidProducerEpochError) as info:
        produce(log, 2, epoch=2)  # fenced
    assert info.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 5, epoch=4)  # new epoch must start at 0
    produce(log, 0, epoch=4)
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 2, epoch=3)
    produce(log, 2, epoch=4)
    # an unknown producer may start anywhere; then it must continue
    produce(log, 100, pid=7)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 100, pid=7, n=1)
    produce(log, 102, pid=7)
    # sequence numbers wrap after Integer.MAX_VALUE
    produce(log, 2**31 - 2, pid=8)  # covers MAX-1, MAX
    produce(log, 0, pid=8)
    # non-idempotent batches are not checked
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=T0)
    log.close()


def test_multi_batch_append_checks_in_order(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = batch(2, pid=PID, epoch=0, seq=0) + batch(2, pid=PID, epoch=0, seq=2)
    info = log.append_as_leader(data, leader_epoch=0, now_ms=T0)
    assert (info.first_offset, info.last_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        bad = batch(1, pid=PID, epoch=0, seq=4) + batch(1, pid=PID, epoch=0, seq=9)
        log.append_as_leader(bad, leader_epoch=0, now_ms=T0)
    assert log.log_end_offset == 4
    log.close()


def _state(log: Log) -> dict[int, tuple[int, list[tuple[int, int, int, int]]]]:
    return {
        pid: (
            e.producer_epoch,
            [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches],
        )
        for pid, e in log.producer_state.producers.items()
    }


def test_state_survives_clean_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(0, 40, 2):
        produce(log, seq)
    produce(log, 0, pid=9, epoch=5)
    state = _state(log)
    log.flush()
    log.close()
    snapshot = tmp_path / "topic-0" / f"{log.log_end_offset:020d}.snapshot"
    assert snapshot.exists()
    entries = {e.producer_id: e for e in read_snapshot(snapshot)}
    assert len(entries[PID].batches) == 5
    reopened = open_log(tmp_path, clean=True)
    assert _state(reopened) == state
    assert produce(reopened, 38).duplicate
    assert produce(reopened, 30).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        produce(reopened, 28)
    produce(reopened, 40)
    reopened.close()


def test_state_rebuilt_after_crash_from_snapshot_and_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(0, 60, 2):  # several segments -> snapshots at each roll
        produce(log, seq)
    assert log.num_segments > 2
    state = _state(log)
    snapshots = sorted((tmp_path / "topic-0").glob("*.snapshot"))
    assert snapshots  # taken on roll
    # crash: no close (no final snapshot), recovery point at 0
    crashed = open_log(tmp_path)
    assert _state(crashed) == state
    assert produce(crashed, 58).duplicate
    assert produce(crashed, 60).first_offset == 60
    crashed.close()
    del log


def test_state_rebuilt_when_snapshots_are_lost_or_corrupt(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(0, 30, 2):
        produce(log, seq)
    state = _state(log)
    log.close()
    part = tmp_path / "topic-0"
    for snap in part.glob("*.snapshot"):
        snap.write_bytes(snap.read_bytes()[:-1] + b"\x99")  # bad CRC
    reopened = open_log(tmp_path, clean=True)
    assert _state(reopened) == state
    reopened.close()
    for snap in part.glob("*.snapshot"):
        snap.unlink()
    reopened = open_log(tmp_path)
    assert _state(reopened) == state
    reopened.close()


def test_truncation_rebuilds_state(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(0, 20, 2):
        produce(log, seq)
    log.truncate_to(16)  # drops seq 16..19
    assert log.producer_state.producers[PID].last_seq == 15
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 18)
    info = produce(log, 16)
    assert not info.duplicate and info.first_offset == 16
    log.close()


def test_follower_append_updates_state_without_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    b = bytearray(batch(2, pid=PID, epoch=1, seq=10))
    patch_batch(b, 0, base_offset=0, partition_leader_epoch=0)
    log.append_as_follower(bytes(b))
    assert log.producer_state.producers[PID].last_seq == 11
    # after becoming leader, a retry of that batch is a duplicate
    assert produce(log, 10, epoch=1).duplicate
    log.close()


def test_producer_expiration(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 0)
    assert log.remove_expired_producers(T0 + 86_400_000 - 1) == 0
    assert log.remove_expired_producers(T0 + 86_400_000) == 1
    produce(log, 77)  # unknown again: any sequence
    log.close()
    # expired producers are dropped when loading a snapshot too
    reopened = Log.open(
        tmp_path / "topic-0",
        SMALL,
        now_ms=T0 + 2 * 86_400_000,
        had_clean_shutdown=True,
    )
    assert not reopened.producer_state.producers
    reopened.close()


def test_duplicate_on_log_append_time_topic(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, message_timestamp_type="LogAppendTime"))
    first = produce(log, 0)
    dup = log.append_as_leader(batch(2, pid=PID, epoch=0, seq=0), leader_epoch=0, now_ms=T0 + 999)
    assert dup.duplicate and dup.log_append_time_ms == first.log_append_time_ms == T0
    assert len(read_all(log)) == len(batch(2))
    log.close()


def _txn(log: Log, seq: int, *, epoch: int = 0) -> AppendInfo:
    data = build_batch([(None, b"v")], timestamp_ms=T0, producer_id=PID, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)
    return log.append_as_leader(data, leader_epoch=0, now_ms=T0)


def test_a_batch_checked_with_the_coordinator_is_not_overtaken(tmp_path: Path) -> None:
    """While a producer's batch of sequence 0 is checked with its transaction coordinator
    (and may be refused, then retried), a batch of sequence 1 that passed its own check is
    refused OUT_OF_ORDER_SEQUENCE_NUMBER rather than written first (Kafka's lowest
    sequence of a verification); once a transactional batch is written the rule ends."""
    log = open_log(tmp_path)
    state = log.producer_state
    state.start_verification(PID, 0, 1, T0)
    state.start_verification(PID, 0, 0, T0)  # the lower sequence wins
    state.start_verification(PID, 0, 3, T0)
    verification = state.verification(PID)
    assert verification is not None and verification.lowest_seq == 0
    with pytest.raises(OutOfOrderSequenceError):
        _txn(log, 1)
    assert log.log_end_offset == 0
    # several batches in one append: the first written ends the rule for the next
    data = b"".join(
        build_batch([(None, b"v")], timestamp_ms=T0, producer_id=PID, producer_epoch=0,
                    base_sequence=s, is_transactional=True)
        for s in (0, 1)
    )
    assert log.append_as_leader(data, leader_epoch=0, now_ms=T0).last_offset == 1
    assert state.verification(PID) is None
    assert _txn(log, 2).first_offset == 2
    # a newer epoch starts over at its own sequence; a stale check expires
    state.start_verification(PID, 0, 7, T0)
    state.start_verification(PID, 1, 5, T0)
    verification = state.verification(PID)
    assert verification is not None and (verification.epoch, verification.lowest_seq) == (1, 5)
    state.remove_expired_producers(T0 + state.producer_id_expiration_ms)
    assert state.verification(PID) is None
    # idempotent (not transactional) batches are not held back
    state.start_verification(PID + 1, 0, 0, T0)
    log.append_as_leader(batch(1, pid=PID + 1, epoch=0, seq=4), leader_epoch=0, now_ms=T0)
    log.close()
