"""A coordinator's internal topic on a replica node (`__consumer_offsets` for the group
coordinator, `__transaction_state` for the transaction coordinator, `__share_group_state` for
the share coordinator): its storage and the loading of the partitions it leads. The runtime
(`coordinator/runtime.py`) holds one of each per coordinator, in the broker and in the
simulation alike, each with its own executor policy.

* `ReplicaCoordinatorStorage`: one acks=-1 batch per coordinator append, through the replica
  manager, as the coordinator (Kafka's AppendOrigin.COORDINATOR); with a producer id, a
  transactional batch of that producer (TxnOffsetCommit).
* `CoordinatorPartitionLoader`: the replica node's leadership listener for one internal topic.
  A partition this broker becomes leader of is loaded from its log once that log is committed
  (its high watermark at its end): a tail the previous leader wrote but never acknowledged can
  still be truncated by an election, and a coordinator acting on it answered from a state the
  next coordinator no longer had (sim seeds 268 and 577 of the transactions world). Requests
  for the partition's groups or transactional ids get COORDINATOR_LOAD_IN_PROGRESS meanwhile.
  One it stops leading is unloaded (NOT_COORDINATOR). The partition's leader epoch is the
  coordinator epoch.
* `read_partition_log`: a whole internal partition's log in chunks of batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.storage import AppendDone, ProducerIdAndEpoch, Record
from wherry.protocol.records import build_batch, iter_batches
from wherry.replication.replica_manager import ProduceResult, ReplicaManager

log = logging.getLogger(__name__)

__all__ = [
    "CoordinatorPartitionLoader",
    "PartitionCoordinator",
    "ReplicaCoordinatorStorage",
    "in_executor",
    "inline",
    "read_partition_log",
]

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


class ReplicaCoordinatorStorage:
    """A coordinator's storage on the replica manager: one acks=-1 batch per append to
    `<topic>-<partition>` (the group coordinator's `OffsetsStorage`, the transaction
    coordinator's `TxnStorage`)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        topic: str,
        now_ms: Callable[[], int],
        *,
        timeout_ms: int,
    ) -> None:
        self._rm = replica_manager
        self.topic = topic
        self._now_ms = now_ms
        self._timeout_ms = timeout_ms

    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        now = self._now_ms()
        self._append(partition, build_batch(list(records), timestamp_ms=now), done, now)

    def append_transactional(
        self, partition: int, txn: ProducerIdAndEpoch, records: Sequence[Record], done: AppendDone
    ) -> None:
        # TxnOffsetCommit: Kafka writes sequence 0; coordinator appends skip the sequence
        # checks, not the epoch check.
        now = self._now_ms()
        batch = build_batch(
            list(records),
            timestamp_ms=now,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            base_sequence=0,
            is_transactional=True,
        )
        self._append(partition, batch, done, now)

    def _append(self, partition: int, batch: bytes, done: AppendDone, now: int) -> None:
        tp = TopicPartition(self.topic, partition)

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
            from_coordinator=True,
        )


class PartitionCoordinator(Protocol):
    """What the loader needs of a coordinator (`GroupCoordinator`, `TransactionCoordinator`,
    `ShareStateCoordinator`)."""

    def begin_loading(self, partition: int, epoch: int, /) -> bool:
        """Mark `partition` loading at leader epoch `epoch`; False if already done."""
        ...

    def is_partition_loading(self, partition: int, /) -> bool: ...

    def load_partition(self, partition: int, chunks: list[bytes], /, *, now_ms: int,
                       epoch: int) -> bool:
        """Replay the partition's log; False if leadership moved on meanwhile."""
        ...

    def unload_partition(self, partition: int, /) -> None: ...


async def inline(fn: Callable[[], T]) -> T:
    return fn()


async def in_executor(fn: Callable[[], T]) -> T:
    """Run the blocking `fn` in the event loop's default executor (the broker's policy for
    reading a log; the simulation reads inline)."""
    return await asyncio.get_running_loop().run_in_executor(None, fn)


class CoordinatorPartitionLoader:
    """Loads and unloads a coordinator's partitions of `topic` as the replica node's
    leadership listener (`ReplicaNode.leadership_listeners`)."""

    def __init__(
        self,
        topic: str,
        coordinator: PartitionCoordinator,
        replica_manager: ReplicaManager,
        now_ms: Callable[[], int],
        *,
        buffer_bytes: int,
        blocking: Blocking[list[bytes]] = inline,
        on_loaded: Callable[[int], None] | None = None,
        prefix: str = "",
    ) -> None:
        self.topic = topic
        self.coordinator = coordinator
        self._rm = replica_manager
        self._now_ms = now_ms
        self._buffer_bytes = buffer_bytes
        self._blocking = blocking
        self._on_loaded = on_loaded
        self._tasks: set[asyncio.Task[None]] = set()
        self._prefix = prefix

    def on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        """The replica node's leadership listener (on the event loop)."""
        for tp in lost:
            if tp.topic == self.topic:
                self.coordinator.unload_partition(tp.partition)
        for tp, epoch in became_leader:
            if tp.topic == self.topic and self.coordinator.begin_loading(tp.partition, epoch):
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
                    lambda: read_partition_log(self._rm, self.topic, partition, self._buffer_bytes)
                )
                loaded = coord.load_partition(
                    partition, chunks, now_ms=self._now_ms(), epoch=epoch
                )
            except Exception:
                # Keep answering COORDINATOR_LOAD_IN_PROGRESS rather than lose state.
                log.exception(
                    "%s Error loading %s-%d; retrying", self._prefix, self.topic, partition
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)
                continue
            if loaded:
                log.debug("%s Loaded %s-%d", self._prefix, self.topic, partition)
                if self._on_loaded is not None:  # outside the retries: its errors propagate
                    self._on_loaded(partition)
            return

    def tail_committed(self, partition: int) -> bool:
        """Whether the whole log of `<topic>-<partition>` is committed (its high watermark at
        its end). A new leader's log may end with records of the previous leader that no write
        acknowledged and that an election can still truncate away; the coordinator loads (and
        answers from) that state only once the ISR holds all of it. While loading the
        coordinator appends nothing, so the end does not move."""
        part = self._rm.get_partition(TopicPartition(self.topic, partition))
        return part is None or part.high_watermark >= part.log.log_end_offset

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel the loads in progress; returns their tasks (to await)."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        return tasks
