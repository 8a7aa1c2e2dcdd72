"""The share coordinator in the broker (KIP-932): the persisted state of share-partitions in
the internal `__share_group_state` topic.

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
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import RecordError, build_batch, iter_batches, iter_records
from wherry.replication.coordinator_log import read_partition_log
from wherry.replication.node import ReplicaNode
from wherry.replication.replica_manager import ProduceResult
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminManager
from wherry.server.internal_topics import InternalTopic
from wherry.share.config import ShareBrokerConfig
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

__all__ = ["ShareCoordinatorRuntime"]


class ShareCoordinatorRuntime:
    def __init__(
        self,
        broker_id: int,
        config: ShareBrokerConfig,
        clock: Clock,
        node: ReplicaNode,
        admin: Callable[[], AdminManager],
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.clock = clock
        self.node = node
        self.store = ShareStateStore()
        self.loaded: dict[int, int] = {}  # partition -> leader epoch loaded at
        self.loading: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._prefix = f"[ShareCoordinator id={broker_id}]"
        self.topic = InternalTopic(
            SHARE_STATE_TOPIC,
            node.cache,
            admin,
            partitions=config["share.coordinator.state.topic.num.partitions"],
            replication_factor=config["share.coordinator.state.topic.replication.factor"],
            configs={
                "cleanup.policy": "compact",
                "min.insync.replicas": str(config["share.coordinator.state.topic.min.isr"]),
                "segment.bytes": str(config["share.coordinator.state.topic.segment.bytes"]),
            },
            prefix=self._prefix,
        )

    # --- leadership ---------------------------------------------------------------------
    def on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        for tp in lost:
            if tp.topic == SHARE_STATE_TOPIC:
                self.loaded.pop(tp.partition, None)
                self.loading.discard(tp.partition)
                self.store.unload(tp.partition)
        for tp, epoch in became_leader:
            if tp.topic != SHARE_STATE_TOPIC:
                continue
            self.loaded.pop(tp.partition, None)
            self.store.unload(tp.partition)
            self.loading.add(tp.partition)
            task = asyncio.get_running_loop().create_task(
                self._load(tp.partition, epoch), name=f"load-{SHARE_STATE_TOPIC}-{tp.partition}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _load(self, partition: int, epoch: int) -> None:
        tp = TopicPartition(SHARE_STATE_TOPIC, partition)
        loop = asyncio.get_running_loop()
        while partition in self.loading:
            part = self.node.replica_manager.get_partition(tp)
            if part is None or not part.is_leader or part.leader_epoch != epoch:
                self.loading.discard(partition)
                return
            if part.high_watermark < part.log.log_end_offset:
                await asyncio.sleep(0.05)  # wait for the followers: no unreplicated tail
                continue
            try:
                chunks = await loop.run_in_executor(
                    None, read_partition_log, self.node.replica_manager, SHARE_STATE_TOPIC,
                    partition, 5 * 1024 * 1024,
                )
            except Exception:
                log.exception("%s Error loading %s; retrying", self._prefix, tp)
                await asyncio.sleep(0.5)
                continue
            if partition not in self.loading:
                return
            records: list[tuple[bytes | None, bytes | None]] = []
            for chunk in chunks:
                try:
                    for pos, h in iter_batches(chunk):
                        if h.is_control:
                            continue
                        records.extend((r.key, r.value) for r in iter_records(chunk, pos))
                except RecordError:
                    log.warning("%s unreadable batch in %s", self._prefix, tp)
            n = self.store.load(partition, records)
            self.loading.discard(partition)
            self.loaded[partition] = epoch
            log.info("%s Loaded %s (%d share-partition states)", self._prefix, tp, n)
            return

    async def stop(self) -> None:
        self.topic.cancel()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass

    # --- requests -----------------------------------------------------------------------
    def partition_count(self) -> int:
        n = len(self.node.cache.partitions(SHARE_STATE_TOPIC))
        return n or self.config["share.coordinator.state.topic.num.partitions"]

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
        err, _ = self.owner_check(key)
        if err != ErrorCode.none:
            return err, None
        fenced = self.store.fence_read(key, leader_epoch)
        if fenced is not None:
            err = await self.write(key, fenced)
            if err != ErrorCode.none:
                return err, None
        return self.store.read(key, leader_epoch)

    async def delete(self, key: ShareKey) -> ErrorCode:
        """DeleteShareGroupState: the state goes, its state epoch moves on (share/state.py's
        deletion marker fences the leaders that still hold the old share-partition)."""
        err, _ = self.owner_check(key)
        if err != ErrorCode.none:
            return err
        marker = self.store.deletion_marker(key)
        if marker is None:
            return ErrorCode.none
        return await self.write(key, marker, check=False)

    def summary(self, key: ShareKey) -> tuple[ErrorCode, ShareState | None]:
        err, _ = self.owner_check(key)
        if err != ErrorCode.none:
            return err, None
        return self.store.read(key, -1)

    async def write(
        self, key: ShareKey, state: ShareState | None, *, check: bool = True
    ) -> ErrorCode:
        """Persist a share-partition's state (None: a tombstone), acks=all, then apply it."""
        err, p = self.owner_check(key)
        if err != ErrorCode.none:
            return err
        if state is not None and check:
            err = self.store.check_write(key, state)
            if err != ErrorCode.none:
                return err
        value = None if state is None else encode_value(state)
        batch = build_batch([(encode_key(key), value)], timestamp_ms=self.clock.now_ms())
        tp = TopicPartition(SHARE_STATE_TOPIC, p)
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def respond(result: ProduceResult) -> None:
            st = result.get(tp)
            code = ErrorCode.unknown_topic_or_partition if st is None else st.error_code
            if not fut.done():
                fut.set_result(code)

        self.node.replica_manager.append_records(
            timeout_ms=self.config["share.coordinator.write.timeout.ms"],
            required_acks=-1,
            entries={tp: batch},
            respond=respond,
            now_ms=self.clock.now_ms(),
            from_coordinator=True,
        )
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
