"""The pure group coordinator: join/sync/heartbeat/leave/commit flows on a manual clock."""

from __future__ import annotations

import pytest
from group_harness import Harness, sub
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.coordinator import MemberIdentity
from wherry.group.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from wherry.group.state import GroupState

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
E = ErrorCode


def test_first_join_requires_member_id_then_completes_generation_one() -> None:
    h = Harness()
    first = h.join("g", require_known=True)
    assert first.join.error == E.member_id_required
    mid = first.join.member_id
    assert mid.startswith("client-")
    g = h.coord.group("g")
    assert g is not None and g.is_pending_member(mid) and g.state is GroupState.EMPTY
    second = h.join("g", mid, require_known=True)
    r = second.join
    assert (r.error, r.generation_id, r.leader_id, r.member_id) == (E.none, 1, mid, mid)
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert [m.member_id for m in r.members] == [mid]
    assert g.state is GroupState.COMPLETING_REBALANCE


def test_sync_stores_assignment_before_answering() -> None:
    h = Harness()
    [leader] = h.stable_group("g", 1)
    g = h.coord.group("g")
    assert g is not None and g.state is GroupState.STABLE
    # The group metadata record (with the assignment) is in the log.
    recs = [(decode_key(k), v) for k, v in h.log.records() if k is not None]
    key, value = recs[-1]
    assert key == GroupMetadataKey("g") and value is not None
    stored = decode_group_metadata_value(value)
    assert stored.generation == 1 and stored.protocol == "range" and stored.leader == leader
    assert stored.members[0].assignment == f"assign-{leader}".encode()


def test_sync_waits_for_durable_write() -> None:
    h = Harness()
    mid = h.join_new("g").join.member_id
    h.log.hold = True
    s = h.sync("g", mid, 1, {mid: b"a"})
    assert not s.done  # not answered until the write is acknowledged
    h.log.release()
    assert s.sync.error == E.none and s.sync.assignment == b"a"


def test_sync_write_failure_maps_error_and_rebalances() -> None:
    h = Harness()
    mid = h.join_new("g").join.member_id
    h.log.fail_with = E.not_leader_or_follower
    s = h.sync("g", mid, 1, {mid: b"a"})
    assert s.sync.error == E.not_coordinator
    g = h.coord.group("g")
    assert g is not None and g.state is GroupState.PREPARING_REBALANCE


def test_initial_delay_batches_joining_members() -> None:
    h = Harness(initial_delay_ms=3000)
    a = h.join_new("g")
    assert not a.done
    h.advance(1000)
    b = h.join_new("g")
    h.advance(2500)  # the first delay expired, but a member was added: wait again
    assert not a.done and not b.done
    h.advance(3000)
    assert a.join.generation_id == b.join.generation_id == 1
    assert a.join.error == b.join.error == E.none
    leader = a.join.leader_id
    assert len((a.join if a.join.member_id == leader else b.join).members) == 2


def test_three_members_rebalance_and_one_leaves() -> None:
    h = Harness()
    ids = h.stable_group("g", 3)
    g = h.coord.group("g")
    assert g is not None and g.size == 3 and g.generation_id == 2
    # A member leaves: the others learn it from their heartbeats and rejoin.
    assert h.leave("g", MemberIdentity(ids[2])) == [E.none]
    assert g.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", ids[0], 2) == E.rebalance_in_progress
    a = h.join("g", ids[0])
    assert not a.done
    b = h.join("g", ids[1])
    assert a.join.generation_id == b.join.generation_id == 3
    assert {m.member_id for m in (a.join.members or b.join.members)} == set(ids[:2])


