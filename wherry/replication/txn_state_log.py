"""The transaction coordinator on a replica node: `__transaction_state` as its storage and
the partitions it loads as their leadership moves. The broker (`server/transactions.py`) and
the simulation (`sim/transactions.py`) both run these, each with its own executor policy.

* `ReplicaTxnStorage`: one acks=-1 batch per coordinator append, through the replica manager.
* `TxnPartitionLoader`: the replica node's leadership listener for `__transaction_state`: a
  partition this broker becomes leader of is loaded from its log once that log is committed
  (its high watermark at its end: a tail the previous leader wrote but never acknowledged can
  still be truncated by an election, and a coordinator acting on it sent markers of a
  transaction state the next coordinator no longer had); requests for its transactional ids
  get COORDINATOR_LOAD_IN_PROGRESS meanwhile; transactions found in PrepareCommit/PrepareAbort
  resume their markers. One it stops leading is unloaded (NOT_COORDINATOR). The partition's
  leader epoch is the coordinator epoch.
* `read_partition_log`: a whole internal partition's log in chunks of batches (also what the
  group coordinator loads `__consumer_offsets` from).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import build_batch, iter_batches
from wherry.replication.replica_manager import ProduceResult, ReplicaManager
from wherry.txn.coordinator import TransactionCoordinator
from wherry.txn.records import TRANSACTION_STATE_TOPIC
from wherry.txn.storage import AppendDone, Record

log = logging.getLogger(__name__)

__all__ = ["ReplicaTxnStorage", "TxnPartitionLoader", "read_partition_log"]

T = TypeVar("T")
COMMIT_POLL_S = 0.05
Blocking = Callable[[Callable[[], T]], Awaitable[T]]


def read_partition_log(
    replica_manager: ReplicaManager, topic: str, partition: int, buffer_bytes: int
) -> list[bytes]:
    """The whole log of `<topic>-<partition>` to its end, in chunks of batches."""
    part = replica_manager.get_partition(TopicPartition(topic, partition))
    if part is None:
        return []
    plog = part.log
    offset = plog.log_start_offset
    end = plog.log_end_offset
    chunks: list[bytes] = []
    while offset < end:
        data = plog.read(offset, max_bytes=buffer_bytes, max_offset=end, min_one_message=True)
        if not data:
            break
        last = None
        for _, header in iter_batches(data):
            last = header
        if last is None:
            break
        chunks.append(bytes(data))
        offset = last.next_offset
    return chunks


class ReplicaTxnStorage:
    """`TxnStorage` on the replica manager: one acks=-1 batch per append."""

    def __init__(
        self, replica_manager: ReplicaManager, now_ms: Callable[[], int], *, timeout_ms: int
    ) -> None:
        self._rm = replica_manager
        self._now_ms = now_ms
        self._timeout_ms = timeout_ms

    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        now = self._now_ms()
        batch = build_batch(list(records), timestamp_ms=now)

        def respond(result: ProduceResult) -> None:
            st = result.get(tp)
            if st is None:
                done(ErrorCode.unknown_topic_or_partition, -1)
            else:
                done(st.error_code, st.base_offset)

        self._rm.append_records(
            timeout_ms=self._timeout_ms,
            required_acks=-1,
            entries={tp: batch},
            respond=respond,
            now_ms=now,
        )


async def _inline(fn: Callable[[], T]) -> T:
    return fn()


class TxnPartitionLoader:
    """Loads and unloads the coordinator's `__transaction_state` partitions as the replica
    node's leadership listener (`ReplicaNode.leadership_listeners`)."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        replica_manager: ReplicaManager,
        now_ms: Callable[[], int],
        *,
        buffer_bytes: int,
        blocking: Blocking[list[bytes]] = _inline,
    ) -> None:
        self.coordinator = coordinator
        self._rm = replica_manager
        self._now_ms = now_ms
        self._buffer_bytes = buffer_bytes
        self._blocking = blocking
        self._tasks: set[asyncio.Task[None]] = set()
        self._prefix = f"[TransactionCoordinator id={coordinator.broker_id}]"

    def on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        """The replica node's leadership listener (on the event loop)."""
        for tp in lost:
            if tp.topic == TRANSACTION_STATE_TOPIC:
                self.coordinator.unload_partition(tp.partition)
        for tp, epoch in became_leader:
            if tp.topic == TRANSACTION_STATE_TOPIC and self.coordinator.begin_loading(
                tp.partition, epoch
            ):
                task = asyncio.get_running_loop().create_task(
                    self._load(tp.partition, epoch), name=f"load-{tp}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _load(self, partition: int, epoch: int) -> None:
        coord = self.coordinator
        delay_s = 0.1
        while coord.is_partition_loading(partition) and not self.tail_committed(partition):
            await asyncio.sleep(COMMIT_POLL_S)
        while coord.is_partition_loading(partition):
            try:
                chunks = await self._blocking(
                    lambda: read_partition_log(
                        self._rm, TRANSACTION_STATE_TOPIC, partition, self._buffer_bytes
                    )
                )
                coord.load_partition(partition, chunks, now_ms=self._now_ms(), epoch=epoch)
                return
            except Exception:
                log.exception(
                    "%s Error loading %s-%d; retrying",
                    self._prefix,
                    TRANSACTION_STATE_TOPIC,
                    partition,
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)

    def tail_committed(self, partition: int) -> bool:
        """Whether the whole log of `__transaction_state-<partition>` is committed (its high
        watermark at its end). A new leader's log may end with records of the previous
        leader that no write acknowledged and that an election can still truncate away; the
        coordinator loads (and answers from) that state only once the ISR holds all of it.
        While loading nothing is appended, so the end does not move."""
        part = self._rm.get_partition(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        return part is None or part.high_watermark >= part.log.log_end_offset

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the loads in progress; returns their tasks (to await)."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        return tasks
