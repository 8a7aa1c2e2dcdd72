"""TxnOffsetCommit: transactional offsets pending until their marker (Kafka's
GroupMetadataManager pending transactional offsets), in memory and after a reload."""

from __future__ import annotations

from group_harness import T0, Harness, MemoryOffsetsLog
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.coordinator import GroupCoordinator
from wherry.group.group import OffsetAndMetadata, OffsetCommitter
from wherry.group.storage import ProducerIdAndEpoch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def txn_commit(
    h: Harness,
    group: str,
    pid: int,
    offsets: dict[TopicPartition, int],
    *,
    member_id: str = "",
    generation: int = -1,
) -> dict[TopicPartition, ErrorCode]:
    got: list[dict[TopicPartition, ErrorCode]] = []
    h.coord.handle_txn_commit_offsets(
        OffsetCommitter(group, member_id, None, generation),
        ProducerIdAndEpoch(pid, 0),
        {tp: OffsetAndMetadata(o, -1, "", h.now) for tp, o in offsets.items()},
        got.append,
        h.now,
    )
    assert got
    return got[0]


def fetch(
    coord: GroupCoordinator, group: str, require_stable: bool
) -> dict[TopicPartition, tuple[int, ErrorCode]]:
    err, parts = coord.handle_fetch_offsets(group, require_stable, [TP0, TP1])
    assert err == ErrorCode.none
    return {tp: (p.offset, p.error) for tp, p in parts.items()}


def reload(h: Harness) -> GroupCoordinator:
    coord = GroupCoordinator(1, h.config, MemoryOffsetsLog(), now_ms=h.now)
    coord.startup()
    assert coord.begin_loading(0, epoch=5)
    assert coord.load_partition(0, h.log.batches.get(0, []), now_ms=h.now, epoch=5)
    return coord


def test_pending_until_commit_marker_then_visible() -> None:
    h = Harness()
    h.commit("g", {TP0: 5})
    assert txn_commit(h, "g", 7, {TP0: 10, TP1: 11}) == {TP0: ErrorCode.none, TP1: ErrorCode.none}
    assert fetch(h.coord, "g", True) == {
        TP0: (-1, ErrorCode.unstable_offset_commit),
        TP1: (-1, ErrorCode.unstable_offset_commit),
    }
    assert fetch(h.coord, "g", False) == {TP0: (5, ErrorCode.none), TP1: (-1, ErrorCode.none)}
    h.log.write_marker(0, 7, commit=True)
    h.coord.on_transaction_completed(7, [0], True)
    assert fetch(h.coord, "g", True) == {TP0: (10, ErrorCode.none), TP1: (11, ErrorCode.none)}
    # After a reload the log says the same.
    assert fetch(reload(h), "g", True) == {TP0: (10, ErrorCode.none), TP1: (11, ErrorCode.none)}


def test_abort_drops_and_open_stays_pending_across_reload() -> None:
    h = Harness()
    h.commit("g", {TP0: 5})
    txn_commit(h, "g", 8, {TP0: 50})
    h.log.write_marker(0, 8, commit=False)
    h.coord.on_transaction_completed(8, [0], False)
    assert fetch(h.coord, "g", True)[TP0] == (5, ErrorCode.none)
    txn_commit(h, "g", 9, {TP1: 90})  # no marker yet
    coord = reload(h)
    assert fetch(coord, "g", True) == {
        TP0: (5, ErrorCode.none),
        TP1: (-1, ErrorCode.unstable_offset_commit),
    }
    # The marker arrives at the new coordinator.
    coord.on_transaction_completed(9, [0], True)
    assert fetch(coord, "g", True)[TP1] == (90, ErrorCode.none)


def test_generation_and_member_checks() -> None:
    h = Harness()
    ids = h.stable_group("g", 1)
    # A producer outside group management: allowed although the group has members.
    assert txn_commit(h, "g", 1, {TP0: 1}) == {TP0: ErrorCode.none}
    assert txn_commit(h, "g", 1, {TP0: 2}, member_id="nobody", generation=1) == {
        TP0: ErrorCode.unknown_member_id
    }
    assert txn_commit(h, "g", 1, {TP0: 3}, member_id=ids[0], generation=99) == {
        TP0: ErrorCode.illegal_generation
    }
    gen = h.coord.group("g").generation_id  # type: ignore[union-attr]
    assert txn_commit(h, "g", 1, {TP0: 4}, member_id=ids[0], generation=gen) == {
        TP0: ErrorCode.none
    }
    assert h.now >= T0