def test_session_expiry_removes_member_and_rebalances() -> None:
    h = Harness()
    ids = h.stable_group("g", 2, session_ms=6000)
    g = h.coord.group("g")
    assert g is not None
    h.advance(4000)
    assert h.heartbeat("g", ids[0], g.generation_id) == E.none
    assert g.state is GroupState.STABLE
    h.advance(2001)
    # ids[1] never heartbeated: it was removed and the group rebalances.
    assert not g.has(ids[1])
    assert g.state is GroupState.PREPARING_REBALANCE
    gen = g.generation_id
    assert h.heartbeat("g", ids[0], gen) == E.rebalance_in_progress
    r = h.join("g", ids[0])
    assert r.join.generation_id == gen + 1 and [m.member_id for m in r.join.members] == [ids[0]]


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    h = Harness()
    ids = h.stable_group("g", 2, session_ms=60_000, rebalance_ms=5000)
    g = h.coord.group("g")
    assert g is not None
    c = h.join("g", ids[0], session_ms=60_000, rebalance_ms=5000)  # leader rejoins: rebalance
    assert not c.done
    h.advance(5001)
    assert c.join.error == E.none and c.join.generation_id == 3
    assert not g.has(ids[1])


def test_pending_member_expires() -> None:
    h = Harness()
    first = h.join("g", require_known=True, session_ms=6000)
    mid = first.join.member_id
    g = h.coord.group("g")
    assert g is not None and g.is_pending_member(mid)
    h.advance(6001)
    assert not g.is_pending_member(mid)
    assert h.join("g", mid, require_known=True).join.error == E.unknown_member_id


def test_pending_sync_expiry_removes_silent_members() -> None:
    h = Harness()
    a = h.join_new("g", rebalance_ms=4000)
    b = h.join_new("g", rebalance_ms=4000)
    a2 = h.join("g", a.join.member_id, rebalance_ms=4000)
    assert a2.join.generation_id == b.join.generation_id == 2
    leader = a2.join.leader_id
    other = b.join.member_id if leader != b.join.member_id else a2.join.member_id
    s = h.sync("g", other, 2)
    assert not s.done  # waits for the leader's assignment
    h.advance(4001)  # the leader never syncs
    g = h.coord.group("g")
    assert g is not None and not g.has(leader)
    assert s.sync.error == E.rebalance_in_progress
    assert g.state is GroupState.PREPARING_REBALANCE


def test_heartbeat_errors() -> None:
    h = Harness()
    [mid] = h.stable_group("g", 1)
    assert h.heartbeat("g", mid, 1) == E.none
    assert h.heartbeat("nope", mid, 1) == E.unknown_member_id
    assert h.heartbeat("g", "stranger", 1) == E.unknown_member_id
    assert h.heartbeat("g", mid, 7) == E.illegal_generation
    assert h.heartbeat("", mid, 1) == E.invalid_group_id


def test_sync_errors() -> None:
    h = Harness()
    [mid] = h.stable_group("g", 1)
    assert h.sync("g", mid, 0).sync.error == E.illegal_generation
    assert h.sync("g", "x", 1).sync.error == E.unknown_member_id
    assert h.sync("nope", mid, 1).sync.error == E.unknown_member_id
    assert h.sync("g", mid, 1, protocol_type="other").sync.error == E.inconsistent_group_protocol
    assert h.sync("g", mid, 1, protocol_name="other").sync.error == E.inconsistent_group_protocol
    ok = h.sync("g", mid, 1, protocol_type="consumer", protocol_name="range").sync
    assert ok.error == E.none and ok.assignment == f"assign-{mid}".encode()


def test_join_errors() -> None:
    h = Harness()
    assert h.join("g", session_ms=10).join.error == E.invalid_session_timeout
    assert h.join("g", session_ms=1_800_001).join.error == E.invalid_session_timeout
    assert h.join("g", "someone").join.error == E.unknown_member_id
    h.stable_group("g", 2)
    assert h.join("g", protocol_type="connect").join.error == E.inconsistent_group_protocol
    assert h.join("g", protocols=[("rr", b"")]).join.error == E.inconsistent_group_protocol
    assert h.join("", require_known=True).join.error == E.invalid_group_id


