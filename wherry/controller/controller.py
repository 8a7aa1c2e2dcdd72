"""The controller (SPEC H1–H7): elected through `/controller`, it decides leadership and tells
brokers with LeaderAndIsr / UpdateMetadata / StopReplica.

Events (watch callbacks, startup) go through one queue and are processed one at a time, like
Kafka's ControllerEventManager, so no two decisions interleave. Every write of partition state
is a transaction that first checks the `/controller_epoch` node's version: a deposed
controller's writes fail and it resigns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from wherry.controller.channel import ControllerChannel
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.election import offline_partition_election
from wherry.coordination import paths
from wherry.coordination.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    MetadataStore,
    MultiOp,
    NodeExistsError,
    NoNodeError,
    SetOp,
    StoreError,
    WatchEvent,
)
from wherry.log.topic_partition import TopicPartition
from wherry.protocol.interbroker import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("wherry.state_change")


class ControllerMovedError(Exception):
    pass


Event = Callable[[], Awaitable[None]]


class Controller:
    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        channel: ControllerChannel,
        *,
        unclean_leader_election_default: bool = False,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        self.channel = channel
        self.unclean_default = unclean_leader_election_default
        self._now_ms = now_ms
        self.ctx = ControllerContext()
        self.active = False
        self.active_controller_id = -1
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._prefix = f"[Controller id={broker_id}]"

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.broker_id}")
        await self.submit(self._elect)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self.active = False

    async def submit(self, event: Event) -> None:
        """Run an event on the controller's queue and wait for it."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def wrapped() -> None:
            try:
                await event()
                if not done.done():
                    done.set_result(None)
            except BaseException as e:
                if not done.done():
                    done.set_exception(e)
                raise

        self._queue.put_nowait(wrapped)
        await done

    def _enqueue(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def _watch(self, event: Event) -> Callable[[WatchEvent], None]:
        def fire(_: WatchEvent) -> None:
            self._enqueue(event)

        return fire

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await event()
            except ControllerMovedError as e:
                log.warning("%s controller moved: %s; resigning", self._prefix, e)
                self._resign()
                self._enqueue(self._elect)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s error processing a controller event", self._prefix)

    # --- election (SPEC H1) --------------------------------------------------------------
    async def _elect(self) -> None:
        info = paths.ControllerInfo(self.broker_id, self._now_ms())
        try:
            await self.store.create(paths.CONTROLLER, info.to_json(), ephemeral=True)
        except NodeExistsError:
            try:
                data, _ = await self.store.get(paths.CONTROLLER, watch=self._watch(self._elect))
                self.active_controller_id = paths.ControllerInfo.from_json(data).broker_id
            except NoNodeError:
                self._enqueue(self._elect)
                return
            if self.active_controller_id != self.broker_id and self.active:
                self._resign()
            return
        await self.store.exists(paths.CONTROLLER, watch=self._watch(self._elect))
        self.active_controller_id = self.broker_id
        await self._on_controller_failover()

    def _resign(self) -> None:
        if self.active:
            log.info("%s resigning", self._prefix)
        self.active = False
        self.ctx = ControllerContext()

    async def _increment_epoch(self) -> None:
        try:
            data, stat = await self.store.get(paths.CONTROLLER_EPOCH)
            epoch = paths.decode_controller_epoch(data) + 1
            try:
                new = await self.store.set(
                    paths.CONTROLLER_EPOCH,
                    paths.encode_controller_epoch(epoch),
                    version=stat.version,
                )
            except BadVersionError as e:
                raise ControllerMovedError("controller epoch changed during election") from e
            self.ctx.epoch, self.ctx.epoch_zk_version = epoch, new.version
        except NoNodeError:
            try:
                await self.store.create(paths.CONTROLLER_EPOCH, paths.encode_controller_epoch(1))
            except NodeExistsError as e:
                raise ControllerMovedError("controller epoch created concurrently") from e
            self.ctx.epoch, self.ctx.epoch_zk_version = 1, 0

    async def _on_controller_failover(self) -> None:
        """SPEC H7: epoch, watches, context, state machines, push leadership, resume deletions."""
        self.ctx = ControllerContext()
        await self._increment_epoch()
        self.active = True
        log.info("%s elected as controller with epoch %d", self._prefix, self.ctx.epoch)
        state_change_log.info("%s became controller with epoch %d", self._prefix, self.ctx.epoch)
        for p in (
            paths.BROKER_IDS,
            paths.BROKER_TOPICS,
            paths.ADMIN_DELETE_TOPICS,
            paths.CONFIG_TOPICS,
        ):
            try:
                await self.store.create(p, b"", make_parents=True)
            except NodeExistsError:
                pass
        await self._load_brokers()
        await self._load_topics(watch=True)
        await self._load_deletions()
        # Partitions created but never initialized (a controller died half-way).
        new = [tp for tp in self.ctx.all_partitions() if tp not in self.ctx.states]
        if new:
            await self._initialize_partitions(new)
        await self._elect_offline_partitions(self.ctx.all_partitions())
        live = sorted(self.ctx.live_brokers)
        await self._send_update_metadata(live, self.ctx.all_partitions())
        for b in live:
            await self._send_leader_and_isr(b, self.ctx.partitions_on_broker(b))
        await self._resume_deletions()

    # --- loading -------------------------------------------------------------------------
    async def _load_brokers(self) -> set[int]:
        ids = await self.store.get_children(
            paths.BROKER_IDS, watch=self._watch(self._on_broker_change)
        )
        live: dict[int, paths.BrokerRegistration] = {}
        for name in ids:
            try:
                data, stat = await self.store.get(paths.broker_path(int(name)))
            except NoNodeError:
                continue
            reg = paths.BrokerRegistration.from_json(data, broker_id=int(name))
            if reg.epoch < 0:
                reg = paths.BrokerRegistration(
                    reg.broker_id, reg.host, reg.port, reg.rack, stat.czxid
                )
            live[reg.broker_id] = reg
        self.ctx.live_brokers = live
        return set(live)

    async def _load_topic(self, topic: str) -> None:
        data, _ = await self.store.get(
            paths.topic_path(topic), watch=self._watch(lambda: self._on_topic_modified(topic))
        )
        assignment = paths.TopicAssignment.from_json(data)
        self.ctx.topic_ids[topic] = assignment.topic_id
        self.ctx.assignments[topic] = {p: tuple(r) for p, r in assignment.partitions.items()}
        try:
            cdata, _ = await self.store.get(paths.topic_config_path(topic))
            self.ctx.topic_configs[topic] = paths.decode_config(cdata)
        except NoNodeError:
            self.ctx.topic_configs[topic] = {}
        for p in assignment.partitions:
            tp = TopicPartition(topic, p)
            try:
                sdata, stat = await self.store.get(paths.partition_state_path(topic, p))
            except NoNodeError:
                continue
            st = paths.PartitionState.from_json(sdata)
            self.ctx.states[tp] = LeaderIsr(
                st.leader, st.leader_epoch, tuple(st.isr), st.controller_epoch, stat.version
            )

    async def _load_topics(self, *, watch: bool) -> list[str]:
        names = await self.store.get_children(
            paths.BROKER_TOPICS, watch=self._watch(self._on_topic_change) if watch else None
        )
        new = [t for t in names if t not in self.ctx.assignments]
        for t in new:
            try:
                await self._load_topic(t)
            except NoNodeError:
                continue
        return new

    async def _load_deletions(self) -> None:
        names = await self.store.get_children(
            paths.ADMIN_DELETE_TOPICS, watch=self._watch(self._on_deletion_change)
        )
        self.ctx.topics_to_delete |= {t for t in names if t in self.ctx.assignments}
        for t in names:
            if t not in self.ctx.assignments:  # already gone; clean the marker
                try:
                    await self.store.delete(paths.delete_topic_path(t))
                except NoNodeError:
                    pass

    # --- writing partition state (fenced by the controller epoch) -----------------------
    async def _fenced_multi(self, ops: list[MultiOp]) -> None:
        try:
            await self.store.multi(
                [CheckOp(paths.CONTROLLER_EPOCH, self.ctx.epoch_zk_version), *ops]
            )
        except BadVersionError as e:
            raise ControllerMovedError("controller epoch znode version changed") from e

    async def _create_state(self, tp: TopicPartition, st: LeaderIsr) -> bool:
        for parent in (
            paths.topic_partitions_path(tp.topic),
            paths.partition_path(tp.topic, tp.partition),
        ):
            try:
                await self.store.create(parent, b"")
            except NodeExistsError:
                pass
        rec = paths.PartitionState(st.leader, st.leader_epoch, list(st.isr), self.ctx.epoch)
        try:
            await self._fenced_multi(
                [CreateOp(paths.partition_state_path(tp.topic, tp.partition), rec.to_json())]
            )
        except NodeExistsError:
            return False
        st.zk_version = 0
        return True

    async def _update_state(self, tp: TopicPartition, st: LeaderIsr) -> bool:
        """Conditional update of a partition's state; False when the version conflicted."""
        rec = paths.PartitionState(st.leader, st.leader_epoch, list(st.isr), self.ctx.epoch)
        path = paths.partition_state_path(tp.topic, tp.partition)
        try:
            await self._fenced_multi([SetOp(path, rec.to_json(), st.zk_version)])
        except StoreError as e:
            if isinstance(e, BadVersionError):
                raise
            return False
        st.zk_version += 1
        return True

    # --- partition state changes ----------------------------------------------------------
    async def _initialize_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """NewPartition → OnlinePartition: leader = first live replica, ISR = live replicas."""
        live = set(self.ctx.live_brokers)
        for tp in tps:
            replicas = self.ctx.replicas(tp)
            live_replicas = tuple(r for r in replicas if r in live)
            if not live_replicas:
                state_change_log.error(
                    "%s Controller %d epoch %d encountered error while changing partition %s "
                    "from NewPartition to OnlinePartition: no replica of %s is alive",
                    self._prefix,
                    self.broker_id,
                    self.ctx.epoch,
                    _name(tp),
                    list(replicas),
                )
                continue
            st = LeaderIsr(live_replicas[0], 0, live_replicas, self.ctx.epoch, 0)
            if await self._create_state(tp, st):
                self.ctx.states[tp] = st
                self._log_change(tp, "NewPartition", "OnlinePartition", st)
            else:  # someone initialized it meanwhile; read it back
                await self._reload_state(tp)

    async def _reload_state(self, tp: TopicPartition) -> None:
        try:
            data, stat = await self.store.get(paths.partition_state_path(tp.topic, tp.partition))
        except NoNodeError:
            self.ctx.states.pop(tp, None)
            return
        s = paths.PartitionState.from_json(data)
        self.ctx.states[tp] = LeaderIsr(
            s.leader, s.leader_epoch, tuple(s.isr), s.controller_epoch, stat.version
        )

    async def _elect_offline_partitions(
        self, tps: Iterable[TopicPartition]
    ) -> list[TopicPartition]:
        """SPEC H3: new leaders for partitions whose leader is not alive."""
        live = set(self.ctx.live_brokers)
        changed: list[TopicPartition] = []
        for tp in tps:
            for _attempt in range(5):
                st = self.ctx.states.get(tp)
                if st is None or st.leader in live or tp.topic in self.ctx.topics_to_delete:
                    break
                unclean = (
                    self.ctx.topic_configs.get(tp.topic, {})
                    .get("unclean.leader.election.enable", str(self.unclean_default))
                    .lower()
                    == "true"
                )
                e = offline_partition_election(
                    self.ctx.replicas(tp), st.isr, live, unclean_allowed=unclean
                )
                leader = NO_LEADER if e.leader is None else e.leader
                if leader == st.leader:
                    break
                new = LeaderIsr(
                    leader,
                    st.leader_epoch + 1,
                    e.isr if e.leader is not None else st.isr,
                    self.ctx.epoch,
                    st.zk_version,
                )
                if e.unclean:
                    log.warning(
                        "%s UNCLEAN leader election for %s: %d becomes leader though not "
                        "in ISR %s; data may be lost",
                        self._prefix,
                        _name(tp),
                        leader,
                        list(st.isr),
                    )
                if await self._update_state(tp, new):
                    self.ctx.states[tp] = new
                    self._log_change(
                        tp,
                        "OfflinePartition",
                        "OnlinePartition" if e.leader is not None else "OfflinePartition",
                        new,
                    )
                    changed.append(tp)
                    break
                await self._reload_state(tp)  # conflict: retry on fresh state
        return changed

    def _log_change(self, tp: TopicPartition, old: str, new: str, st: LeaderIsr) -> None:
        state_change_log.info(
            "%s Changed partition %s from %s to %s with state LeaderAndIsr(leader=%d, "
            "leaderEpoch=%d, isr=%s, controllerEpoch=%d, zkVersion=%d)",
            self._prefix,
            _name(tp),
            old,
            new,
            st.leader,
            st.leader_epoch,
            list(st.isr),
            self.ctx.epoch,
            st.zk_version,
        )

    # --- requests to brokers ---------------------------------------------------------------
    def _endpoints(self) -> tuple[BrokerEndpoint, ...]:
        return tuple(
            BrokerEndpoint(r.broker_id, r.host, r.port, rack=r.rack)
            for _, r in sorted(self.ctx.live_brokers.items())
        )

    async def _send_leader_and_isr(
        self, broker_id: int, tps: Iterable[TopicPartition], *, is_new: bool = False
    ) -> None:
        states = []
        for tp in tps:
            st = self.ctx.states.get(tp)
            if st is None:
                continue
            states.append(
                LeaderAndIsrPartitionState(
                    tp.topic,
                    tp.partition,
                    self.ctx.epoch,
                    st.leader,
                    st.leader_epoch,
                    st.isr,
                    st.zk_version,
                    self.ctx.replicas(tp),
                    is_new=is_new,
                )
            )
        if not states:
            return
        topics = {s.topic_name for s in states}
        reg = self.ctx.live_brokers.get(broker_id)
        req = LeaderAndIsrRequest(
            self.broker_id,
            self.ctx.epoch,
            reg.epoch if reg else -1,
            tuple(states),
            {t: self.ctx.topic_ids[t] for t in topics if t in self.ctx.topic_ids},
            self._endpoints(),
        )
        await self.channel.leader_and_isr(broker_id, req)

    def _um_state(
        self, tp: TopicPartition, leader: int | None = None
    ) -> UpdateMetadataPartitionState:
        st = self.ctx.states.get(tp)
        replicas = self.ctx.replicas(tp)
        live = self.ctx.live_brokers
        if st is None:
            return UpdateMetadataPartitionState(
                tp.topic,
                tp.partition,
                self.ctx.epoch,
                NO_LEADER if leader is None else leader,
                -1,
                (),
                -1,
                replicas,
                tuple(r for r in replicas if r not in live),
            )
        return UpdateMetadataPartitionState(
            tp.topic,
            tp.partition,
            self.ctx.epoch,
            st.leader if leader is None else leader,
            st.leader_epoch,
            st.isr,
            st.zk_version,
            replicas,
            tuple(r for r in replicas if r not in live),
        )

    async def _send_update_metadata(
        self, brokers: Iterable[int], tps: Iterable[TopicPartition]
    ) -> None:
        states = tuple(self._um_state(tp) for tp in tps)
        topics = {s.topic_name for s in states}
        for b in brokers:
            reg = self.ctx.live_brokers.get(b)
            req = UpdateMetadataRequest(
                self.broker_id,
                self.ctx.epoch,
                reg.epoch if reg else -1,
                states,
                self._endpoints(),
                {t: self.ctx.topic_ids[t] for t in topics if t in self.ctx.topic_ids},
            )
            await self.channel.update_metadata(b, req)

    # --- events ----------------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        if not self.active:
            return
        before = set(self.ctx.live_brokers)
        after = await self._load_brokers()
        dead, new = before - after, after - before
        if dead:
            log.info("%s brokers %s failed", self._prefix, sorted(dead))
            affected = [tp for tp in self.ctx.all_partitions() if set(self.ctx.replicas(tp)) & dead]
            changed = await self._elect_offline_partitions(affected)
            # Dead replicas that were followers leave the ISR (leader epoch bump).
            for tp in affected:
                st = self.ctx.states.get(tp)
                if st is None or tp in changed or st.leader == NO_LEADER:
                    continue
                isr = tuple(r for r in st.isr if r not in dead)
                if isr != st.isr and isr:
                    upd = LeaderIsr(
                        st.leader, st.leader_epoch + 1, isr, self.ctx.epoch, st.zk_version
                    )
                    if await self._update_state(tp, upd):
                        self.ctx.states[tp] = upd
                        changed.append(tp)
                        self._log_change(tp, "OnlinePartition", "OnlinePartition", upd)
            await self._send_update_metadata(sorted(after), self.ctx.all_partitions())
            for b in sorted(after):
                await self._send_leader_and_isr(
                    b, [tp for tp in changed if b in self.ctx.replicas(tp)]
                )
        if new:
            log.info("%s brokers %s started", self._prefix, sorted(new))
            changed = await self._elect_offline_partitions(self.ctx.all_partitions())
            await self._send_update_metadata(sorted(after), self.ctx.all_partitions())
            for b in sorted(after):
                tps = set(changed if b not in new else self.ctx.partitions_on_broker(b))
                await self._send_leader_and_isr(
                    b,
                    [
                        tp
                        for tp in self.ctx.all_partitions()
                        if tp in tps and b in self.ctx.replicas(tp)
                    ],
                )
            await self._resume_deletions()

    async def _on_topic_change(self) -> None:
        if not self.active:
            return
        new = await self._load_topics(watch=True)
        if new:
            tps = [tp for t in new for tp in self.ctx.partitions_of(t)]
            await self._on_new_partitions(tps)

    async def _on_new_partitions(self, tps: list[TopicPartition]) -> None:
        await self._initialize_partitions(tps)
        live = sorted(self.ctx.live_brokers)
        for b in live:
            await self._send_leader_and_isr(
                b, [tp for tp in tps if b in self.ctx.replicas(tp)], is_new=True
            )
        await self._send_update_metadata(live, tps)

    async def _on_topic_modified(self, topic: str) -> None:
        """CreatePartitions rewrote the assignment: initialize the added partitions."""
        if not self.active or topic not in self.ctx.assignments:
            return
        try:
            data, _ = await self.store.get(
                paths.topic_path(topic), watch=self._watch(lambda: self._on_topic_modified(topic))
            )
        except NoNodeError:
            return
        assignment = paths.TopicAssignment.from_json(data)
        known = self.ctx.assignments[topic]
        added = {p: tuple(r) for p, r in assignment.partitions.items() if p not in known}
        if not added:
            return
        known.update(added)
        await self._on_new_partitions([TopicPartition(topic, p) for p in sorted(added)])

    async def _on_deletion_change(self) -> None:
        if not self.active:
            return
        await self._load_deletions()
        await self._resume_deletions()

    async def _resume_deletions(self) -> None:
        """SPEC H4: remove the topic from every cache, stop and delete replicas, drop znodes."""
        for topic in sorted(self.ctx.topics_to_delete):
            tps = self.ctx.partitions_of(topic)
            replicas = {r for tp in tps for r in self.ctx.replicas(tp)}
            if not replicas <= set(self.ctx.live_brokers):
                log.info(
                    "%s deletion of %s waits for replicas %s to come back",
                    self._prefix,
                    topic,
                    sorted(replicas - set(self.ctx.live_brokers)),
                )
                continue
            live = sorted(self.ctx.live_brokers)
            states = tuple(self._um_state(tp, leader=LEADER_DURING_DELETE) for tp in tps)
            for b in live:
                reg = self.ctx.live_brokers[b]
                await self.channel.update_metadata(
                    b,
                    UpdateMetadataRequest(
                        self.broker_id, self.ctx.epoch, reg.epoch, states, self._endpoints(), {}
                    ),
                )
            for b in sorted(replicas):
                parts = tuple(
                    StopReplicaPartition(tp.topic, tp.partition, LEADER_DURING_DELETE, True)
                    for tp in tps
                    if b in self.ctx.replicas(tp)
                )
                reg = self.ctx.live_brokers[b]
                await self.channel.stop_replica(
                    b, StopReplicaRequest(self.broker_id, self.ctx.epoch, reg.epoch, parts)
                )
            for path in (
                paths.topic_path(topic),
                paths.topic_config_path(topic),
                paths.delete_topic_path(topic),
            ):
                try:
                    await self.store.delete(path, recursive=True)
                except NoNodeError:
                    pass
            for tp in tps:
                state_change_log.info("%s Deleted partition %s", self._prefix, _name(tp))
            self.ctx.remove_topic(topic)
            log.info("%s deleted topic %s", self._prefix, topic)


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
