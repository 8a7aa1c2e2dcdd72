"""The group coordinator loads a `__consumer_offsets` partition only once its log is committed.

A new leader's log can end with records the previous leader wrote but no write acknowledged
(an acks=all OffsetCommit still waiting for the followers). An election can still truncate
that tail away, so a coordinator answering from it could hand out offsets (or a group state)
that the next coordinator no longer has. `CoordinatorPartitionLoader` (shared with the
transaction coordinator) waits until the high watermark reaches the log end; requests get
COORDINATOR_LOAD_IN_PROGRESS meanwhile. Real logs and a real replica manager; time injected.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordinator.partition_log import CoordinatorPartitionLoader, ReplicaCoordinatorStorage
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.coordinator import GroupCoordinator
from wherry.group.group import OffsetAndMetadata, OffsetCommitter
from wherry.group.records import OFFSETS_TOPIC
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.protocol.interbroker import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from wherry.purgatory import DelayedOperationPurgatory, Timer
from wherry.replication.alter_partition import AlterPartitionManager
from wherry.replication.fetch_reads import FetchPartition, FetchResult
from wherry.replication.replica_manager import ReplicaManager

OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)
TP = TopicPartition("t", 0)
NOW = 1_000_000


def _replica_manager(tmp_path: Path) -> tuple[LogManager, ReplicaManager]:
    lm = LogManager([tmp_path], LogConfig(), lambda: NOW)
    lm.startup()
    cfg = LogConfig()
    rm = ReplicaManager(
        1, lm, lambda _: cfg,
        DelayedOperationPurgatory("Produce", Timer(start_ms=NOW)),
        DelayedOperationPurgatory("Fetch", Timer(start_ms=NOW)),
        lambda: NOW, replica_lag_time_max_ms=30_000,
        alter_partition_manager=AlterPartitionManager(1, lambda: 100),
        is_broker_alive=lambda b: True, broker_epoch=lambda: 100,
    )
    return lm, rm


def _lead(rm: ReplicaManager, epoch: int) -> None:
    st = LeaderAndIsrPartitionState(OFFSETS_TOPIC, 0, 1, 1, epoch, (1, 2), epoch, (1, 2))
    rm.become_leader_or_follower(
        LeaderAndIsrRequest(0, 1, 0, (st,), {OFFSETS_TOPIC: uuid.UUID(int=7)}, ()), NOW
    )


def _follower_caught_up(rm: ReplicaManager, offset: int) -> None:
    """Broker 2 fetches from `offset`: the leader learns it has everything before it."""
    out: list[FetchResult] = []
    rm.fetch_messages(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                      partitions=[FetchPartition(OFFSETS_TP, offset, 1 << 20, -1, 0)],
                      respond=out.append, replica_epoch=100)
    assert len(out) == 1


def _coordinator(rm: ReplicaManager) -> GroupCoordinator:
    storage = ReplicaCoordinatorStorage(rm, OFFSETS_TOPIC, lambda: NOW, timeout_ms=30_000)
    coord = GroupCoordinator(1, GroupCoordinatorConfig(offsets_topic_num_partitions=1),
                             storage, now_ms=NOW)
    coord.startup()
    return coord


def _commit(coord: GroupCoordinator, offset: int) -> list[object]:
    answers: list[object] = []
    coord.handle_commit_offsets(
        OffsetCommitter("g"), {TP: OffsetAndMetadata(offset, -1, "", NOW)}, answers.append, NOW
    )
    return answers


def _new_leader(rm: ReplicaManager) -> tuple[GroupCoordinator, CoordinatorPartitionLoader]:
    """Leader epoch 2 (as after an election that kept this replica) and its new coordinator,
    told by the leadership listener."""
    _lead(rm, 2)
    coord = _coordinator(rm)
    loader = CoordinatorPartitionLoader(OFFSETS_TOPIC, coord, rm, lambda: NOW, buffer_bytes=1 << 20)
    loader.on_leadership_change([(OFFSETS_TP, 2)], [])
    return coord, loader


def test_new_leader_answers_only_once_its_tail_is_committed(tmp_path: Path) -> None:
    lm, rm = _replica_manager(tmp_path)

    async def run() -> None:
        # The previous coordinator (leader epoch 1): offset 10 committed and acknowledged,
        # offset 20 appended but not yet replicated (its acks=all commit is still waiting).
        _lead(rm, 1)
        old = _coordinator(rm)
        assert old.begin_loading(0, 1) and old.load_partition(0, [], now_ms=NOW, epoch=1)
        first = _commit(old, 10)
        part = rm.get_partition(OFFSETS_TP)
        assert part is not None
        _follower_caught_up(rm, part.log.log_end_offset)
        assert first and part.high_watermark == part.log.log_end_offset
        second = _commit(old, 20)
        assert second == [] and part.high_watermark < part.log.log_end_offset
        old.shutdown()

        # A new leader epoch: its coordinator must not serve the uncommitted tail.
        coord, _ = _new_leader(rm)
        await asyncio.sleep(0.3)
        assert coord.is_partition_loading(0)
        err, _ = coord.handle_fetch_offsets("g", False, [TP])
        assert err == ErrorCode.coordinator_load_in_progress
        assert _commit(coord, 30) == [{TP: ErrorCode.coordinator_load_in_progress}]

        # The follower catches up: the high watermark reaches the log end, the tail is
        # committed and the coordinator loads it.
        _follower_caught_up(rm, part.log.log_end_offset)
        assert part.high_watermark == part.log.log_end_offset
        for _ in range(40):
            if not coord.is_partition_loading(0):
                break
            await asyncio.sleep(0.05)
        assert not coord.is_partition_loading(0)
        err, parts = coord.handle_fetch_offsets("g", False, [TP])
        assert err == ErrorCode.none and parts[TP].offset == 20
        coord.shutdown()

    try:
        asyncio.run(run())
    finally:
        lm.shutdown()


def test_a_truncated_tail_is_never_served(tmp_path: Path) -> None:
    """The new leader loses leadership before its tail is committed (another replica without
    the tail is elected and this log is truncated): nothing was loaded from that tail."""
    lm, rm = _replica_manager(tmp_path)

    async def run() -> None:
        _lead(rm, 1)
        old = _coordinator(rm)
        assert old.begin_loading(0, 1) and old.load_partition(0, [], now_ms=NOW, epoch=1)
        assert _commit(old, 20) == []  # never acknowledged
        old.shutdown()
        coord, loader = _new_leader(rm)
        await asyncio.sleep(0.2)
        assert coord.is_partition_loading(0)
        loader.on_leadership_change([], [OFFSETS_TP])
        await asyncio.sleep(0.1)
        assert not coord.is_partition_loading(0) and coord.owned_partitions() == set()
        err, _ = coord.handle_fetch_offsets("g", False, [TP])
        assert err == ErrorCode.not_coordinator
        assert not loader._tasks

    try:
        asyncio.run(run())
    finally:
        lm.shutdown()
