"""Fetching from the closest replica (KIP-392): the replica selectors, the leader's choice of a
preferred read replica on real logs, and a follower serving consumers up to its HW."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.replication.test_replica_manager_isr import TP, Env
from wherry.protocol.records import build_batch
from wherry.replication.fetch_reads import (
    FetchPartition,
    FetchPartitionResult,
    FetchResult,
    select_for_session,
)
from wherry.replication.fetch_session import CachedPartition, FetchSessionCache
from wherry.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    ClientMetadata,
    LeaderSelector,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)

RACKS = {1: "a", 2: "b", 3: "c"}


def _view(b: int, rack: str | None, leo: int = 10, since: int = 0) -> ReplicaView:
    return ReplicaView(b, rack, leo, since)


def test_rack_aware_selector_rules() -> None:
    sel = RackAwareReplicaSelector()
    leader = _view(1, "a")
    b2, c3 = _view(2, "b"), _view(3, "c")
    assert sel.select("", [b2, c3, leader], leader) == leader  # no client rack
    assert sel.select("z", [b2, c3, leader], leader) == leader  # nobody in the rack
    assert sel.select("b", [b2, c3, leader], leader) == b2
    assert sel.select("a", [b2, c3, leader], leader) == leader  # the leader is in the rack
    # most caught up wins; on a tie of log end offsets, the most recently caught up
    late, far, fresh = _view(4, "b", 8), _view(5, "b", 12, 50), _view(6, "b", 12, 5)
    assert sel.select("b", [late, far, leader], leader) == far
    assert sel.select("b", [late, far, fresh, leader], leader) == fresh
    assert LeaderSelector().select("b", [b2, leader], leader) == leader


def test_selector_names() -> None:
    assert isinstance(replica_selector(RACK_AWARE_SELECTOR), RackAwareReplicaSelector)
    assert isinstance(replica_selector(LEADER_SELECTOR), LeaderSelector)
    assert replica_selector(None) is None and replica_selector(" ") is None
    with pytest.raises(ValueError, match=r"Class com\.example\.Nearest cannot be found"):
        replica_selector("com.example.Nearest")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.lm.shutdown()


def _client(env: Env, rack: str, selector: str | None = RACK_AWARE_SELECTOR) -> ClientMetadata:
    return ClientMetadata(
        rack, replica_selector(selector), lambda b: (b in env.alive, RACKS.get(b))
    )


def _consumer_fetch(env: Env, offset: int, client: ClientMetadata | None,
                    *, epoch: int = -1, max_wait_ms: int = 0) -> list[FetchResult]:
    out: list[FetchResult] = []
    env.rm.fetch_messages(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                          max_bytes=1 << 20,
                          partitions=[FetchPartition(TP, offset, 1 << 20, epoch)],
                          respond=out.append, client=client)
    return out


def _append_batches(env: Env, n: int) -> None:
    for _ in range(n):  # a batch each: a read below the HW stops between them
        env.rm.append_records(timeout_ms=1000, required_acks=1,
                              entries={TP: build_batch([(None, b"v")])},
                              respond=lambda _r: None, now_ms=env.clock.now)


def _caught_up_leader(env: Env, records: int = 3) -> None:
    env.lead()
    env.rm.append_records(timeout_ms=1000, required_acks=1,
                          entries={TP: build_batch([(None, b"v")] * records)},
                          respond=lambda _r: None, now_ms=env.clock.now)
    for f in (2, 3):
        env.follower_fetch(f, records)
    assert env.part.high_watermark == records


def test_leader_sends_the_consumer_to_its_rack(env: Env) -> None:
    _caught_up_leader(env)
    [r] = _consumer_fetch(env, 0, _client(env, "b"))
    got = r[TP]
    assert got.error_code == ErrorCode.none
    assert got.preferred_read_replica == 2
    assert not got.records  # no records with a preferred replica, as Kafka
    assert got.high_watermark == 3
    # the leader's own rack, no rack, no selector, an older Fetch: read here
    for client in (_client(env, "a"), _client(env, ""), _client(env, "b", None), None):
        [r] = _consumer_fetch(env, 0, client)
        assert r[TP].preferred_read_replica == -1 and r[TP].records


def test_no_preferred_replica_out_of_sync_dead_or_behind(env: Env) -> None:
    _caught_up_leader(env)
    # beyond the follower's log end: it could not serve the offset
    env.rm.append_records(timeout_ms=1000, required_acks=1,
                          entries={TP: build_batch([(None, b"w")])},
                          respond=lambda _r: None, now_ms=env.clock.now)
    [r] = _consumer_fetch(env, 4, _client(env, "b"))
    assert r[TP].preferred_read_replica == -1
    # dead (not alive on the client's listener): not named again
    env.alive.discard(2)
    [r] = _consumer_fetch(env, 0, _client(env, "b"))
    assert r[TP].preferred_read_replica == -1
    env.alive.add(2)
    assert _consumer_fetch(env, 0, _client(env, "b"))[0][TP].preferred_read_replica == 2
    # out of the ISR: the leader keeps the consumer
    env.lead(epoch=2, isr=(1, 3))
    env.follower_fetch(2, 4)
    [r] = _consumer_fetch(env, 0, _client(env, "b"))
    assert r[TP].preferred_read_replica == -1 and r[TP].records


def test_follower_serves_consumers_up_to_its_high_watermark(env: Env) -> None:
    env.lead()
    _append_batches(env, 5)
    env.follow(epoch=2)
    env.part.log.update_high_watermark(3)
    # Fetch v11+ (client metadata): read here, below the HW only
    [r] = _consumer_fetch(env, 0, _client(env, "a"), epoch=2)
    assert r[TP].error_code == ErrorCode.none
    assert r[TP].high_watermark == 3 and r[TP].records
    [r] = _consumer_fetch(env, 3, _client(env, "a"), epoch=2)
    assert r[TP].error_code == ErrorCode.none and not r[TP].records
    # past the follower's log end: out of range (the client goes back to the leader)
    [r] = _consumer_fetch(env, 9, _client(env, "a"), epoch=2)
    assert r[TP].error_code == ErrorCode.offset_out_of_range
    # KIP-320 fencing still holds on a follower
    assert _consumer_fetch(env, 0, _client(env, "a"), epoch=1)[0][TP].error_code == (
        ErrorCode.fenced_leader_epoch)
    assert _consumer_fetch(env, 0, _client(env, "a"), epoch=3)[0][TP].error_code == (
        ErrorCode.unknown_leader_epoch)
    # an older Fetch (no client metadata) must go to the leader
    [r] = _consumer_fetch(env, 0, None)
    assert r[TP].error_code == ErrorCode.not_leader_or_follower


def test_parked_consumer_fetch_on_a_follower_wakes_when_its_hw_moves(env: Env) -> None:
    env.lead()
    _append_batches(env, 5)
    env.follow(epoch=2)
    env.part.log.update_high_watermark(3)
    out = _consumer_fetch(env, 3, _client(env, "a"), max_wait_ms=30_000)
    assert out == []  # parked: nothing below the HW yet
    env.part.log.update_high_watermark(5)
    env.rm.follower_high_watermark_moved(TP)
    assert len(out) == 1 and out[0][TP].records and out[0][TP].high_watermark == 5


def test_an_incremental_session_answer_always_carries_the_preferred_replica() -> None:
    cache = FetchSessionCache(10, 1000, random_id=lambda: 7)
    ctx = cache.new_context(session_id=0, epoch=0,
                            fetch_data={TP: CachedPartition(0, 1 << 20, -1, -1, TP.topic)},
                            forgotten=(), privileged=False, now_ms=0)
    assert ctx.session is not None
    same = FetchPartitionResult(ErrorCode.none, high_watermark=3, last_stable_offset=3,
                                log_start_offset=0)
    select_for_session(ctx.session, {TP: same}, full=True)
    # nothing new: left out of an incremental answer ...
    again = FetchPartitionResult(ErrorCode.none, high_watermark=3, last_stable_offset=3,
                                 log_start_offset=0)
    assert select_for_session(ctx.session, {TP: again}, full=False) == {}
    # ... unless the client is sent elsewhere (Kafka's FetchSession answers it always)
    sent = FetchPartitionResult(ErrorCode.none, high_watermark=3, last_stable_offset=3,
                                log_start_offset=0, preferred_read_replica=2)
    assert select_for_session(ctx.session, {TP: sent}, full=False) == {TP: sent}