def test_protocol_selected_by_vote() -> None:
    h = Harness()
    a = h.join_new("g", protocols=[("range", b"a"), ("roundrobin", b"a")])
    b = h.join_new("g", protocols=[("roundrobin", b"b"), ("range", b"b")])
    c = h.join_new("g", protocols=[("roundrobin", b"c"), ("sticky", b"c")])
    a2 = h.join("g", a.join.member_id, protocols=[("range", b"a"), ("roundrobin", b"a")])
    # Only roundrobin is common to all three.
    assert a2.join.protocol_name == b.join.protocol_name == c.join.protocol_name == "roundrobin"


def test_follower_rejoin_in_stable_group_returns_current_generation() -> None:
    h = Harness()
    ids = h.stable_group("g", 2)
    r = h.join("g", ids[1])
    assert r.join.error == E.none and r.join.generation_id == 2 and r.join.members == ()
    g = h.coord.group("g")
    assert g is not None and g.state is GroupState.STABLE


def test_static_member_rejoins_without_rebalance_and_fences_old_id() -> None:
    h = Harness()
    a = h.join("g", instance_id="i-a", require_known=True)  # static: no MEMBER_ID_REQUIRED
    assert a.join.error == E.none and a.join.member_id.startswith("i-a-")
    old = a.join.member_id
    assert h.sync("g", old, 1, {old: b"x"}).sync.error == E.none
    g = h.coord.group("g")
    assert g is not None and g.state is GroupState.STABLE
    # The same instance restarts (unknown member id) within its session.
    b = h.join("g", instance_id="i-a", require_known=True)
    new = b.join.member_id
    assert b.join.error == E.none and new != old
    assert b.join.generation_id == 1 and g.generation_id == 1 and g.state is GroupState.STABLE
    assert b.join.leader_id == old  # pre-v9: the old leader id, so no reassignment runs
    assert h.sync("g", new, 1).sync.assignment == b"x"
    assert h.heartbeat("g", old, 1, "i-a") == E.fenced_instance_id
    assert h.heartbeat("g", new, 1, "i-a") == E.none
    # v9+: the leader is told it leads but must skip the assignment.
    c = h.join("g", instance_id="i-a", require_known=True, skip_assignment=True)
    assert c.join.skip_assignment and c.join.leader_id == c.join.member_id
    assert [m.member_id for m in c.join.members] == [c.join.member_id]


def test_static_member_is_kept_through_rebalance_timeout() -> None:
    h = Harness()
    s = h.join("g", instance_id="s", rebalance_ms=3000, session_ms=60_000)
    d = h.join_new("g", rebalance_ms=3000)  # triggers a rebalance
    h.advance(3001)  # the static member did not rejoin: it stays (until its session ends)
    assert d.join.error == E.none
    g = h.coord.group("g")
    assert g is not None and g.has(s.join.member_id) and g.size == 2


def test_leave_group_batch_and_static_removal_by_instance_id() -> None:
    h = Harness()
    st = h.join("g", instance_id="inst").join.member_id
    r = h.coord.handle_leave_group("g", [
        MemberIdentity("", "inst"),
        MemberIdentity("ghost"),
        MemberIdentity("", "no-such-instance"),
    ], h.now)
    assert [m.error for m in r.members] == [E.none, E.unknown_member_id, E.unknown_member_id]
    g = h.coord.group("g")
    assert g is not None and not g.has(st)
    other = h.coord.handle_leave_group("unknown-group", [MemberIdentity("m")], h.now)
    assert other.error == E.none and other.members[0].error == E.unknown_member_id


def test_fenced_static_member_cannot_leave() -> None:
    h = Harness()
    first = h.join("g", instance_id="inst").join.member_id
    h.sync("g", first, 1, {first: b""})
    h.join("g", instance_id="inst")  # replaced
    assert h.leave("g", MemberIdentity(first, "inst")) == [E.fenced_instance_id]


def test_last_member_leaving_empties_group_and_bumps_generation() -> None:
    h = Harness()
    [mid] = h.stable_group("g", 1)
    assert h.leave("g", MemberIdentity(mid)) == [E.none]
    g = h.coord.group("g")
    assert g is not None
    h.advance(1)
    assert g.state is GroupState.EMPTY and g.generation_id == 2
    _, value = h.log.records()[-1]
    assert value is not None and decode_group_metadata_value(value).members == ()


