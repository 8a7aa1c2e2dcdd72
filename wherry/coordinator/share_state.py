"""The share coordinator (KIP-932) on the coordinator runtime: the persisted state of
share-partitions in the internal `__share_group_state` topic.

The leader of `__share_group_state-<p>` coordinates every share-partition key
(`group:topicId:partition`) that hashes to `p`: it loads the partition when it becomes its
leader (once the high watermark reaches the log end, so no unreplicated tail is acted on;
requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS), answers the share-coordinator APIs
(Initialize/Read/Write/Delete/ReadSummary ShareGroupState) from `share.state.ShareStateStore`,
and appends each change as one record with acks=all before it answers, so a write a
share-partition leader was told succeeded survives the coordinator's failover. Other brokers
get NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.partition_loads import begin_load
from wherry.coordinator.partition_log import Blocking, inline
from wherry.coordinator.runtime import CoordinatorRuntime
from wherry.protocol.records import RecordError, iter_batches, iter_records
from wherry.replication.node import ReplicaNode
from wherry.share.state import (
    SHARE_STATE_TOPIC,
    ShareKey,
    ShareState,
    ShareStateStore,
    encode_key,
    encode_value,
    state_partition_for,
)

log = logging.getLogger(__name__)

__all__ = ["ShareStateCoordinator"]


@dataclass(slots=True)
class _Held:
    lock: asyncio.Lock
    users: int = 0


class ShareStateCoordinator:
    """A replica node's share coordinator and its runtime."""

    def __init__(
        self,
        broker_id: int,
        node: ReplicaNode,
        now_ms: Callable[[], int],
        *,
        partitions: int,
        timeout_ms: int,
        buffer_bytes: int = 5 * 1024 * 1024,
        blocking: Blocking[list[bytes]] = inline,
    ) -> None:
        self.node = node
        self.default_partitions = partitions  # until the topic exists
        self.store = ShareStateStore()
        self.loaded: dict[int, int] = {}  # partition -> leader epoch loaded at
        # one change of a key at a time: a write is checked against the state the one before
        # it left (a read's fencing write included), not a state still being replicated
        self._key_locks: dict[ShareKey, _Held] = {}
        self.loading: dict[int, int] = {}
        self._prefix = f"[ShareCoordinator id={broker_id}]"
        self.runtime = CoordinatorRuntime(
            SHARE_STATE_TOPIC,
            node,
            now_ms,
            timeout_ms=timeout_ms,
            buffer_bytes=buffer_bytes,
            blocking=blocking,
            prefix=self._prefix,
        )
        self.runtime.serve(self)

    # --- loading (the runtime's PartitionCoordinator) -------------------------------------
    def begin_loading(self, partition: int, epoch: int) -> bool:
        return begin_load(self.loaded, self.loading, partition, epoch, self.unload_partition)

    def is_partition_loading(self, partition: int) -> bool:
        return partition in self.loading

    def load_partition(
        self, partition: int, chunks: Iterable[bytes], *, now_ms: int, epoch: int
    ) -> bool:
        if self.loading.get(partition) != epoch:
            return False
        records: list[tuple[bytes | None, bytes | None]] = []
        for chunk in chunks:
            try:
                for pos, h in iter_batches(chunk):
                    if not h.is_control:
                        records.extend((r.key, r.value) for r in iter_records(chunk, pos))
            except RecordError:
                log.warning("%s unreadable batch in %s-%d", self._prefix, SHARE_STATE_TOPIC,
                            partition)
        n = self.store.load(partition, records)
        del self.loading[partition]
        self.loaded[partition] = epoch
        log.info("%s Loaded %s-%d (%d share-partition states)", self._prefix, SHARE_STATE_TOPIC,
                 partition, n)
        return True

    def unload_partition(self, partition: int) -> None:
        self.loading.pop(partition, None)
        self.loaded.pop(partition, None)
        self.store.unload(partition)

    async def stop(self) -> None:
        await self.runtime.stop()

    # --- requests -----------------------------------------------------------------------
    def partition_count(self) -> int:
        n = len(self.node.cache.partitions(SHARE_STATE_TOPIC))
        return n or self.default_partitions

    def owner_check(self, key: ShareKey) -> tuple[ErrorCode, int]:
        """(error, `__share_group_state` partition) for a key this broker should serve."""
        p = state_partition_for(key, self.partition_count())
        if p in self.loading:
            return ErrorCode.coordinator_load_in_progress, p
        if p not in self.loaded:
            return ErrorCode.not_coordinator, p
        return ErrorCode.none, p

    async def read(
        self, key: ShareKey, leader_epoch: int
    ) -> tuple[ErrorCode, ShareState | None]:
        """ReadShareGroupState: a read with a newer leader epoch first writes that epoch
        (Kafka's readStateAndMaybeUpdateLeaderEpoch), so the previous leader's writes are
        fenced from then on, across coordinator failovers too."""
        async with self._lock(key):
            err, _ = self.owner_check(key)
            if err != ErrorCode.none:
                return err, None
            fenced = self.store.fence_read(key, leader_epoch)
            if fenced is not None:
                err = await self._write(key, fenced, check=True)
                if err != ErrorCode.none:
                    return err, None
            return self.store.read(key, leader_epoch)

    async def delete(self, key: ShareKey) -> ErrorCode:
        """DeleteShareGroupState: the state goes, its state epoch moves on (share/state.py's
        deletion marker fences the leaders that still hold the old share-partition)."""
        async with self._lock(key):
            err, _ = self.owner_check(key)
            if err != ErrorCode.none:
                return err
            marker = self.store.deletion_marker(key)
            if marker is None:
                return ErrorCode.none
            return await self._write(key, marker, check=False)

    def summary(self, key: ShareKey) -> tuple[ErrorCode, ShareState | None]:
        err, _ = self.owner_check(key)
        if err != ErrorCode.none:
            return err, None
        return self.store.read(key, -1)

    async def write(self, key: ShareKey, state: ShareState) -> ErrorCode:
        """WriteShareGroupState: persist a share-partition's state, acks=all, then apply it."""
        async with self._lock(key):
            return await self._write(key, state, check=True)

    @asynccontextmanager
    async def _lock(self, key: ShareKey) -> AsyncIterator[None]:
        """Hold `key` (the lock is dropped once nobody holds or waits for it)."""
        held = self._key_locks.get(key)
        if held is None:
            held = self._key_locks[key] = _Held(asyncio.Lock())
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._key_locks[key]

    async def _write(self, key: ShareKey, state: ShareState, *, check: bool) -> ErrorCode:
        err, p = self.owner_check(key)
        if err != ErrorCode.none:
            return err
        if check:
            err = self.store.check_write(key, state)
            if err != ErrorCode.none:
                return err
        value = encode_value(state)
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(code: ErrorCode, _base_offset: int) -> None:
            if not fut.done():
                fut.set_result(code)

        self.runtime.storage.append(p, [(encode_key(key), value)], done)
        code = await fut
        if code != ErrorCode.none:
            log.warning("%s write of %s failed: %s", self._prefix, key, code.name)
            if code in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
                return ErrorCode.not_coordinator
            return ErrorCode.coordinator_not_available
        if self.loaded.get(p) is None:  # lost leadership meanwhile
            return ErrorCode.not_coordinator
        self.store.apply(key, p, state)
        return ErrorCode.none

