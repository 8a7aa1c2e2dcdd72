"""Share-group membership in `__consumer_offsets` (record types 9-15, as Kafka 4.1 writes
them), pure: a group's record set written as diffs, replayed by the group coordinator's
loader, rebuilds members with their ids, epochs and assignments; leaving writes tombstones;
deletion tombstones everything; bytes that do not parse are skipped, not fatal."""

from __future__ import annotations

import struct
import uuid

from kio.schema.errors import ErrorCode

from wherry.group import share_group_records as sgr
from wherry.group.loader import read_partition
from wherry.protocol.records import build_batch
from wherry.share.group import ShareGroups, TopicInfo

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {"a": TopicInfo(T1, 2), "b": TopicInfo(T2, 3)}


def _log(*writes: list[tuple[bytes, bytes | None]]) -> list[bytes]:
    return [build_batch(w, base_offset=i * 100) for i, w in enumerate(writes) if w]


def _beat(gs: ShareGroups, member: str, epoch: int, subs: list[str] | None, now: int) -> int:
    r = gs.heartbeat("g", member, epoch, subs, "rack-1" if member == "m1" else None, TOPICS,
                     now, session_timeout_ms=45_000, client_id=f"c-{member}",
                     client_host="/127.0.0.1")
    assert r.error_code == ErrorCode.none, r
    return r.member_epoch


def test_members_survive_a_replay_with_their_ids_and_epochs() -> None:
    gs = ShareGroups()
    e1 = _beat(gs, "m1", 0, ["a", "b"], 0)
    w1 = gs.groups["g"].changes()
    e2 = _beat(gs, "m2", 0, ["a"], 1)
    w2 = gs.groups["g"].changes()
    e1 = _beat(gs, "m1", e1, None, 2)
    w3 = gs.groups["g"].changes()
    assert _beat(gs, "m1", e1, None, 3) == e1
    assert gs.groups["g"].changes() == []  # a steady heartbeat writes nothing
    # the writes are diffs: the second one does not rewrite m1's member metadata
    assert sgr.member_metadata_key("g", "m1") in dict(w1)
    assert sgr.member_metadata_key("g", "m1") not in dict(w2)
    snap = read_partition(_log(w1, w2, w3))
    assert snap.skipped == 0 and set(snap.share_groups.groups) == {"g"}
    loaded = ShareGroups()
    assert loaded.load(snap.share_groups.groups, lambda g: True, 10_000, 45_000) == 1
    before, after = gs.groups["g"], loaded.groups["g"]
    assert (after.group_epoch, after.assignment_epoch, after.metadata_hash) == (
        before.group_epoch, before.assignment_epoch, before.metadata_hash)
    for mid in ("m1", "m2"):
        b, a = before.members[mid], after.members[mid]
        assert (a.member_epoch, a.previous_epoch, a.subscribed, a.rack_id, a.client_id,
                a.client_host, a.assignment) == (
            b.member_epoch, b.previous_epoch, b.subscribed, b.rack_id, b.client_id,
            b.client_host, b.assignment)
        assert a.deadline_ms == 10_000 + 45_000
    assert after.target == before.target
    assert after.state_topics == {T1: ("a", frozenset({0, 1})), T2: ("b", frozenset({0, 1, 2}))}
    # members go on heartbeating with their epochs: no UNKNOWN_MEMBER_ID, no new epoch
    assert after.members["m2"].member_epoch == e2 == e1
    r = loaded.heartbeat("g", "m2", e2, None, None, TOPICS, 10_001, session_timeout_ms=45_000)
    assert r.error_code == ErrorCode.none and r.member_epoch == e2 and r.assignment is None
    assert loaded.groups["g"].changes() == []  # nothing changed: the loaded set is the log's