def test_simple_consumer_commit_and_fetch() -> None:
    h = Harness()
    c = h.commit("simple", {TP0: 10, TP1: (20, "meta")})
    assert c.commit == {TP0: E.none, TP1: E.none}
    assert h.fetch("simple", TP0, TP1, TopicPartition("t", 2)) == {
        TP0: 10, TP1: 20, TopicPartition("t", 2): -1}
    _, parts = h.coord.handle_fetch_offsets("simple", False, None)
    assert parts[TP1].metadata == "meta"
    keys = [decode_key(k) for k, _ in h.log.records() if k is not None]
    assert OffsetCommitKey("simple", "t", 0) in keys
    value = h.log.records()[-1][1]
    assert value is not None and decode_offset_commit_value(value).offset in (10, 20)
    assert h.fetch("never-committed", TP0) == {TP0: -1}


def test_commit_validation() -> None:
    h = Harness()
    ids = h.stable_group("g", 1)
    assert h.commit("g", {TP0: 1}, member_id=ids[0], generation=1).commit[TP0] == E.none
    assert h.commit("g", {TP0: 1}, member_id="stranger", generation=1).commit[TP0] == (
        E.unknown_member_id)
    assert h.commit("g", {TP0: 1}, member_id=ids[0], generation=0).commit[TP0] == (
        E.illegal_generation)
    # Generation -1 without a member is refused while the group has members.
    assert h.commit("g", {TP0: 1}).commit[TP0] == E.unknown_member_id
    # A commit for a group that does not exist with a real generation: an old generation.
    assert h.commit("gone", {TP0: 1}, member_id="m", generation=3).commit[TP0] == (
        E.illegal_generation)
    assert h.fetch("g", TP0) == {TP0: 1}


def test_commit_during_completing_rebalance_is_refused() -> None:
    h = Harness()
    a = h.join_new("g")
    mid = a.join.member_id
    c = h.commit("g", {TP0: 5}, member_id=mid, generation=1)
    assert c.commit[TP0] == E.rebalance_in_progress


def test_oversized_metadata() -> None:
    h = Harness(offset_metadata_max_bytes=10)
    c = h.commit("g", {TP0: (1, "x" * 11), TP1: (2, "ok")})
    assert c.commit == {TP0: E.offset_metadata_too_large, TP1: E.none}
    assert h.fetch("g", TP0, TP1) == {TP0: -1, TP1: 2}
    only_bad = h.commit("g2", {TP0: (1, "y" * 11)})
    assert only_bad.commit == {TP0: E.offset_metadata_too_large}


def test_require_stable_waits_for_the_commits_being_written() -> None:
    """Kafka 4: a stable fetch is read after the commits in flight, not refused with
    UNSTABLE_OFFSET_COMMIT (which a consumer may take as "no committed offset")."""
    h = Harness()
    assert h.commit("g", {TP0: 1}).commit == {TP0: E.none}
    h.log.hold = True
    first = h.commit("g", {TP0: 3})
    stable: list[dict[TopicPartition, int]] = []

    def read() -> None:
        err, parts = h.coord.handle_fetch_offsets("g", True, [TP0])
        assert err == E.none and parts[TP0].error == E.none
        stable.append({tp: p.offset for tp, p in parts.items()})

    h.coord.after_offset_writes("g", read)
    assert stable == []  # the commit of 3 is not written yet
    # what is committed so far, without UNSTABLE_OFFSET_COMMIT
    _, parts = h.coord.handle_fetch_offsets("g", True, [TP0])
    assert (parts[TP0].offset, parts[TP0].error) == (1, E.none)
    held, h.log.held = h.log.held, []
    second = h.commit("g", {TP0: 5})  # after the fetch: not waited for
    later, h.log.held = h.log.held, held
    h.log.release()
    assert first.commit == {TP0: E.none} and stable == [{TP0: 3}]
    h.log.held = later
    h.log.release()
    assert second.commit == {TP0: E.none} and h.fetch("g", TP0) == {TP0: 5}


