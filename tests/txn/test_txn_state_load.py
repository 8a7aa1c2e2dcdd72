"""Loading a `__transaction_state` partition on a new leader (`CoordinatorPartitionLoader`).

A new leader's log can end with records of the previous leader that no write acknowledged
(the old leader answered NOT_COORDINATOR or timed out). An election can still truncate them
away (another in-sync replica without them becomes leader). The coordinator must not load, and
act on, that tail before it is committed: an unacknowledged PrepareCommit loaded from it sent
COMMIT markers to some partitions, and the next coordinator, without it, aborted the others
(sim seed 268); an unacknowledged AddPartitionsToTxn loaded from it let the producer write to a
partition the coordinator later forgot, and a later epoch's COMMIT marker exposed that aborted
data (seed 577).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from tests.txn.test_txn_coordinator import T0, T1, Harness, MemMarkers, MemStorage
from wherry.common.topic_partition import TopicPartition
from wherry.coordinator.partition_log import CoordinatorPartitionLoader
from wherry.protocol.records import build_batch
from wherry.replication.replica_manager import ReplicaManager
from wherry.txn.coordinator import TransactionCoordinator, TxnCoordinatorConfig
from wherry.txn.metadata import TxnState

S = TxnState


class _Log:
    def __init__(self, end: int) -> None:
        self.log_start_offset = 0
        self.log_end_offset = end


class _Partition:
    def __init__(self, end: int, hw: int) -> None:
        self.log = _Log(end)
        self.high_watermark = hw


class _ReplicaManager:
    def __init__(self, part: _Partition) -> None:
        self.part = part

    def get_partition(self, tp: TopicPartition) -> _Partition | None:
        return self.part


def _prepared_commit_log() -> bytes:
    """A partition log whose last record is PrepareCommit of t-0 and t-1."""
    h = Harness()
    pid, epoch = h.init()[1:]
    h.add(pid, epoch, T0, T1)
    h.end(pid, epoch, True)
    return build_batch(list(h.storage.log[0]))


def test_loader_waits_until_the_log_it_loads_is_committed() -> None:
    async def run() -> None:
        markers = MemMarkers()
        coord = TransactionCoordinator(
            2,
            TxnCoordinatorConfig(transaction_state_log_num_partitions=1),
            MemStorage(),
            markers,
            now_ms=0,
        )
        part = _Partition(end=3, hw=1)  # the PrepareCommit is above the high watermark
        chunks = [_prepared_commit_log()]

        async def blocking(fn: Callable[[], Any]) -> list[bytes]:
            return chunks

        loader = CoordinatorPartitionLoader(
            "__transaction_state",
            coord,
            cast(ReplicaManager, _ReplicaManager(part)),
            lambda: 0,
            buffer_bytes=1 << 20,
            blocking=blocking,
        )
        loader.on_leadership_change([(TopicPartition("__transaction_state", 0), 7)], [])
        await asyncio.sleep(0.2)
        # Not loaded: requests get COORDINATOR_LOAD_IN_PROGRESS, no marker goes out.
        assert coord.is_partition_loading(0)
        assert markers.sent == []
        part.high_watermark = 3  # the ISR has the whole log now
        await asyncio.sleep(0.2)
        assert not coord.is_partition_loading(0)
        txn = coord.transaction("tx")
        assert txn is not None and txn.state is S.PREPARE_COMMIT
        [pending] = markers.sent
        assert pending.commit and pending.partitions == {T0, T1}

    asyncio.run(run())


def test_a_loss_of_leadership_while_waiting_abandons_the_load() -> None:
    async def run() -> None:
        coord = TransactionCoordinator(
            2,
            TxnCoordinatorConfig(transaction_state_log_num_partitions=1),
            MemStorage(),
            MemMarkers(),
            now_ms=0,
        )
        part = _Partition(end=3, hw=1)

        async def blocking(fn: Callable[[], Any]) -> list[bytes]:
            raise AssertionError("read a log it no longer leads")

        loader = CoordinatorPartitionLoader(
            "__transaction_state",
            coord,
            cast(ReplicaManager, _ReplicaManager(part)),
            lambda: 0,
            buffer_bytes=1 << 20,
            blocking=blocking,
        )
        tp = TopicPartition("__transaction_state", 0)
        loader.on_leadership_change([(tp, 7)], [])
        await asyncio.sleep(0.1)
        loader.on_leadership_change([], [tp])
        await asyncio.sleep(0.2)
        assert not coord.is_partition_loading(0) and coord.owned_partitions() == set()
        assert not loader._tasks

    asyncio.run(run())