def test_leaving_writes_tombstones_and_deletion_removes_the_group() -> None:
    gs = ShareGroups()
    _beat(gs, "m1", 0, ["a"], 0)
    _beat(gs, "m2", 0, ["a"], 0)
    w1 = gs.groups["g"].changes()
    assert gs.heartbeat("g", "m2", -1, None, None, TOPICS, 1,
                        session_timeout_ms=45_000).member_epoch == -1
    w2 = gs.groups["g"].changes()
    tombstones = [k for k, v in w2 if v is None]
    assert set(tombstones) == {sgr.member_metadata_key("g", "m2"),
                               sgr.target_member_key("g", "m2"),
                               sgr.current_assignment_key("g", "m2")}
    # a member's records go before the group's on the way out
    assert w2.index((sgr.current_assignment_key("g", "m2"), None)) < len(tombstones)
    snap = read_partition(_log(w1, w2))
    assert set(snap.share_groups.groups["g"].members) == {"m1"}
    w3 = gs.groups["g"].deletion()
    assert all(v is None for _, v in w3)
    assert read_partition(_log(w1, w2, w3)).share_groups.groups == {}


def test_only_the_loaded_partitions_groups_are_replaced() -> None:
    gs = ShareGroups()
    _beat(gs, "m1", 0, ["a"], 0)
    w = gs.groups["g"].changes()
    other = ShareGroups()
    other.heartbeat("h", "x", 0, ["a"], None, TOPICS, 0, session_timeout_ms=1000)
    other.load(read_partition(_log(w)).share_groups.groups, lambda g: g == "g", 0, 1000)
    assert set(other.groups) == {"g", "h"}


def test_unreadable_share_records_are_skipped() -> None:
    gs = ShareGroups()
    _beat(gs, "m1", 0, ["a"], 0)
    good = gs.groups["g"].changes()
    bad_value = [(sgr.group_metadata_key("x"), b"\x00\x00\x01")]  # truncated
    bad_version = [(sgr.member_metadata_key("y", "m"), struct.pack(">h", 7) + b"\x00")]
    snap = read_partition(_log(good, bad_value, bad_version))
    assert snap.skipped == 2 and set(snap.share_groups.groups) == {"g"}


def test_state_metadata_and_partition_metadata_round_trip() -> None:
    st = sgr.StateTopic(T1, "a", frozenset({0, 2}), 123)
    v = sgr.encode_state_metadata([st], deleting=[(T2, "b")])
    assert sgr.decode_state_metadata(v) == (st,)
    rp = sgr.ShareGroupReplay()
    # a Kafka 4.0 ShareGroupPartitionMetadataValue: one topic, no racks
    w = struct.pack(">h", 0) + bytes([2]) + T1.bytes + bytes([2]) + b"a" + struct.pack(">i", 2)
    w += bytes([1, 0, 0])
    rp.apply(sgr.partition_metadata_key("g"), w)
    assert rp.groups["g"].has_partition_metadata
    rp.apply(sgr.partition_metadata_key("g"), None)
    assert rp.groups == {}


def test_a_failed_append_is_rewritten_tombstones_included() -> None:
    gs = ShareGroups()
    _beat(gs, "m1", 0, ["a"], 0)
    _beat(gs, "m2", 0, ["a"], 0)
    w1 = gs.groups["g"].changes()
    gs.heartbeat("g", "m2", -1, None, None, TOPICS, 1, session_timeout_ms=45_000)
    gs.groups["g"].changes()
    gs.groups["g"].unwritten()  # the leave's append failed
    # the leave is sent again: m2 is gone already, its tombstones are still written
    assert gs.heartbeat("g", "m2", -1, None, None, TOPICS, 2,
                        session_timeout_ms=45_000).error_code == ErrorCode.none
    w2 = gs.groups["g"].changes()
    assert (sgr.member_metadata_key("g", "m2"), None) in w2
    assert set(read_partition(_log(w1, w2)).share_groups.groups["g"].members) == {"m1"}


def test_a_member_whose_answers_were_lost_keeps_its_epoch() -> None:
    gs = ShareGroups()
    e1 = _beat(gs, "m1", 0, ["a"], 0)
    # m1's next answers are lost twice while the group moves on (m2 joins in between)
    assert _beat(gs, "m2", 0, ["a"], 1) > e1
    bumped = _beat(gs, "m1", e1, None, 2)
    assert bumped > e1
    assert _beat(gs, "m3", 0, ["a"], 3) > bumped
    assert _beat(gs, "m1", e1, None, 4) > bumped  # still the epoch it holds: not fenced
    r = gs.heartbeat("g", "m1", e1 - 1 if e1 > 1 else 99, None, None, TOPICS, 5,
                     session_timeout_ms=45_000)
    assert r.error_code == ErrorCode.fenced_member_epoch