def test_require_stable_waits_for_a_failed_commit_too() -> None:
    h = Harness()
    h.log.hold = True
    c = h.commit("g", {TP0: 3})
    answered: list[bool] = []
    h.coord.after_offset_writes("g", lambda: answered.append(True))
    h.coord.after_offset_writes("other", lambda: answered.append(False))
    assert answered == [False]
    h.log.fail_with = E.not_leader_or_follower
    h.log.release()
    assert c.commit == {TP0: E.not_coordinator} and answered == [False, True]
    assert h.fetch("g", TP0) == {TP0: -1}


def test_coordinator_not_loaded_or_loading() -> None:
    h = Harness(partitions=2, loaded=False)
    assert h.heartbeat("g", "m", 1) == E.not_coordinator
    p = h.coord.partition_for("g")
    assert h.coord.begin_loading(p, epoch=0)
    assert h.join("g").join.error == E.coordinator_load_in_progress
    assert h.heartbeat("g", "m", 1) == E.none  # answered blindly while loading
    assert h.sync("g", "m", 1).sync.error == E.rebalance_in_progress
    assert h.coord.handle_list_groups()[0] == E.coordinator_load_in_progress
    # A stale load (superseded epoch) is not applied.
    assert h.coord.begin_loading(p, epoch=1)
    assert not h.coord.load_partition(p, [], now_ms=h.now, epoch=0)
    assert h.coord.load_partition(p, [], now_ms=h.now, epoch=1)
    assert h.join("g", require_known=True).join.error == E.member_id_required


def test_unload_answers_parked_requests_with_not_coordinator() -> None:
    h = Harness()
    ids = h.stable_group("g", 2)
    parked = h.join("g", ids[0])
    assert not parked.done
    h.coord.unload_partition(0)
    assert parked.join.error == E.not_coordinator
    assert h.coord.group("g") is None
    assert h.heartbeat("g", ids[1], 2) == E.not_coordinator


def test_describe_and_list_groups() -> None:
    h = Harness()
    ids = h.stable_group("g", 2, protocols=[("range", sub("t"))])
    h.commit("simple", {TP0: 1})
    err, msg, summary = h.coord.handle_describe_group("g")
    assert err == E.none and summary.state == "Stable" and summary.protocol == "range"
    assert {m.member_id for m in summary.members} == set(ids)
    assert all(m.metadata == sub("t") and m.client_host == "/127.0.0.1" for m in summary.members)
    err, msg, summary = h.coord.handle_describe_group("missing")
    assert (err, summary.state) == (E.none, "Dead")
    err, msg, _ = h.coord.handle_describe_group("missing", api_version=6)
    assert err == E.group_id_not_found and msg == "Group missing not found."
    err, groups = h.coord.handle_list_groups()
    assert err == E.none and {(g.group_id, g.state) for g in groups} == {
        ("g", "Stable"), ("simple", "Empty")}
    assert [g.group_id for g in h.coord.handle_list_groups(["stable"])[1]] == ["g"]
    assert h.coord.handle_list_groups(types=["consumer"])[1] == []
    assert len(h.coord.handle_list_groups(types=["Classic"])[1]) == 2


def test_delete_groups() -> None:
    h = Harness()
    h.stable_group("busy", 1)
    h.commit("idle", {TP0: 1})
    res = h.coord.handle_delete_groups(["busy", "idle", "nope"], h.now)
    assert res == {"busy": E.non_empty_group, "idle": E.none, "nope": E.group_id_not_found}
    assert h.coord.group("idle") is None
    assert h.fetch("idle", TP0) == {TP0: -1}
    # Offset tombstones, no group tombstone (generation 0 groups never stored metadata).
    last = h.log.records()[-1]
    assert last[1] is None and decode_key(last[0] or b"") == OffsetCommitKey("idle", "t", 0)


