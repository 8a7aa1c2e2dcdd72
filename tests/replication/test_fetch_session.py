"""The fetch session cache (KIP-227, Kafka's FetchSession.scala), pure: contexts, epochs,
errors, incremental updates, eviction and the per-session change marks."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.replication.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    MAX_EPOCH,
    CachedPartition,
    ContextKind,
    FetchSessionCache,
    next_epoch,
)

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


def cache(slots: int = 10, eviction_ms: int = 1000) -> FetchSessionCache:
    ids = itertools.count(1)
    return FetchSessionCache(slots, eviction_ms, random_id=lambda: next(ids))


def data(*tps: TopicPartition, offset: int = 0) -> dict[TopicPartition, CachedPartition]:
    return {tp: CachedPartition(offset, 1 << 20, -1, -1, tp.topic) for tp in tps}


def full(c: FetchSessionCache, *tps: TopicPartition, now: int = 0, privileged: bool = False,
         session_id: int = 0):  # type: ignore[no-untyped-def]
    return c.new_context(session_id=session_id, epoch=INITIAL_EPOCH, fetch_data=data(*tps),
                         forgotten=(), privileged=privileged, now_ms=now)


def test_next_epoch_wraps_past_zero() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_fetch_creates_a_session_and_incremental_ones_follow_its_epoch() -> None:
    c = cache()
    ctx = full(c, A0, A1)
    assert ctx.kind is ContextKind.FULL and ctx.session_id != 0
    sid = ctx.session_id
    inc = c.new_context(session_id=sid, epoch=1, fetch_data={}, forgotten=(), privileged=False,
                        now_ms=5)
    assert inc.kind is ContextKind.INCREMENTAL and inc.session_id == sid
    # the same epoch again (a duplicate request) is refused; the next one is accepted
    again = c.new_context(session_id=sid, epoch=1, fetch_data={}, forgotten=(), privileged=False,
                          now_ms=6)
    assert again.kind is ContextKind.ERROR
    assert again.error == ErrorCode.invalid_fetch_session_epoch
    assert c.new_context(session_id=sid, epoch=2, fetch_data={}, forgotten=(),
                         privileged=False, now_ms=7).kind is ContextKind.INCREMENTAL


def test_unknown_session_is_fetch_session_id_not_found() -> None:
    c = cache()
    ctx = c.new_context(session_id=77, epoch=3, fetch_data={}, forgotten=(), privileged=False,
                        now_ms=0)
    assert ctx.kind is ContextKind.ERROR and ctx.error == ErrorCode.fetch_session_id_not_found
    assert ctx.session_id == 0


def test_final_epoch_closes_the_session_and_fetches_without_one() -> None:
    c = cache()
    sid = full(c, A0).session_id
    ctx = c.new_context(session_id=sid, epoch=FINAL_EPOCH, fetch_data=data(A0), forgotten=(),
                        privileged=False, now_ms=1)
    assert ctx.kind is ContextKind.SESSIONLESS and ctx.session_id == 0
    assert c.get(sid) is None and len(c) == 0


def test_initial_epoch_with_an_id_replaces_the_session() -> None:
    c = cache()
    sid = full(c, A0).session_id
    ctx = full(c, A1, session_id=sid)
    assert ctx.kind is ContextKind.FULL and ctx.session_id != sid
    assert c.get(sid) is None and len(c) == 1


def test_incremental_adds_updates_and_forgets() -> None:
    c = cache()
    sid = full(c, A0, A1).session_id
    session = c.get(sid)
    assert session is not None
    ctx = c.new_context(session_id=sid, epoch=1, fetch_data=data(A1, B0, offset=9),
                        forgotten=[A0], privileged=False, now_ms=1)
    assert ctx.kind is ContextKind.INCREMENTAL
    assert set(ctx.touched) == {A1, B0}
    assert set(session.partitions) == {A1, B0}
    assert session.partitions[A1].fetch_offset == 9
    # forgetting everything ends the session: the fetch is answered without one
    ctx = c.new_context(session_id=sid, epoch=2, fetch_data={}, forgotten=[A1, B0],
                        privileged=False, now_ms=2)
    assert ctx.kind is ContextKind.SESSIONLESS and c.get(sid) is None


def test_changes_mark_only_the_sessions_holding_the_partition() -> None:
    c = cache()
    s1 = full(c, A0, A1).session
    s2 = full(c, B0).session
    assert s1 is not None and s2 is not None
    assert set(c.mark_changed(A1)) == {s1.id}
    assert set(c.mark_changed(TopicPartition("zzz", 0))) == set()
    assert s1.take_dirty() == [A1] and s1.take_dirty() == []
    assert s2.dirty == set()
    c.remove(s1.id)
    assert set(c.mark_changed(A1)) == set()


def test_must_respond_records_the_answer_state() -> None:
    cp = CachedPartition(0, 100)
    kw = {"error_code": 0, "has_records": False, "last_stable_offset": 5, "log_start_offset": 0}
    assert cp.must_respond(high_watermark=5, **kw)  # first answer: the HW is new
    assert not cp.must_respond(high_watermark=5, **kw)  # nothing new
    assert cp.must_respond(high_watermark=5, **{**kw, "has_records": True})
    assert cp.must_respond(high_watermark=6, **{**kw, "last_stable_offset": 6})
    assert cp.must_respond(high_watermark=6, **{**kw, "last_stable_offset": 6, "error_code": 6})
    # after an error the partition is answered again once it recovers
    assert cp.must_respond(high_watermark=6, **{**kw, "last_stable_offset": 6})


def test_full_cache_evicts_a_stale_session_first() -> None:
    c = cache(slots=2, eviction_ms=100)
    s1 = full(c, A0, now=0).session_id
    s2 = full(c, A0, A1, now=50).session_id
    assert s1 and s2
    # nothing stale, and the newcomer (1 partition, unprivileged) is worth no more than s1
    assert full(c, B0, now=60).kind is ContextKind.SESSIONLESS
    # s1 unused for longer than eviction_ms: it goes
    ctx = full(c, B0, now=101)
    assert ctx.kind is ContextKind.FULL
    assert c.get(s1) is None and c.get(s2) is not None and c.evictions == 1


def test_privileged_sessions_evict_young_unprivileged_ones_and_bigger_beats_smaller() -> None:
    c = cache(slots=2, eviction_ms=1000)
    small = full(c, A0, now=0).session_id
    big = full(c, A0, A1, B0, now=1).session_id
    # a young session is protected from unprivileged newcomers, however big
    assert full(c, A0, A1, B0, TopicPartition("c", 0), now=2).kind is ContextKind.SESSIONLESS
    # a follower (privileged) evicts the least valuable unprivileged one: the smaller
    ctx = full(c, A0, now=3, privileged=True)
    assert ctx.kind is ContextKind.FULL
    assert c.get(small) is None and c.get(big) is not None
    # once old, an unprivileged session may be evicted by a bigger unprivileged newcomer...
    assert full(c, A0, A1, B0, TopicPartition("c", 0), now=1500).kind is ContextKind.FULL
    assert c.get(big) is None
    # ...but an unprivileged newcomer never outweighs a privileged session (until it is stale)
    follower = ctx.session_id
    c.get(follower).last_used_ms = 1400  # type: ignore[union-attr]
    assert full(c, A0, A1, B0, TopicPartition("d", 7), now=1600).kind is ContextKind.SESSIONLESS
    assert c.get(follower) is not None


def test_session_ids_are_unique_and_never_zero() -> None:
    ids = iter([0, 5, 5, 6])
    c = FetchSessionCache(10, 1000, random_id=lambda: next(ids))
    assert full(c, A0).session_id == 5
    assert full(c, A1).session_id == 6
