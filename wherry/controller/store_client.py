"""The controller's reads and writes in the metadata store (the part of Kafka's KafkaZkClient the
controller uses).

* Every call is retried across a connection loss: while the session is suspended calls wait
  for it to reconnect (as Kafka's ZooKeeper client blocks), and raise `SessionExpiredError`
  once it has expired or been closed.
* Writes of partition state are fenced: each is a transaction that first checks the
  `/controller_epoch` node's version, so a deposed controller's write fails
  (`ControllerMovedError`); a conflict on the state node's own version is reported per
  partition, for the caller to re-read and decide again.
* The controller is registered and the epoch incremented in one transaction (Kafka's
  registerControllerAndIncrementControllerEpoch).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.coordination import paths
from wherry.coordination.store import (
    BadVersionError,
    BatchReader,
    CheckOp,
    ConnectionLossError,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MultiOp,
    MultiResult,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SessionState,
    SetOp,
    Stat,
    StoreError,
    WatchCallback,
)
from wherry.runtime.state_change_log import state_change_logger

log = logging.getLogger(__name__)

T = TypeVar("T")

INITIAL_CONTROLLER_EPOCH = 0  # written when /controller_epoch does not exist yet (Kafka's)
PIPELINE_DEPTH = 500  # store requests of one batch in flight at once
MULTI_GROUP = 100  # partition-state writes per ZooKeeper transaction (~20 KB of a 1 MB request)
MAX_WRITE_ATTEMPTS = 10
"""Conditional partition-state writes re-read and re-decided at most this often per event."""


def _leader_isr(data: bytes, stat: Stat) -> LeaderIsr:
    s = paths.PartitionState.from_json(data)
    return LeaderIsr(s.leader, s.leader_epoch, tuple(s.isr), s.controller_epoch, stat.version)


class ControllerMovedError(Exception):
    """A fenced write failed: another controller has been elected since."""


@dataclass(frozen=True, slots=True)
class ControllerNode:
    broker_id: int
    owner_session: int  # the session holding the ephemeral /controller node


class ControllerStoreClient:
    def __init__(
        self, store: MetadataStore, on_session_end: Callable[[SessionState], None]
    ) -> None:
        self.store = store
        self._on_session_end = on_session_end
        self._state_changed = asyncio.Event()
        self._closed = False
        store.add_state_listener(self._on_state)

    @property
    def session_id(self) -> int:
        return self.store.session_id

    @property
    def session_dead(self) -> bool:
        return self.store.state in (SessionState.EXPIRED, SessionState.CLOSED)

    def close(self) -> None:
        """Stop listening to the session (the session itself belongs to the owner)."""
        if not self._closed:
            self._closed = True
            self.store.remove_state_listener(self._on_state)
            self._state_changed.set()

    def _on_state(self, state: SessionState) -> None:
        self._state_changed.set()
        if state in (SessionState.EXPIRED, SessionState.CLOSED) and not self._closed:
            self._on_session_end(state)

    async def _retry(self, op: Callable[[], Awaitable[T]]) -> T:
        while True:
            try:
                return await op()
            except ConnectionLossError:
                if self.session_dead or self._closed:
                    raise SessionExpiredError("session ended during a connection loss") from None
                if self.store.state is SessionState.SUSPENDED:
                    self._state_changed.clear()
                    await self._state_changed.wait()
                else:  # the loss is not reported yet; look again shortly
                    await asyncio.sleep(0.05)

    # --- plain calls ---------------------------------------------------------------------------
    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        return await self._retry(lambda: self.store.get(path, watch=watch))

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        return await self._retry(lambda: self.store.exists(path, watch=watch))

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        return await self._retry(lambda: self.store.get_children(path, watch=watch))

    async def create(self, path: str, data: bytes = b"", *, make_parents: bool = False) -> str:
        return await self._retry(lambda: self.store.create(path, data, make_parents=make_parents))

    async def multi(self, ops: Sequence[MultiOp]) -> list[MultiResult]:
        return await self._retry(lambda: self.store.multi(ops))

    async def delete_if_exists(self, path: str, *, recursive: bool = False) -> None:
        try:
            await self._retry(lambda: self.store.delete(path, recursive=recursive))
        except NoNodeError:
            pass

    async def ensure_paths(self) -> None:
        for path in (
            paths.BROKER_IDS,
            paths.BROKER_TOPICS,
            paths.ADMIN_DELETE_TOPICS,
            paths.CONFIG_TOPICS,
        ):
            if await self.exists(path) is None:
                try:
                    await self.create(path, make_parents=True)
                except NodeExistsError:
                    pass

    # --- the controller node -------------------------------------------------------------------
    async def read_controller(self, watch: WatchCallback | None) -> ControllerNode | None:
        """The current controller (with a watch on `/controller` either way)."""
        while True:
            try:
                data, stat = await self.get(paths.CONTROLLER, watch)
            except NoNodeError:
                if await self.exists(paths.CONTROLLER, watch) is None:
                    return None
                continue  # created in between
            return ControllerNode(
                paths.ControllerInfo.from_json(data).broker_id, stat.ephemeral_owner
            )

    async def register_controller(self, broker_id: int, timestamp_ms: int) -> tuple[int, int]:
        """Create `/controller` and increment the epoch in one transaction; returns (epoch,
        version of `/controller_epoch`). Raises `NodeExistsError` when another broker is
        controller."""
        info = paths.ControllerInfo(broker_id, timestamp_ms).to_json()
        for _ in range(10):
            try:
                data, stat = await self.get(paths.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    await self.create(
                        paths.CONTROLLER_EPOCH,
                        paths.encode_controller_epoch(INITIAL_CONTROLLER_EPOCH),
                    )
                except NodeExistsError:
                    pass
                continue
            epoch = paths.decode_controller_epoch(data) + 1
            try:
                results = await self.multi(
                    [
                        CreateOp(paths.CONTROLLER, info, ephemeral=True),
                        SetOp(
                            paths.CONTROLLER_EPOCH,
                            paths.encode_controller_epoch(epoch),
                            stat.version,
                        ),
                    ]
                )
            except BadVersionError:
                continue  # the epoch moved between our read and write: read again
            new = results[1]
            assert isinstance(new, Stat)
            return epoch, new.version
        raise ControllerMovedError("controller epoch kept changing during the election")

    async def delete_own_controller(self) -> None:
        """Delete `/controller` if this session holds it (after resigning while holding it)."""
        try:
            _, stat = await self.get(paths.CONTROLLER)
        except NoNodeError:
            return
        if stat.ephemeral_owner != self.session_id:
            return
        try:
            await self._retry(lambda: self.store.delete(paths.CONTROLLER, version=stat.version))
        except (NoNodeError, BadVersionError):
            pass

    # --- brokers and topics --------------------------------------------------------------------
    async def live_brokers(
        self, watch: WatchCallback | None
    ) -> dict[int, paths.BrokerRegistration]:
        """The registered brokers; each one's epoch is its registration's czxid."""
        out: dict[int, paths.BrokerRegistration] = {}
        for name in await self.get_children(paths.BROKER_IDS, watch):
            try:
                bid = int(name)
                data, stat = await self.get(paths.broker_path(bid))
            except (ValueError, NoNodeError):
                continue
            try:
                reg = paths.BrokerRegistration.from_json(data, broker_id=bid)
            except ValueError:
                log.warning("ignoring unreadable registration of broker %s", name)
                continue
            out[bid] = dataclasses.replace(reg, epoch=stat.czxid)
        return out

    async def topics(self, watch: WatchCallback | None) -> list[str]:
        return await self.get_children(paths.BROKER_TOPICS, watch)

    async def topic_assignment(
        self, topic: str, watch: WatchCallback | None
    ) -> paths.TopicAssignment | None:
        try:
            data, _ = await self.get(paths.topic_path(topic), watch)
        except NoNodeError:
            return None
        return paths.TopicAssignment.from_json(data)

    async def topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = await self.get(paths.topic_config_path(topic))
        except NoNodeError:
            return {}
        try:
            return paths.decode_config(data)
        except ValueError:
            log.warning("ignoring unreadable config of topic %s", topic)
            return {}

    async def dynamic_broker_config(self, broker_id: int) -> dict[str, str]:
        """A broker's dynamic configs in force: its own (`/config/brokers/<id>`) over the
        cluster default (`/config/brokers/<default>`)."""
        out: dict[str, str] = {}
        for entity in (None, broker_id):
            try:
                data, _ = await self.get(paths.broker_config_path(entity))
                out.update(paths.decode_config(data))
            except NoNodeError:
                pass
            except ValueError:
                log.warning("ignoring an unreadable config of broker entity %s", entity)
        return out

    async def deletions(self, watch: WatchCallback | None) -> list[str]:
        return await self.get_children(paths.ADMIN_DELETE_TOPICS, watch)

    async def delete_deletion_marker(self, topic: str) -> None:
        await self.delete_if_exists(paths.delete_topic_path(topic))

    async def set_topic_assignment(
        self, topic: str, assignment: paths.TopicAssignment, epoch_zk_version: int
    ) -> None:
        """Rewrite a topic's assignment (reassignment state included), fenced."""
        await self._fenced(epoch_zk_version, [SetOp(paths.topic_path(topic), assignment.to_json())])

    # --- admin requests through nodes (legacy tools) ------------------------------------------
    async def _read_admin_node(self, path: str, watch: WatchCallback | None) -> bytes | None:
        """The node's data, or None when it does not exist (the watch then fires on
        creation)."""
        if await self.exists(path, watch) is None:
            return None
        try:
            data, _ = await self.get(path)
        except NoNodeError:
            return None
        return data

    async def reassignment_request(
        self, watch: WatchCallback | None
    ) -> dict[tuple[str, int], list[int]] | None:
        """``/admin/reassign_partitions``; None when absent. An unreadable node is deleted."""
        data = await self._read_admin_node(paths.ADMIN_REASSIGN_PARTITIONS, watch)
        if data is None:
            return None
        try:
            return paths.decode_reassignment(data)
        except ValueError as e:
            log.error("deleting an unreadable %s: %s", paths.ADMIN_REASSIGN_PARTITIONS, e)
            await self.delete_if_exists(paths.ADMIN_REASSIGN_PARTITIONS)
            return None

    async def set_reassignment_request(
        self, remaining: dict[tuple[str, int], list[int]], epoch_zk_version: int
    ) -> None:
        """Rewrite ``/admin/reassign_partitions`` with what remains; delete it when empty."""
        path = paths.ADMIN_REASSIGN_PARTITIONS
        if await self.exists(path) is None:
            return
        op: MultiOp = (
            SetOp(path, paths.encode_reassignment(remaining)) if remaining else DeleteOp(path)
        )
        try:
            await self._fenced(epoch_zk_version, [op])
        except NoNodeError:
            pass

    async def preferred_election_request(
        self, watch: WatchCallback | None
    ) -> list[tuple[str, int]] | None:
        """``/admin/preferred_replica_election``; None when absent."""
        path = paths.ADMIN_PREFERRED_REPLICA_ELECTION
        data = await self._read_admin_node(path, watch)
        if data is None:
            return None
        try:
            return paths.decode_partition_list(data)
        except ValueError as e:
            log.error("deleting an unreadable %s: %s", path, e)
            await self.delete_if_exists(path)
            return None

    async def delete_preferred_election_request(self, epoch_zk_version: int) -> None:
        try:
            await self._fenced(epoch_zk_version, [DeleteOp(paths.ADMIN_PREFERRED_REPLICA_ELECTION)])
        except NoNodeError:
            pass

    # --- partition states ----------------------------------------------------------------------
    async def partition_state(self, tp: TopicPartition) -> LeaderIsr | None:
        try:
            data, stat = await self.get(paths.partition_state_path(tp.topic, tp.partition))
        except NoNodeError:
            return None
        return _leader_isr(data, stat)

    async def _fenced(self, epoch_zk_version: int, ops: Sequence[MultiOp]) -> list[MultiResult]:
        try:
            return await self.multi([CheckOp(paths.CONTROLLER_EPOCH, epoch_zk_version), *ops])
        except (BadVersionError, NoNodeError) as e:
            if e.op_index == 0:
                raise ControllerMovedError(
                    f"/controller_epoch is no longer at version {epoch_zk_version}"
                ) from e
            raise

    async def create_partition_state(
        self, tp: TopicPartition, st: LeaderIsr, epoch_zk_version: int
    ) -> int | None:
        """Create the state node (fenced); its version, or None when it exists already."""
        for parent in (
            paths.topic_partitions_path(tp.topic),
            paths.partition_path(tp.topic, tp.partition),
        ):
            try:
                await self.create(parent)
            except NodeExistsError:
                pass
        rec = paths.PartitionState(st.leader, st.leader_epoch, list(st.isr), st.controller_epoch)
        try:
            await self._fenced(
                epoch_zk_version,
                [CreateOp(paths.partition_state_path(tp.topic, tp.partition), rec.to_json())],
            )
        except NodeExistsError:
            return None
        return 0

    async def create_partition_states(
        self, states: Sequence[tuple[TopicPartition, LeaderIsr]], epoch_zk_version: int
    ) -> list[int | None]:
        """`create_partition_state` of many partitions; in the same order. New topics' nodes
        (`partitions`, `partitions/<p>`, `partitions/<p>/state`) are created MULTI_GROUP
        partitions to one fenced transaction: a store that makes each transaction durable
        on its own (the embedded one fsyncs each) costs a few, not three per partition. A
        group in which a node exists already (added partitions, a creation a failed-over
        controller began) is created again one partition at a time, which tells which."""

        async def create_group(
            group: Sequence[tuple[TopicPartition, LeaderIsr]], topics: Iterable[str]
        ) -> list[int | None]:
            ops: list[MultiOp] = [CreateOp(paths.topic_partitions_path(t), b"") for t in topics]
            for tp, st in group:
                rec = paths.PartitionState(
                    st.leader, st.leader_epoch, list(st.isr), st.controller_epoch
                )
                ops.append(CreateOp(paths.partition_path(tp.topic, tp.partition), b""))
                ops.append(
                    CreateOp(paths.partition_state_path(tp.topic, tp.partition), rec.to_json())
                )
            try:
                await self._fenced(epoch_zk_version, ops)
                return [0] * len(group)
            except (NodeExistsError, NoNodeError):  # (a moved controller raised already)
                pass
            singles = await asyncio.gather(
                *(self.create_partition_state(tp, st, epoch_zk_version) for tp, st in group),
                return_exceptions=True,
            )
            out: list[int | None] = []
            for r in singles:
                if isinstance(r, BaseException):
                    raise r
                out.append(r)
            return out

        # The `partitions` node of a topic goes with the first group holding the topic; the
        # store applies one session's requests in order, so later groups find it.
        items = list(states)
        groups = [items[i : i + MULTI_GROUP] for i in range(0, len(items), MULTI_GROUP)]
        seen: set[str] = set()
        jobs: list[tuple[list[tuple[TopicPartition, LeaderIsr]], list[str]]] = []
        for g in groups:
            new = [t for t in dict.fromkeys(tp.topic for tp, _ in g) if t not in seen]
            seen.update(new)
            jobs.append((g, new))
        out: list[int | None] = []
        for start in range(0, len(jobs), PIPELINE_DEPTH):
            results = await asyncio.gather(
                *(create_group(g, t) for g, t in jobs[start : start + PIPELINE_DEPTH]),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r
                out.extend(r)
        return out

    async def update_partition_states(
        self, updates: Sequence[tuple[TopicPartition, LeaderIsr]], epoch_zk_version: int
    ) -> tuple[dict[TopicPartition, int], list[TopicPartition]]:
        """Conditional writes (each checks the version in its LeaderIsr); returns the new
        versions of the written ones and the partitions that conflicted."""
        written: dict[TopicPartition, int] = {}
        conflicts: list[TopicPartition] = []

        def set_op(item: tuple[TopicPartition, LeaderIsr]) -> SetOp:
            tp, st = item
            rec = paths.PartitionState(
                st.leader, st.leader_epoch, list(st.isr), st.controller_epoch
            )
            path = paths.partition_state_path(tp.topic, tp.partition)
            return SetOp(path, rec.to_json(), st.zk_version)

        async def write(item: tuple[TopicPartition, LeaderIsr]) -> list[MultiResult]:
            return await self._fenced(epoch_zk_version, [set_op(item)])

        async def write_group(group: list[tuple[TopicPartition, LeaderIsr]]) -> None:
            """Several partitions' writes in ONE fenced transaction (one round trip, one
            ZooKeeper request); if any of them conflicts the transaction is rolled back and
            the group is written again one partition at a time, to tell which conflicted."""
            try:
                results = await self._fenced(epoch_zk_version, [set_op(i) for i in group])
            except (BadVersionError, NoNodeError):
                results = None
            if results is not None:
                for (tp, _), r in zip(group, results[1:], strict=True):
                    assert isinstance(r, Stat)
                    written[tp] = r.version
                return
            singles = await asyncio.gather(*(write(i) for i in group), return_exceptions=True)
            failure: BaseException | None = None
            for (tp, _), one in zip(group, singles, strict=True):
                if isinstance(one, BadVersionError | NoNodeError):
                    conflicts.append(tp)
                elif isinstance(one, BaseException):
                    failure = failure or one
                else:
                    stat = one[1]
                    assert isinstance(stat, Stat)
                    written[tp] = stat.version
            if failure is not None:
                raise failure

        # Kafka's KafkaZkClient sends these asynchronously, one transaction per partition; here
        # partitions go MULTI_GROUP to a transaction, PIPELINE_DEPTH transactions in flight: a
        # failover moving thousands of leaderships costs a few requests, not one per partition.
        items = list(updates)
        groups = [items[i : i + MULTI_GROUP] for i in range(0, len(items), MULTI_GROUP)]
        for start in range(0, len(groups), PIPELINE_DEPTH):
            chunk = groups[start : start + PIPELINE_DEPTH]
            results = await asyncio.gather(*(write_group(g) for g in chunk), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return written, conflicts

    async def write_leader_isr(
        self,
        ctx: ControllerContext,
        tps: Iterable[TopicPartition],
        decide: Callable[[TopicPartition, LeaderIsr], LeaderIsr | None],
        prefix: str,
    ) -> dict[TopicPartition, LeaderIsr]:
        """Write each partition's new state (decided from its current one in `ctx.states`)
        conditionally and fenced; a partition whose state node changed meanwhile is re-read
        and decided again (Kafka's retry loop). Returns what was written (also put in
        `ctx.states`)."""
        done: dict[TopicPartition, LeaderIsr] = {}
        pending = list(dict.fromkeys(tps))
        for _ in range(MAX_WRITE_ATTEMPTS):
            planned: list[tuple[TopicPartition, LeaderIsr]] = []
            for tp in pending:
                cur = ctx.states.get(tp)
                if cur is None:
                    continue
                new = decide(tp, cur)
                if new is not None:
                    planned.append((tp, dataclasses.replace(new, zk_version=cur.zk_version)))
            if not planned:
                return done
            written, conflicts = await self.update_partition_states(
                planned, ctx.epoch_zk_version
            )
            for tp, new in planned:
                if tp in written:
                    ctx.states[tp] = done[tp] = dataclasses.replace(new, zk_version=written[tp])
            if not conflicts:
                return done
            for tp in conflicts:
                st = await self.partition_state(tp)
                if st is None:
                    ctx.states.pop(tp, None)
                else:
                    ctx.states[tp] = st
            pending = conflicts
        state_change_logger.error(
            "%s Gave up writing the states of %s after %d conflicting attempts",
            prefix,
            [str(tp) for tp in pending],
            MAX_WRITE_ATTEMPTS,
        )
        return done

    async def partition_states(
        self, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsr]:
        """`partition_state` of many partitions, missing ones left out: in a few batch reads
        when the store has them (`BatchReader`, ZooKeeper's multiRead), else read pipelined."""
        out: dict[TopicPartition, LeaderIsr] = {}
        store = self.store
        if isinstance(store, BatchReader):
            paths_ = [paths.partition_state_path(tp.topic, tp.partition) for tp in tps]
            reads = await self._retry(lambda: store.get_many(paths_))
            for tp, read in zip(tps, reads, strict=True):
                if read is not None:
                    out[tp] = _leader_isr(*read)
            return out
        for start in range(0, len(tps), PIPELINE_DEPTH):
            chunk = tps[start : start + PIPELINE_DEPTH]
            results = await asyncio.gather(*(self.partition_state(tp) for tp in chunk))
            for tp, st in zip(chunk, results, strict=True):
                if st is not None:
                    out[tp] = st
        return out

    async def delete_topic_nodes(self, topic: str, epoch_zk_version: int) -> None:
        """Remove a deleted topic's assignment subtree, config and deletion marker in one
        fenced transaction."""
        for _ in range(5):
            ops: list[MultiOp] = []
            await self._collect_subtree(paths.topic_path(topic), ops)
            for extra in (paths.topic_config_path(topic), paths.delete_topic_path(topic)):
                if await self.exists(extra) is not None:
                    ops.append(DeleteOp(extra))
            if not ops:
                return
            try:
                await self._fenced(epoch_zk_version, ops)
                return
            except (NoNodeError, NotEmptyError):
                continue  # changed under us: look again
        raise StoreError(f"could not delete the nodes of topic {topic}")

    async def _collect_subtree(self, path: str, ops: list[MultiOp]) -> None:
        """Delete ops for `path` and everything below it, children first."""
        try:
            children = await self.get_children(path)
        except NoNodeError:
            return
        for c in children:
            await self._collect_subtree(f"{path}/{c}", ops)
        ops.append(DeleteOp(path))
