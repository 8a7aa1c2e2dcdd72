"""How much one acquisition takes (share/partition.py): Kafka's `batch_optimized` mode meets
`max_records` and the record locks at batch boundaries, never splitting a batch, and lists
the acquired records in ranges of about `batch_size`; `record_limit` stops at exactly
`max_records`. Pure."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from wherry.share.partition import (
    AckBatch,
    AckType,
    AcquiredRange,
    AcquireMode,
    FetchedBatch,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)

CFG = SharePartitionConfig(record_lock_duration_ms=1_000, delivery_count_limit=5,
                           max_record_locks=200)
REL = int(AckType.RELEASE)
ACC = int(AckType.ACCEPT)


def batches(*ranges: tuple[int, int]) -> list[FetchedBatch]:
    return [FetchedBatch(a, b) for a, b in ranges]


def count(got: list[AcquiredRange]) -> int:
    return sum(r.last_offset - r.first_offset + 1 for r in got)


def test_a_batch_larger_than_max_records_is_acquired_whole() -> None:
    sp = SharePartition(0, CFG)
    got = sp.acquire("a", batches((0, 19)), 5, now_ms=0)
    assert got == [AcquiredRange(0, 19, 1)]
    assert sp.next_offset == 20
    assert all(sp.state_of(o) == RecordState.ACQUIRED for o in range(20))


def test_max_records_is_met_at_the_batch_holding_its_last_record() -> None:
    # 3-record batches, 5 asked for: the 5th record (offset 4) is in the batch 3-5, so
    # the acquisition ends at 5; the batch 6-8 stays for the next one
    sp = SharePartition(0, CFG)
    got = sp.acquire("a", batches((0, 2), (3, 5), (6, 8)), 5, now_ms=0)
    assert got == [AcquiredRange(0, 5, 1)]
    assert sp.fetch_offset() == 6
    assert sp.acquire("b", batches((6, 8)), 5, now_ms=0) == [AcquiredRange(6, 8, 1)]


def test_single_record_batches_are_capped_at_max_records() -> None:
    sp = SharePartition(0, CFG)
    one_each = batches(*((o, o) for o in range(10)))
    assert count(sp.acquire("a", one_each, 5, now_ms=0)) == 5
    assert count(sp.acquire("a", one_each[5:], 5, now_ms=0)) == 5
    assert sp.next_offset == 10


def test_record_limit_acquires_exactly_max_records_as_one_range() -> None:
    sp = SharePartition(0, CFG)
    strict = AcquireMode(batch_size=2, strict=True)
    got = sp.acquire("a", batches((0, 4), (5, 9), (10, 14)), 6, now_ms=0, mode=strict)
    assert got == [AcquiredRange(0, 5, 1)]  # a batch split: 6-9 never acquired yet
    assert sp.next_offset == 6 and sp.fetch_offset() == 6
    got = sp.acquire("b", batches((5, 9), (10, 14)), 6, now_ms=0, mode=strict)
    assert got == [AcquiredRange(6, 11, 1)]


def test_batch_size_cuts_the_listed_ranges_at_batch_boundaries() -> None:
    # Kafka's example: 5-record batches, max_records 6, batch_size 2: two whole batches,
    # listed as 0-4 and 5-9
    sp = SharePartition(0, CFG)
    got = sp.acquire("a", batches((0, 4), (5, 9), (10, 14)), 6, now_ms=0,
                     mode=AcquireMode(batch_size=2))
    assert got == [AcquiredRange(0, 4, 1), AcquiredRange(5, 9, 1)]
    # single-record batches, batch_size 3: ranges of 3 records
    sp = SharePartition(0, CFG)
    got = sp.acquire("a", batches(*((o, o) for o in range(7))), 100, now_ms=0,
                     mode=AcquireMode(batch_size=3))
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(3, 5, 1), AcquiredRange(6, 6, 1)]
    # without a batch size the run is one range
    sp = SharePartition(0, CFG)
    got = sp.acquire("a", batches(*((o, o) for o in range(7))), 100, now_ms=0)
    assert got == [AcquiredRange(0, 6, 1)]


def test_released_records_come_back_whole_batches_at_a_time() -> None:
    sp = SharePartition(0, CFG)
    log = batches((0, 9), (10, 19))
    assert sp.acquire("a", log, 100, now_ms=0) == [AcquiredRange(0, 19, 1)]
    assert sp.acknowledge("a", [AckBatch(0, 19, (REL,))], 0) == ErrorCode.none
    # redelivery: the batch 0-9 whole though 3 were asked for, not the next batch
    assert sp.acquire("b", log, 3, now_ms=0) == [AcquiredRange(0, 9, 2)]
    # strict: exactly 3 of the batch 10-19
    got = sp.acquire("c", log, 3, now_ms=0, mode=AcquireMode(strict=True))
    assert got == [AcquiredRange(10, 12, 2)]
    # what is left of a batch is taken whole again
    assert sp.acquire("d", log, 1, now_ms=0) == [AcquiredRange(13, 19, 2)]


def test_record_locks_are_met_at_batch_boundaries_too() -> None:
    sp = SharePartition(0, SharePartitionConfig(max_record_locks=10))
    # the batch 8-15 begins within the 10 locks: taken whole; 16-20 begins past them
    got = sp.acquire("a", batches((0, 7), (8, 15), (16, 20)), 100, now_ms=0)
    assert got == [AcquiredRange(0, 15, 1)]
    assert not sp.can_acquire()
    assert sp.acquire("b", batches((16, 20)), 100, now_ms=0) == []
    # strict: the locks are a hard bound
    sp = SharePartition(0, SharePartitionConfig(max_record_locks=10))
    got = sp.acquire("a", batches((0, 7), (8, 15)), 100, now_ms=0,
                     mode=AcquireMode(strict=True))
    assert got == [AcquiredRange(0, 9, 1)]
    # once records are accepted, the start moves and the next batch fits
    sp = SharePartition(0, SharePartitionConfig(max_record_locks=10))
    sp.acquire("a", batches((0, 7), (8, 15), (16, 20)), 100, now_ms=0)
    assert sp.acknowledge("a", [AckBatch(0, 15, (ACC,))], 0) == ErrorCode.none
    assert sp.acquire("a", batches((16, 20)), 100, now_ms=0) == [AcquiredRange(16, 20, 1)]
