"""The share-partition state machine (share/partition.py), sessions, membership and the share
coordinator's records, pure: acquire, acknowledge, release, lock expiry, delivery limit,
SPSO advance, all-or-nothing acknowledgements; how much one acquisition takes -- Kafka's
`batch_optimized` mode meets `max_records` and the record locks at batch boundaries, never
splitting a batch, and lists the acquired records in ranges of about `batch_size`;
`record_limit` stops at exactly `max_records`."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from wherry.protocol.records import build_batch, build_control_batch
from wherry.share.config import GroupConfigError, ShareBrokerConfig, validate_group_config
from wherry.share.fetched import fetched_batches
from wherry.share.group import ShareGroups, TopicInfo, simple_assign
from wherry.share.partition import (
    AckBatch,
    AckType,
    AcquiredRange,
    AcquireMode,
    FetchedBatch,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateBatch,
)
from wherry.share.sessions import ShareSessionCache
from wherry.share.state import (
    ShareKey,
    ShareState,
    ShareStateStore,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    is_deleted,
)

CFG = SharePartitionConfig(record_lock_duration_ms=1_000, delivery_count_limit=3,
                           max_record_locks=100)
ACC, REL, REJ, GAP, RENEW = (int(AckType.ACCEPT), int(AckType.RELEASE), int(AckType.REJECT),
                             int(AckType.GAP), int(AckType.RENEW))


def batches(*ranges: tuple[int, int]) -> list[FetchedBatch]:
    return [FetchedBatch(a, b) for a, b in ranges]


def test_two_members_get_distinct_records_and_spso_advances() -> None:
    sp = SharePartition(0, CFG)
    a = sp.acquire("a", batches((0, 4), (5, 9)), max_records=5, now_ms=0)
    assert a == [AcquiredRange(0, 4, 1)]
    # the next read starts after what is held: b gets the rest, never a's records
    assert sp.fetch_offset() == 5
    b = sp.acquire("b", batches((0, 4), (5, 9)), max_records=50, now_ms=0)
    assert b == [AcquiredRange(5, 9, 1)]
    assert sp.acquire("c", batches((0, 9)), max_records=50, now_ms=0) == []
    assert sp.acknowledge("b", [AckBatch(5, 9, (ACC,))], 10) == ErrorCode.none
    assert sp.start_offset == 0  # 0-4 still held by a
    assert sp.acknowledge("a", [AckBatch(0, 4, (ACC,))], 10) == ErrorCode.none
    assert sp.start_offset == 10 and sp.records == {}


def test_release_redelivers_until_the_delivery_limit_then_archives() -> None:
    sp = SharePartition(0, CFG)
    for n in range(1, 4):
        got = sp.acquire("a", batches((0, 1)), 10, now_ms=0)
        assert got == [AcquiredRange(0, 1, n)]
        assert sp.acknowledge("a", [AckBatch(0, 1, (REL,))], 0) == ErrorCode.none
    # delivered 3 times (the limit): archived, never again
    assert sp.state_of(0) == sp.state_of(1) == RecordState.ACKNOWLEDGED  # below the SPSO
    assert sp.start_offset == 2
    assert sp.acquire("a", batches((0, 1)), 10, now_ms=0) == []


def test_reject_archives_at_once_and_mixed_types_per_offset() -> None:
    sp = SharePartition(0, CFG)
    sp.acquire("a", batches((0, 3)), 10, now_ms=0)
    assert sp.acknowledge("a", [AckBatch(0, 3, (ACC, REJ, REL, ACC))], 0) == ErrorCode.none
    assert sp.start_offset == 2  # 0 accepted, 1 rejected (archived), 2 available again
    assert sp.state_of(2) == RecordState.AVAILABLE and sp.state_of(3) == RecordState.ACKNOWLEDGED
    assert sp.acquire("b", batches((0, 3)), 10, now_ms=0) == [AcquiredRange(2, 2, 2)]


def test_lock_expiry_releases_to_others_and_renew_extends() -> None:
    sp = SharePartition(0, CFG)
    sp.acquire("a", batches((0, 2)), 10, now_ms=0)
    assert sp.acknowledge("a", [AckBatch(2, 2, (RENEW,))], 900) == ErrorCode.none
    assert sp.expire_locks(999) == 0
    assert sp.expire_locks(1_000) == 2  # 0 and 1; 2 was renewed until 1900
    assert sp.acquire("b", batches((0, 2)), 10, now_ms=1_000) == [AcquiredRange(0, 1, 2)]
    # a's late acknowledgement of a record it no longer holds changes nothing
    assert sp.acknowledge("a", [AckBatch(0, 2, (ACC,))], 1_001) == ErrorCode.invalid_record_state
    assert sp.state_of(2) == RecordState.ACQUIRED and sp.records[0].member_id == "b"
    assert sp.expire_locks(1_900) == 1


def test_bad_acknowledgements_change_nothing() -> None:
    sp = SharePartition(0, CFG)
    sp.acquire("a", batches((0, 4)), 10, now_ms=0)
    before = {o: (r.state, r.delivery_count, r.member_id) for o, r in sp.records.items()}
    cases = [
        [AckBatch(3, 7, (ACC,))],  # beyond the in-flight records
        [AckBatch(2, 1, (ACC,))],  # first > last
        [AckBatch(0, 2, (ACC, ACC))],  # types neither 1 nor one per offset
        [AckBatch(0, 0, (9,))],  # unknown type
        [AckBatch(0, 1, (ACC,)), AckBatch(1, 2, (ACC,))],  # overlapping
        [AckBatch(0, 1, (ACC,)), AckBatch(9, 9, (ACC,))],  # second batch bad: first not applied
    ]
    for c in cases:
        assert sp.acknowledge("a", c, 0) != ErrorCode.none, c
    assert sp.acknowledge("z", [AckBatch(0, 0, (ACC,))], 0) == ErrorCode.invalid_record_state
    after = {o: (r.state, r.delivery_count, r.member_id) for o, r in sp.records.items()}
    assert after == before and sp.start_offset == 0


def test_record_lock_limit_and_gaps() -> None:
    sp = SharePartition(10, SharePartitionConfig(max_record_locks=5))
    got = sp.acquire("a", [FetchedBatch(8, 12), FetchedBatch(13, 13, skip=True),
                           FetchedBatch(16, 30)], 100, now_ms=0)
    # below the SPSO ignored, the control batch and the missing 14-15 are gaps, 5 locks at most
    assert got == [AcquiredRange(10, 12, 1)]
    assert sp.next_offset == 14  # the control batch is passed, the gap beyond the limit not
    sp2 = SharePartition(0, SharePartitionConfig(max_record_locks=100))
    got = sp2.acquire("a", [FetchedBatch(0, 1), FetchedBatch(2, 2, skip=True),
                            FetchedBatch(5, 6)], 100, now_ms=0)
    assert got == [AcquiredRange(0, 1, 1), AcquiredRange(5, 6, 1)]
    assert sp2.acknowledge("a", [AckBatch(0, 6, (ACC, ACC, GAP, GAP, GAP, ACC, ACC))], 0) == 0
    assert sp2.start_offset == 7


def test_state_round_trip_and_log_start() -> None:
    sp = SharePartition(0, CFG)
    sp.acquire("a", batches((0, 5)), 10, now_ms=0)
    sp.acknowledge("a", [AckBatch(1, 1, (ACC,)), AckBatch(3, 3, (REJ,)),
                         AckBatch(4, 4, (REL,))], 0)
    state = sp.state_batches()
    back = SharePartition.from_state(sp.start_offset, state, CFG)
    assert back.start_offset == 0 and back.next_offset == 6
    # acquired ones come back available (redelivered), acknowledged / archived never
    assert [back.state_of(o) for o in range(6)] == [
        RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.AVAILABLE,
        RecordState.ARCHIVED, RecordState.AVAILABLE, RecordState.AVAILABLE]
    got = back.acquire("b", batches((0, 5)), 10, now_ms=0)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 0), (2, 2), (4, 5)]
    assert got[0].delivery_count == 2
    back.reset_start(3)
    assert back.start_offset == 4


def test_fetched_batches_skip_aborted_and_control() -> None:
    data = (
        build_batch([(None, b"x")], base_offset=0, producer_id=7, producer_epoch=0,
                    base_sequence=0, is_transactional=True)
        + build_control_batch(base_offset=1, producer_id=7, producer_epoch=0, commit=False,
                              coordinator_epoch=0)
        + build_batch([(None, b"y")], base_offset=2)
    )
    got = fetched_batches(data, [(7, 0)])
    assert got == [FetchedBatch(0, 0, True), FetchedBatch(1, 1, True), FetchedBatch(2, 2, False)]
    assert fetched_batches(data)[0] == FetchedBatch(0, 0, False)


def test_sessions_epochs() -> None:
    c = ShareSessionCache(max_sessions=2, evict_after_ms=100)
    s = c.open("g", "m", 0)
    assert not isinstance(s, ErrorCode) and s.epoch == 1
    assert c.use("g", "m", 2, 0) == ErrorCode.invalid_share_session_epoch
    assert c.use("g", "x", 1, 0) == ErrorCode.share_session_not_found
    assert not isinstance(c.use("g", "m", 1, 0), ErrorCode)
    assert not isinstance(c.use("g", "m", 2, 0), ErrorCode)
    c.open("g", "n", 50)
    assert c.open("g", "o", 60) == ErrorCode.share_session_limit_reached
    assert not isinstance(c.open("g", "o", 101), ErrorCode)  # m was idle: evicted


def test_membership_assignment_and_epochs() -> None:
    t1, t2 = uuid.uuid4(), uuid.uuid4()
    topics = {"a": TopicInfo(t1, 1), "b": TopicInfo(t2, 3)}
    gs = ShareGroups()
    r1 = gs.heartbeat("g", "m1", 0, ["a", "b"], None, topics, 0, session_timeout_ms=100)
    assert r1.error_code == ErrorCode.none and r1.assignment == {
        t1: frozenset({0}), t2: frozenset({0, 1, 2})}
    r2 = gs.heartbeat("g", "m2", 0, ["a"], None, topics, 0, session_timeout_ms=100)
    # both members share the single partition of a
    assert r2.assignment == {t1: frozenset({0})}
    again = gs.heartbeat("g", "m1", r1.member_epoch, None, None, topics, 10,
                         session_timeout_ms=100)
    assert again.member_epoch == r2.member_epoch and again.assignment is not None
    same = gs.heartbeat("g", "m1", again.member_epoch, None, None, topics, 20,
                        session_timeout_ms=100)
    assert same.assignment is None  # unchanged: not sent
    assert gs.heartbeat("g", "m1", 99, None, None, topics, 20,
                        session_timeout_ms=100).error_code == ErrorCode.fenced_member_epoch
    assert gs.heartbeat("g", "zz", 3, None, None, topics, 20,
                        session_timeout_ms=100).error_code == ErrorCode.unknown_member_id
    assert gs.expire(105) == [("g", "m2")]
    assert gs.heartbeat("g", "m1", -1, None, None, topics, 30,
                        session_timeout_ms=100).member_epoch == -1
    assert gs.groups["g"].state == "Empty"
    many = simple_assign(
        [type("M", (), {"member_id": f"m{i}", "subscribed": ("b",)})() for i in range(5)],  # type: ignore[misc]
        {"b": TopicInfo(t2, 3)},
    )
    assert all(len(a[t2]) >= 1 for a in many.values())


def test_group_config_validation() -> None:
    broker = ShareBrokerConfig.from_props({"group.share.min.record.lock.duration.ms": "1000"})
    validate_group_config({"share.auto.offset.reset": "earliest",
                           "share.record.lock.duration.ms": "2000"}, broker)
    for bad in ({"share.auto.offset.reset": "middle"}, {"nope": "1"},
                {"share.record.lock.duration.ms": "999"},
                {"share.record.lock.duration.ms": "61000"},
                {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000",
                 "share.delivery.count.limit": "x"},
                {"share.heartbeat.interval.ms": "4000"}):
        try:
            validate_group_config(bad, broker)
        except GroupConfigError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_state_store_records_and_fencing() -> None:
    key = ShareKey("g", uuid.uuid4(), 3)
    assert decode_key(encode_key(key)) == key
    sp = SharePartition(5, CFG)
    sp.acquire("a", batches((5, 9)), 10, now_ms=0)
    st = ShareState(1, 4, sp.start_offset, tuple(sp.state_batches()))
    assert decode_value(encode_value(st)) == st
    store = ShareStateStore()
    store.load(0, [(encode_key(key), encode_value(st)), (b"junk", b"junk")])
    assert store.read(key, 4) == (ErrorCode.none, st)
    assert store.read(key, 3)[0] == ErrorCode.fenced_leader_epoch
    assert store.check_write(key, ShareState(1, 3, 5, ())) == ErrorCode.fenced_leader_epoch
    assert store.check_write(key, ShareState(0, 5, 5, ())) == ErrorCode.fenced_state_epoch
    for bad in (ShareState(1, 9, -5, ()),
                ShareState(1, 9, 5, (StateBatch(4, 6, 0, 1),)),  # below the start
                ShareState(1, 9, 5, (StateBatch(7, 6, 0, 1),)),
                ShareState(1, 9, 5, (StateBatch(5, 6, 0, 1), StateBatch(6, 7, 2, 1))),
                ShareState(1, 9, 5, (StateBatch(5, 6, 1, 1),)),  # ACQUIRED is not persisted
                ShareState(1, 9, 5, (StateBatch(5, 10**12, 0, 1),))):
        assert store.check_write(key, bad) == ErrorCode.invalid_request, bad
    store.load(0, [(encode_key(key), encode_value(st)), (encode_key(key), None)])
    assert store.read(key, 4) == (ErrorCode.none, None)


def test_sessions_close_with_their_connection() -> None:
    c = ShareSessionCache()
    a = c.open("g", "a", 0, connection_id=7)
    b = c.open("g", "b", 0, connection_id=8)
    assert not isinstance(a, ErrorCode) and not isinstance(b, ErrorCode)
    # a session continued on another connection belongs to that one from then on
    assert c.use("g", "b", 1, 1, connection_id=7) is b
    assert c.close_connection(9) == []
    assert sorted(s.member_id for s in c.close_connection(7)) == ["a", "b"]
    assert c.sessions == {}
    c.open("g", "in-process", 2)  # no connection (-1): never closed by one
    assert c.close_connection(-1) == [] and len(c.sessions) == 1


def test_deleted_state_fences_the_old_epoch_and_restarts_at_the_next() -> None:
    key = ShareKey("g", uuid.uuid4(), 0)
    store = ShareStateStore()
    assert store.deletion_marker(key) is None  # nothing to delete
    st = ShareState(2, 4, 10, (StateBatch(10, 12, 0, 1),))
    store.apply(key, 0, st)
    marker = store.deletion_marker(key)
    assert marker == ShareState(3, 4, -1, ()) and is_deleted(marker)
    store.apply(key, 0, marker)
    assert store.deletion_marker(key) is None  # deleted already
    # a leader still holding the old share-partition is fenced
    assert store.check_write(key, ShareState(2, 4, 13, ())) == ErrorCode.fenced_state_epoch
    # the new incarnation writes at the marker's epoch; a marker is never a leader's write
    assert store.check_write(key, ShareState(3, 4, 0, ())) == ErrorCode.none
    assert store.check_write(key, ShareState(3, 4, -1, ())) == ErrorCode.invalid_request
    # the marker is replayed as written
    store.load(0, [(encode_key(key), encode_value(st)), (encode_key(key), encode_value(marker))])
    assert store.read(key, 4) == (ErrorCode.none, marker)


# --- how much one acquisition takes ---------------------------------------------------------
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
