"""Loading a `__consumer_offsets` partition rebuilds the groups and offsets it was written from."""

from __future__ import annotations

from group_harness import T0, Harness, MemoryOffsetsLog
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.coordinator import GroupCoordinator, MemberIdentity
from wherry.group.loader import read_partition
from wherry.group.records import (
    GroupMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_offset_commit_value,
    group_metadata_key,
    offset_commit_key,
)
from wherry.group.state import GroupState
from wherry.protocol.records import build_batch, build_control_batch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def reload(h: Harness, now_ms: int | None = None) -> GroupCoordinator:
    """A fresh coordinator (a restarted broker, or a new leader) loading h's log."""
    coord = GroupCoordinator(1, h.config, MemoryOffsetsLog(), now_ms=now_ms or h.now)
    coord.startup()
    assert coord.begin_loading(0, epoch=5)
    assert coord.load_partition(0, h.log.batches.get(0, []), now_ms=now_ms or h.now, epoch=5)
    return coord


def test_restart_keeps_offsets_and_stable_group() -> None:
    h = Harness()
    ids = h.stable_group("g", 2)
    assert h.commit("g", {TP0: 10, TP1: (11, "m")}, member_id=ids[0], generation=2).commit == {
        TP0: ErrorCode.none, TP1: ErrorCode.none}
    h.commit("g", {TP0: 12}, member_id=ids[1], generation=2)  # a later commit wins
    h.commit("simple", {TP0: 3})
    coord = reload(h)
    g = coord.group("g")
    assert g is not None and g.state is GroupState.STABLE and g.generation_id == 2
    assert set(g.all_members()) == set(ids) and g.leader_id == ids[0]
    assert g.protocol_type == "consumer" and g.protocol_name == "range"
    assert g.get(ids[1]).assignment == f"assign-{ids[1]}".encode()
    assert g.subscribed_topics == frozenset({"t"})
    _, parts = coord.handle_fetch_offsets("g", False, None)
    assert {tp: (p.offset, p.metadata) for tp, p in parts.items()} == {
        TP0: (12, ""), TP1: (11, "m")}
    assert coord.handle_fetch_offsets("simple", False, [TP0])[1][TP0].offset == 3
    # Members carry on in their generation, and their sessions run again.
    coord.advance_clock(h.now + 5_000)
    assert coord.handle_heartbeat("g", ids[0], None, 2, h.now + 5_000) == ErrorCode.none
    coord.advance_clock(h.now + 10_001)
    assert g.size == 1 and g.state is GroupState.PREPARING_REBALANCE


def test_tombstones_delete_on_load() -> None:
    h = Harness()
    h.commit("a", {TP0: 1, TP1: 2})
    h.commit("b", {TP0: 5})
    assert h.coord.handle_delete_offsets("a", [TP1], h.now)[0] == ErrorCode.none
    assert h.coord.handle_delete_groups(["b"], h.now) == {"b": ErrorCode.none}
    [mid] = h.stable_group("c", 1)
    h.leave("c", MemberIdentity(mid))
    coord = reload(h)
    assert coord.handle_fetch_offsets("a", False, None)[1].keys() == {TP0}
    assert coord.group("b") is None
    c = coord.group("c")
    assert c is not None and c.state is GroupState.EMPTY and c.generation_id == 2


def test_empty_group_retention_survives_reload() -> None:
    h = Harness(offsets_retention_ms=60_000)
    [mid] = h.stable_group("g", 1)
    h.commit("g", {TP0: 1}, member_id=mid, generation=1)
    h.advance(9_000)
    assert h.heartbeat("g", mid, 1) == ErrorCode.none
    h.leave("g", MemberIdentity(mid))  # Empty since now (stored in the group record)
    h.advance(1)
    coord = reload(h, now_ms=h.now + 59_000)
    assert coord.cleanup_expired_offsets(h.now + 59_000) == 0
    assert coord.cleanup_expired_offsets(h.now + 60_000) == 1


def test_read_partition_last_value_wins_and_skips_junk() -> None:
    v1 = encode_offset_commit_value(OffsetCommitValue(1, -1, "", T0))
    v2 = encode_offset_commit_value(OffsetCommitValue(2, 3, "x", T0))
    gv = encode_group_metadata_value(GroupMetadataValue("consumer", 1, None, None, T0, ()))
    batches = [
        build_batch([(offset_commit_key("g", "t", 0), v1), (group_metadata_key("g"), gv)],
                    base_offset=0),
        build_batch([(b"\x7f\x00junk", b"x"), (None, b"nokey"), (b"\x00", b"short")],
                    base_offset=2),
        build_control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                            base_offset=5),
        build_batch([(offset_commit_key("g", "t", 0), v2)], base_offset=6)
        + build_batch([(group_metadata_key("g"), None), (group_metadata_key("h"), gv)],
                      base_offset=7),
    ]
    snap = read_partition(batches)
    assert snap.groups.keys() == {"h"} and snap.removed_groups == {"g"}
    c = snap.offsets["g"][TopicPartition("t", 0)]
    assert c.appended_batch_offset == 6
    assert (c.offset_and_metadata.committed_offset, c.offset_and_metadata.leader_epoch) == (2, 3)
    assert snap.skipped == 2  # the null key and the truncated key (key version 32512 is unknown)


def test_load_of_unparseable_group_is_skipped_not_fatal() -> None:
    bad = build_batch([(group_metadata_key("bad"), b"\x00\x09garbage")], base_offset=0)
    good = build_batch([(offset_commit_key("ok", "t", 0),
                         encode_offset_commit_value(OffsetCommitValue(7, -1, "", T0)))],
                       base_offset=1)
    coord = GroupCoordinator(0, GroupCoordinatorConfig(offsets_topic_num_partitions=1),
                             MemoryOffsetsLog(), now_ms=T0)
    coord.startup()
    assert coord.load_partition(0, [bad, good], now_ms=T0)
    assert coord.group("bad") is None
    assert coord.handle_fetch_offsets("ok", False, [TP0])[1][TP0].offset == 7
