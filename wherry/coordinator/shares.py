"""Share groups on a replica node (KIP-932): membership on the group coordinator,
share-partitions on the partition leaders, their state kept with the share coordinator
through the persister (`coordinator/share_persister.py`).

* Membership: the leader of a group's `__consumer_offsets` partition (the group coordinator,
  found with FindCoordinator as for any group) answers ShareGroupHeartbeat and
  ShareGroupDescribe from `share.group.ShareGroups`. What a heartbeat changes is written to
  `__consumer_offsets` (Kafka 4.1's share-group records, acks=all) before it is answered; the
  group coordinator's loader replays them (`on_share_groups_loaded`) when this broker
  becomes the partition's leader, so after a failover members keep their ids and epochs.
  Until the partition is loaded, heartbeats get COORDINATOR_LOAD_IN_PROGRESS.
* Share-partitions: the leader of a topic partition keeps one `share.partition.SharePartition`
  per share group that fetches it, and the share sessions (`share.sessions`). A share-partition
  is loaded from the share coordinator (ReadShareGroupState) the first time it is fetched;
  without a persisted state it starts at `share.auto.offset.reset` (latest: the high
  watermark, or the LSO at read_committed; earliest: the log start offset) and that start is
  written at once. Every acknowledgement is written (WriteShareGroupState, the whole in-flight
  state) before it is answered; a write that fails is answered with its error. Lock
  expiries, records archived at the delivery limit and a start moved past offsets never to be
  delivered (control batches, aborted transactions' records, the log start) are written in the
  background.
* Group configs (`/config/groups/<group>`, a GROUP config resource) are read from the store
  on first use and again after a `groups/<group>` change notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.coordinator.groups import GroupCoordinatorHost
from wherry.coordinator.share_persister import RETRIABLE, StatePersister
from wherry.group.records import OFFSETS_TOPIC, partition_for
from wherry.group.share_group_records import ShareGroupReplay
from wherry.group.storage import APPEND_ERRORS
from wherry.log.file_region import FileRegion
from wherry.protocol.records import iter_batches
from wherry.replication.fetch_reads import READ_COMMITTED, READ_UNCOMMITTED, FetchPartition
from wherry.replication.node import ReplicaNode
from wherry.replication.partition import Partition
from wherry.runtime.clock import Clock
from wherry.runtime.tasks import cancel_and_wait
from wherry.share.config import (
    GroupConfigError,
    ShareBrokerConfig,
    ShareGroupSettings,
    validate_group_config,
)
from wherry.share.fetched import fetched_batches
from wherry.share.group import ShareGroups, TopicInfo
from wherry.share.partition import (
    AckBatch,
    AckType,
    AcquiredRange,
    AcquireMode,
    SharePartition,
)
from wherry.share.sessions import ShareSession, ShareSessionCache
from wherry.share.state import ShareKey, ShareState

log = logging.getLogger(__name__)

__all__ = ["PartitionFetch", "ShareGroupsRuntime", "group_config_path"]

READ_CAP_BYTES = 1 << 20


def _overlapping(data: bytes | memoryview, acquired: Sequence[AcquiredRange]) -> bytes:
    """The batches of `data` holding an acquired record (the others stay on the broker)."""
    out = bytearray()
    for pos, h in iter_batches(data):
        if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset
               for r in acquired):
            out += data[pos : pos + h.size_in_bytes]
    return bytes(out)


def group_config_path(group: str) -> str:
    return f"/config/groups/{paths.sanitize(group)}"


@dataclass(slots=True)
class _Part:
    key: ShareKey
    tp: TopicPartition
    leader_epoch: int
    sp: SharePartition | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changes: int = 0  # changes made to `sp` that the share coordinator must be given
    written: int = 0  # how many of them the last successful write covered
    writer: bool = False  # a background write is running

    @property
    def unwritten(self) -> bool:
        return self.written < self.changes


@dataclass(slots=True)
class PartitionFetch:
    """One partition of a ShareFetch answer."""

    error_code: ErrorCode = ErrorCode.none
    ack_error_code: ErrorCode = ErrorCode.none
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    leader_id: int = -1
    leader_epoch: int = -1


class ShareGroupsRuntime:
    """A replica node's share groups: membership, share-partitions, share sessions."""

    def __init__(
        self,
        broker_id: int,
        config: ShareBrokerConfig,
        clock: Clock,
        node: ReplicaNode,
        store: Callable[[], MetadataStore],
        persister: StatePersister,
        offsets_partition_for: Callable[[str], int] | None = None,
    ) -> None:
        self.broker_id = broker_id
        # the group coordinator's placement (FindCoordinator's), so both agree
        self._offsets_partition_for = offsets_partition_for
        self.config = config
        self.clock = clock
        self.node = node
        self._store = store
        self.persister = persister
        self.groups = ShareGroups()
        self.sessions = ShareSessionCache()
        self.parts: dict[tuple[str, TopicPartition], _Part] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._bg: set[asyncio.Task[Any]] = set()
        self._stopped = False  # stopped or abandoned: no background work starts any more
        self._changed = asyncio.Event()
        self._prefix = f"[ShareRuntime id={broker_id}]"
        self._groups_rt: GroupCoordinatorHost | None = None

    def store(self) -> MetadataStore:
        return self._store()

    def attach_groups(self, groups: GroupCoordinatorHost) -> None:
        """Write share groups through the group coordinator's storage and rebuild them when
        it loads an offsets partition."""
        self._groups_rt = groups
        groups.coordinator.share_groups_loaded = self.on_share_groups_loaded

    def _offsets_partition(self, group: str) -> int:
        if self._offsets_partition_for is not None:
            return self._offsets_partition_for(group)
        return partition_for(group, len(self.node.cache.partitions(OFFSETS_TOPIC)))

    def on_share_groups_loaded(self, partition: int, replay: ShareGroupReplay) -> None:
        n = self.groups.load(
            replay.groups,
            lambda g: self._offsets_partition(g) == partition,
            self.clock.now_ms(),
            self.config["group.share.session.timeout.ms"],
        )
        if n:
            log.info("%s loaded %d share groups of %s-%d", self._prefix, n, OFFSETS_TOPIC,
                     partition)

    async def persist_group(self, group_id: str) -> ErrorCode:
        """Append what changed in the group's records; the write's error, as a heartbeat
        answers it."""
        group = self.groups.groups.get(group_id)
        rt = self._groups_rt
        if group is None or rt is None:
            return ErrorCode.none
        records = group.changes()
        if not records:
            return ErrorCode.none
        return await self._append(group_id, records, group.unwritten)

    async def _append(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        on_error: Callable[[], None],
    ) -> ErrorCode:
        assert self._groups_rt is not None
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(error: ErrorCode, _base: int) -> None:
            if not fut.done():
                fut.set_result(error)

        self._groups_rt.storage.append(self._offsets_partition(group_id), records, done)
        err = await fut
        if err != ErrorCode.none:
            log.warning("%s writing share group %s failed: %s", self._prefix, group_id, err.name)
            on_error()
            return APPEND_ERRORS.get(err, err)
        return ErrorCode.none

    def _persist_group_later(self, group_id: str) -> None:
        if self._stopped:
            return
        task = asyncio.get_running_loop().create_task(self.persist_group(group_id))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick(), name="share-ticker")

    def abandon(self) -> None:
        """The process dies: its background work stops at once, its share-partitions go."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
        for t in list(self._bg):
            t.cancel()
        self.parts.clear()

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await cancel_and_wait(self._task)
        for t in list(self._bg):
            t.cancel()
        self.persister.close()

    async def _tick(self) -> None:
        """Lock expiry (at the earliest lock deadline, checked at least every second: a lock
        lasts 1 s at least, so one taken meanwhile cannot expire unseen), member session
        expiry and idle share sessions (every second)."""
        last_second = self.clock.now_ms()
        delay_s = 1.0
        while True:
            await asyncio.sleep(delay_s)
            try:
                now = self.clock.now_ms()
                earliest: int | None = None
                for entry in list(self.parts.values()):
                    if entry.sp is None:
                        continue
                    if entry.sp.expire_locks(now):
                        self._persist_later(entry)
                        self._changed.set()
                    d = entry.sp.next_deadline()
                    if d is not None and (earliest is None or d < earliest):
                        earliest = d
                if now - last_second >= 1_000:
                    last_second = now
                    for g, m in self.groups.expire(now):
                        log.info("%s member %s of share group %s expired", self._prefix, m, g)
                        self.member_left(g, m)
                        self._persist_group_later(g)
                    for s in self.sessions.evict(now):
                        self._release_session(s)
                delay_s = 1.0 if earliest is None else min(1.0, max(0.02, (earliest - now) / 1e3))
            except Exception:
                log.exception("%s share ticker", self._prefix)
                delay_s = 1.0

    def on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        gone = {tp for tp in lost} | {tp for tp, _ in became_leader}
        for k in [k for k in self.parts if k[1] in gone]:
            del self.parts[k]
        # share groups of an offsets partition this broker no longer leads: their members
        # join the new coordinator
        if any(tp.topic == OFFSETS_TOPIC for tp in lost):
            for g in [
                g for g in self.groups.groups
                if self.coordinator_error(g) == ErrorCode.not_coordinator
            ]:
                del self.groups.groups[g]

    # --- group configs ----------------------------------------------------------------------
    async def group_config(self, group: str) -> dict[str, str]:
        cached = self._group_configs.get(group)
        if cached is not None:
            return cached
        try:
            data, _ = await self._store().get(group_config_path(group))
            cfg = paths.decode_config(data)
        except NoNodeError:
            cfg = {}
        self._group_configs[group] = cfg
        return cfg

    async def stored_group_config(self, group: str) -> dict[str, str]:
        """What `/config/groups/<group>` holds now (no cache)."""
        self._group_configs.pop(group, None)
        return dict(await self.group_config(group))

    async def set_group_config(
        self, group: str, config: Mapping[str, str], *, validate_only: bool
    ) -> None:
        """Replace a group's configs (a GROUP config resource) after Kafka's validation, then
        notify every broker (`groups/<group>`). Raises GroupConfigError."""
        if not group:
            raise GroupConfigError("Group name can't be empty.")
        validate_group_config(config, self.config)
        if validate_only:
            return
        store = self._store()
        data = paths.encode_config(config)
        path = group_config_path(group)
        try:
            await store.set(path, data)
        except NoNodeError:
            await store.create(path, data, make_parents=True)
        self._group_configs[group] = dict(config)
        await paths.notify_config_change(store, f"groups/{paths.sanitize(group)}")

    def on_group_config_change(self, group: str) -> None:
        """`groups/<group>` changed (its configs, or the group was deleted): configs are read
        again, and the group's share-partitions with nothing acquired or unwritten are
        loaded again on next use (a deleted group's next incarnation starts from its own
        state, not from what this leader cached of the old one)."""
        self._group_configs.pop(group, None)
        for k, entry in list(self.parts.items()):
            if k[0] == group and not entry.unwritten and (
                entry.sp is None or entry.sp.next_deadline() is None
            ):
                del self.parts[k]

    async def settings(self, group: str) -> ShareGroupSettings:
        return ShareGroupSettings.of(await self.group_config(group), self.config)

    # --- membership (group coordinator) -----------------------------------------------------
    def coordinator_error(self, group: str) -> ErrorCode:
        cache = self.node.cache
        if not cache.contains_topic(OFFSETS_TOPIC):
            return ErrorCode.coordinator_not_available
        p = self._offsets_partition(group)
        part = self.node.replica_manager.get_partition(TopicPartition(OFFSETS_TOPIC, p))
        if part is None or not part.is_leader:
            return ErrorCode.not_coordinator
        if self._groups_rt is not None and not self._groups_rt.coordinator.is_partition_owned(p):
            return ErrorCode.coordinator_load_in_progress  # its share groups are not loaded
        return ErrorCode.none

    def topic_infos(self) -> dict[str, TopicInfo]:
        cache = self.node.cache
        out = {}
        for t in cache.topics():
            tid = cache.topic_id(t)
            if tid is not None and not t.startswith("__"):
                out[t] = TopicInfo(tid, len(cache.partitions(t)))
        return out

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group (Kafka's GroupCoordinatorService.deleteGroups): an
        empty group's share-partition states are deleted through the share coordinator
        (their state epochs move on), then its records (tombstones) and its group configs;
        a new group of the same name starts afresh (`share.auto.offset.reset`)."""
        group = self.groups.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        for tid, (_name, parts) in sorted(group.state_topics.items(), key=lambda x: str(x[0])):
            for p in sorted(parts):
                err = await self.persister.delete(ShareKey(group_id, tid, p))
                if err != ErrorCode.none:
                    log.warning("%s deleting the state of %s:%s:%d failed: %s",
                                self._prefix, group_id, tid, p, err.name)
                    return ErrorCode.coordinator_not_available
        if self.groups.groups.get(group_id) is not group or group.members:
            return ErrorCode.non_empty_group  # a member joined meanwhile
        err = await self._append(group_id, group.deletion(), group.unwritten)
        if err != ErrorCode.none:
            return err
        if self.groups.groups.get(group_id) is group:
            del self.groups.groups[group_id]
        for k in [k for k in self.parts if k[0] == group_id]:
            del self.parts[k]
        store = self._store()
        try:
            await store.delete(group_config_path(group_id))
        except NoNodeError:
            pass
        self._group_configs.pop(group_id, None)
        await paths.notify_config_change(store, f"groups/{paths.sanitize(group_id)}")
        log.info("%s deleted share group %s", self._prefix, group_id)
        return ErrorCode.none

    # --- share-partitions (partition leader) ------------------------------------------------
    def _leader_of(self, tp: TopicPartition) -> tuple[int, int]:
        st = self.node.cache.partition(tp.topic, tp.partition)
        return (st.leader, st.leader_epoch) if st is not None else (-1, -1)

    def _leads(self, part: Partition | None) -> bool:
        """This broker leads `part` and knows of no newer leader. A broker cut off from the
        controller while it led can miss the LeaderAndIsr (or StopReplica) that ended its
        leadership, yet learn the newer leader epoch from UpdateMetadata: ShareFetch carries
        no leader epoch to fence it with, so it refuses here, and the consumer looks the
        leader up again."""
        if part is None or not part.is_leader:
            return False
        known = self.node.cache.partition(part.tp.topic, part.tp.partition)
        return known is None or known.leader_epoch <= part.leader_epoch

    async def _entry(
        self, group: str, tp: TopicPartition, topic_id: uuid.UUID, settings: ShareGroupSettings
    ) -> tuple[ErrorCode, _Part | None]:
        part = self.node.replica_manager.get_partition(tp)
        if part is None:
            if self.node.cache.partition(tp.topic, tp.partition) is None:
                return ErrorCode.unknown_topic_or_partition, None
            return ErrorCode.not_leader_or_follower, None
        if not self._leads(part):
            return ErrorCode.not_leader_or_follower, None
        entry = self.parts.get((group, tp))
        if entry is None or entry.leader_epoch != part.leader_epoch:
            entry = _Part(ShareKey(group, topic_id, tp.partition), tp, part.leader_epoch)
            self.parts[(group, tp)] = entry
        if entry.sp is None:
            async with entry.lock:
                if entry.sp is None:
                    err = await self._load(entry, settings)
                    if err != ErrorCode.none:
                        return err, None
        assert entry.sp is not None
        entry.sp.config = settings.partition_config()
        return ErrorCode.none, entry

    async def _load(self, entry: _Part, settings: ShareGroupSettings) -> ErrorCode:
        err, state = await self.persister.read(entry.key, entry.leader_epoch)
        if err != ErrorCode.none:
            return err
        part = self.node.replica_manager.get_partition(entry.tp)
        if part is None or not part.is_leader or part.leader_epoch != entry.leader_epoch:
            return ErrorCode.not_leader_or_follower
        plog = part.log
        if state is None or state.start_offset < 0:  # none, or deleted with its group
            state_epoch = 0 if state is None else state.state_epoch
            if settings.auto_offset_reset == "earliest":
                start = plog.log_start_offset
            elif settings.isolation_level == "read_committed":
                start = plog.last_stable_offset
            else:
                start = part.high_watermark
            sp = SharePartition(start, settings.partition_config(), state_epoch=state_epoch)
            err = await self.persister.write(
                entry.key, ShareState(state_epoch, entry.leader_epoch, start, ())
            )
            if err != ErrorCode.none:
                return err
            log.info(
                "%s share-partition %s of group %s starts at %d (%s)",
                self._prefix, entry.tp, entry.key.group_id, start, settings.auto_offset_reset,
            )
        else:
            sp = SharePartition.from_state(
                state.start_offset,
                state.batches,
                settings.partition_config(),
                state_epoch=state.state_epoch,
            )
            log.info(
                "%s share-partition %s of group %s resumes at %d (%d in-flight batches)",
                self._prefix, entry.tp, entry.key.group_id, sp.start_offset, len(state.batches),
            )
        sp.reset_start(plog.log_start_offset)
        entry.sp = sp
        return ErrorCode.none

    async def _persist(self, entry: _Part) -> ErrorCode:
        async with entry.lock:
            sp = entry.sp
            if sp is None:
                return ErrorCode.none
            covers = entry.changes
            state = ShareState(
                sp.state_epoch, entry.leader_epoch, sp.start_offset, tuple(sp.state_batches())
            )
            err = await self.persister.write(entry.key, state)
            if err == ErrorCode.none:
                entry.written = max(entry.written, covers)
            elif (
                err == ErrorCode.fenced_state_epoch
                and self.parts.get((entry.key.group_id, entry.tp)) is entry
            ):
                # the group was deleted meanwhile: forget this share-partition (the next
                # fetch loads the new incarnation's state)
                del self.parts[(entry.key.group_id, entry.tp)]
            return err

    def _persist_later(self, entry: _Part) -> None:
        """Write the state in the background (lock expiries, releases, records archived at
        the delivery limit), retried every second while this broker still leads the
        partition at that epoch, until a write covers every change made so far (a change
        made while a write is on its way is written after it)."""
        entry.changes += 1
        if entry.writer or self._stopped:
            return
        entry.writer = True

        async def write() -> None:
            try:
                while entry.unwritten:
                    if await self._persist(entry) != ErrorCode.none:
                        await asyncio.sleep(1.0)
                    if self.parts.get((entry.key.group_id, entry.tp)) is not entry:
                        return  # no longer this broker's share-partition (at that epoch)
            finally:
                entry.writer = False

        task = asyncio.get_running_loop().create_task(write())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _release_session(self, s: ShareSession) -> None:
        for tid, p in s.partitions:
            name = self.node.cache.topic_name(tid)
            if name is None:
                continue
            entry = self.parts.get((s.group_id, TopicPartition(name, p)))
            if entry is not None and entry.sp is not None and entry.sp.release_member(s.member_id):
                self._persist_later(entry)
                self._changed.set()

    # --- ShareFetch / ShareAcknowledge ------------------------------------------------------
    def session_for(
        self,
        group: str,
        member: str,
        epoch: int,
        now_ms: int,
        *,
        fetch: bool,
        connection_id: int = -1,
    ) -> ShareSession | ErrorCode | None:
        """The session a request continues (opened for a ShareFetch with epoch 0); None for
        the final epoch -1, which closes it (the caller releases what it held)."""
        if epoch == 0:
            if not fetch:
                return ErrorCode.invalid_share_session_epoch
            old = self.sessions.close(group, member)
            if old is not None:
                self._release_session(old)
            return self.sessions.open(group, member, now_ms, connection_id)
        if epoch == -1:
            if (group, member) not in self.sessions.sessions:
                return ErrorCode.share_session_not_found
            return None
        return self.sessions.use(group, member, epoch, now_ms, connection_id)

    def release(self, group: str, member: str, tp: TopicPartition) -> None:
        """Release what `member` holds of one share-partition (it left the session)."""
        entry = self.parts.get((group, tp))
        if entry is not None and entry.sp is not None and entry.sp.release_member(member):
            self._persist_later(entry)
            self._changed.set()

    def close_session(self, group: str, member: str) -> None:
        s = self.sessions.close(group, member)
        if s is not None:
            self._release_session(s)

    def on_connection_closed(self, connection_id: int) -> None:
        """A client connection is gone: the share sessions it held close, and their records
        go back to the other members at once."""
        for s in self.sessions.close_connection(connection_id):
            log.info(
                "%s share session of member %s of group %s closed with its connection",
                self._prefix, s.member_id, s.group_id,
            )
            self._release_session(s)

    def member_left(self, group: str, member: str) -> None:
        """A member left the group (or its session with the coordinator expired): its share
        session here closes and every record it holds on this broker goes back."""
        self.close_session(group, member)
        for (g, _tp), entry in list(self.parts.items()):
            if g == group and entry.sp is not None and entry.sp.release_member(member):
                self._persist_later(entry)
                self._changed.set()

    async def acknowledge(
        self,
        group: str,
        member: str,
        tp: TopicPartition,
        topic_id: uuid.UUID,
        batches: Sequence[AckBatch],
    ) -> ErrorCode:
        settings = await self.settings(group)
        err, entry = await self._entry(group, tp, topic_id, settings)
        if err != ErrorCode.none or entry is None:
            return err
        assert entry.sp is not None
        err = entry.sp.acknowledge(member, batches, self.clock.now_ms())
        if err != ErrorCode.none:
            return err
        if any(int(AckType.RELEASE) in b.types for b in batches):
            self._changed.set()  # released records: waiting fetches may take them
        entry.changes += 1
        err = await self._persist(entry)
        if err in RETRIABLE or err == ErrorCode.request_timed_out:
            # applied here but not written: written in the background, as a lock expiry's
            # state would be, so the share coordinator does not keep the older state for good
            self._persist_later(entry)
            return ErrorCode.coordinator_not_available
        return err

    async def fetch(
        self,
        group: str,
        member: str,
        wanted: Sequence[tuple[TopicPartition, uuid.UUID]],
        *,
        max_wait_ms: int,
        max_bytes: int,
        max_records: int,
        mode: AcquireMode | None = None,
    ) -> dict[TopicPartition, PartitionFetch]:
        """Acquire records for `member` from the share-partitions of `wanted`, waiting up to
        `max_wait_ms` for some: `max_records` over all partitions, each partition's
        acquisition as `mode` bounds it (by default whole batches, so the last partition
        acquired may pass `max_records`)."""
        settings = await self.settings(group)
        deadline = self.clock.monotonic_ms() + max(0, max_wait_ms)
        out: dict[TopicPartition, PartitionFetch] = {}
        while True:
            out = {}
            entries: list[_Part] = []
            for tp, tid in wanted:
                err, entry = await self._entry(group, tp, tid, settings)
                if err in RETRIABLE and err != ErrorCode.unknown_topic_or_partition:
                    err = ErrorCode.unknown_server_error  # the share coordinator: retried
                leader, epoch = self._leader_of(tp)
                pf = PartitionFetch(err, leader_id=leader, leader_epoch=epoch)
                out[tp] = pf
                if entry is not None:
                    entries.append(entry)
            budget = max_records
            remaining = max_bytes
            for entry in entries:
                if budget <= 0 or remaining <= 0:
                    break
                pf = out[entry.tp]
                got = self._acquire(entry, member, settings, (budget, remaining, mode), pf)
                budget -= got
                remaining -= len(pf.records)
            if any(pf.acquired for pf in out.values()) or any(
                pf.error_code != ErrorCode.none for pf in out.values()
            ):
                return out
            left = deadline - self.clock.monotonic_ms()
            if left <= 0 or not entries:
                return out
            await self._wait_for_records(entries, min(left, 200))

    def _acquire(
        self,
        entry: _Part,
        member: str,
        settings: ShareGroupSettings,
        limits: tuple[int, int, AcquireMode | None],
        pf: PartitionFetch,
    ) -> int:
        sp = entry.sp
        assert sp is not None
        start, archived = sp.start_offset, sp.archived_at_limit
        try:
            return self._acquire_from_log(entry, sp, member, settings, limits, pf)
        finally:
            if sp.start_offset != start or sp.archived_at_limit != archived:
                # A state no acknowledgement will write: records archived at the delivery
                # limit, or the start moved past offsets never to be delivered (a control
                # batch, an aborted transaction's records, the log start). A consumer of
                # Kafka acknowledges those as gaps; here the leader skips them itself, so it
                # writes the state that skipping leaves, or the share coordinator would keep
                # the old start offset (and show a lag) after the last record is done.
                self._persist_later(entry)

    def _acquire_from_log(
        self,
        entry: _Part,
        sp: SharePartition,
        member: str,
        settings: ShareGroupSettings,
        limits: tuple[int, int, AcquireMode | None],
        pf: PartitionFetch,
    ) -> int:
        max_records, max_bytes, mode = limits
        rm = self.node.replica_manager
        part = rm.get_partition(entry.tp)
        if part is None or not self._leads(part):
            pf.error_code = ErrorCode.not_leader_or_follower
            return 0
        sp.reset_start(part.log.log_start_offset)
        if not sp.can_acquire():
            return 0
        committed = settings.isolation_level == "read_committed"
        offset = sp.fetch_offset()
        # about max_records are acquired: no need to read megabytes more than that
        read_bytes = max(1, min(max_bytes, READ_CAP_BYTES))
        res = rm.read_from_local_log(
            -1,
            read_bytes,
            [FetchPartition(entry.tp, offset, read_bytes)],
            isolation_level=READ_COMMITTED if committed else READ_UNCOMMITTED,
        ).get(entry.tp)
        if res is None or res.error_code != ErrorCode.none:
            if res is not None and res.error_code == ErrorCode.offset_out_of_range:
                return 0
            pf.error_code = res.error_code if res is not None else ErrorCode.unknown_server_error
            return 0
        records = res.records
        if isinstance(records, FileRegion):  # not asked for (no zero_copy): never expected
            records = records.read()
        if not records:
            return 0
        batches = fetched_batches(records, res.aborted_transactions if committed else None)
        acquired = sp.acquire(member, batches, max_records, self.clock.now_ms(), mode)
        if not acquired:
            return 0
        pf.records = _overlapping(records, acquired)
        pf.acquired = acquired
        return sum(r.last_offset - r.first_offset + 1 for r in acquired)

    async def _wait_for_records(self, entries: Sequence[_Part], wait_ms: int) -> None:
        """Until new records reach a partition's high watermark, a record is released, or
        `wait_ms` passes."""
        self._changed.clear()
        fps = [
            FetchPartition(e.tp, e.sp.next_offset, 1) for e in entries if e.sp is not None
        ]
        fetch = asyncio.ensure_future(
            self.node.fetch(
                fps, replica_id=-1, replica_epoch=-1, max_wait_ms=wait_ms, min_bytes=1,
                max_bytes=1,
            )
        )
        changed = asyncio.ensure_future(self._changed.wait())
        started = self.clock.monotonic_ms()
        try:
            await asyncio.wait({fetch, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not fetch.done():
                fetch.cancel()
        if self.clock.monotonic_ms() - started < 20:
            await asyncio.sleep(0.02)  # never spin