def test_delete_offsets() -> None:
    h = Harness()
    ids = h.stable_group("g", 1, protocols=[("range", sub("t"))])
    other = TopicPartition("other", 0)
    assert h.commit("g", {TP0: 1, other: 2}, member_id=ids[0], generation=1).commit == {
        TP0: E.none, other: E.none}
    err, parts = h.coord.handle_delete_offsets("g", [TP0, other], h.now)
    assert err == E.none
    assert parts == {TP0: E.group_subscribed_to_topic, other: E.none}
    assert h.fetch("g", TP0, other) == {TP0: 1, other: -1}
    assert h.coord.handle_delete_offsets("nope", [TP0], h.now)[0] == E.group_id_not_found


def test_offsets_retention_counts_from_when_group_became_empty() -> None:
    h = Harness(offsets_retention_ms=60_000)
    [mid] = h.stable_group("g", 1)
    h.commit("g", {TP0: 5}, member_id=mid, generation=1)
    for _ in range(10):  # an old commit of a subscribed topic in an active group: kept
        h.advance(9_000)
        assert h.heartbeat("g", mid, 1) == E.none
        assert h.coord.cleanup_expired_offsets(h.now) == 0
    assert h.leave("g", MemberIdentity(mid)) == [E.none]
    h.advance(59_999)
    assert h.coord.cleanup_expired_offsets(h.now) == 0
    assert h.fetch("g", TP0) == {TP0: 5}
    h.advance(1)
    assert h.coord.cleanup_expired_offsets(h.now) == 1
    assert h.coord.group("g") is None  # no offsets left: the group is gone
    tail = [(decode_key(k or b""), v) for k, v in h.log.records()[-2:]]
    assert tail == [(OffsetCommitKey("g", "t", 0), None), (GroupMetadataKey("g"), None)]


def test_unsubscribed_topic_offsets_expire_in_stable_group() -> None:
    h = Harness(offsets_retention_ms=60_000)
    [mid] = h.stable_group("g", 1)
    other = TopicPartition("old-topic", 0)
    h.commit("g", {TP0: 5, other: 6}, member_id=mid, generation=1)
    for _ in range(7):
        h.advance(9_000)
        assert h.heartbeat("g", mid, 1) == E.none
    assert h.coord.cleanup_expired_offsets(h.now) == 1
    assert h.fetch("g", TP0, other) == {TP0: 5, other: -1}


def test_simple_group_offsets_expire_from_commit_time() -> None:
    day = 24 * 3_600_000
    h = Harness(offsets_retention_ms=day)
    h.commit("s", {TP0: 1})
    h.advance(day // 2)
    h.commit("s", {TP1: 2})
    h.advance(day // 2)
    assert h.coord.cleanup_expired_offsets(h.now) == 1
    assert h.fetch("s", TP0, TP1) == {TP0: -1, TP1: 2}


def test_group_over_capacity_sheds_members_on_rejoin() -> None:
    h = Harness(group_max_size=1)
    h.stable_group("g", 1)
    extra = h.join("g", require_known=True)
    assert extra.join.error == E.group_max_size_reached



@pytest.mark.parametrize("api", ["describe", "list", "delete"])
def test_admin_requests_see_sessions_ended_before_the_ticker_ran(api: str) -> None:
    """A request handled after a member's session deadline, before the ticker advanced the
    coordinator, finds the member gone (Kafka's timers fire at the deadline): DescribeGroups
    and ListGroups show the group Empty and DeleteGroups deletes it. Before the deadline the
    group is not empty."""
    h = Harness()
    (member,) = h.stable_group("g", 1, session_ms=6000)
    g = h.coord.group("g")
    assert g is not None and g.has(member)
    # Still within the session: NON_EMPTY_GROUP, as Kafka.
    assert h.coord.handle_delete_groups(["g"], h.now + 5999) == {"g": E.non_empty_group}
    assert g.has(member)
    late = h.now + 6001  # the clock is not advanced: only the request carries the time
    if api == "describe":
        assert h.coord.handle_describe_group("g", 5, now_ms=late)[2].state == "Empty"
    elif api == "list":
        assert [str(o.state) for o in h.coord.handle_list_groups(now_ms=late)[1]] == ["Empty"]
    else:
        assert h.coord.handle_delete_groups(["g"], late) == {"g": E.none}
    assert not g.has(member)
