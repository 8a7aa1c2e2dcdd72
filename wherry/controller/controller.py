"""The controller (Kafka 3.9's ZooKeeper-mode KafkaController): elected through `/controller`,
it decides leadership and tells brokers with LeaderAndIsr / UpdateMetadata / StopReplica.

This module orchestrates; the decisions are pure and live elsewhere:

* `partition_state` and `replica_state`: the two state machines (transition tables; they
  decide new leader/ISR states and add requests to a batch);
* `election`: leader election rules; `topic_deletion`: the deletion procedure;
* `request_batch` / `request_states`: the requests, one LeaderAndIsr, one UpdateMetadata and
  one StopReplica at most per broker and event;
* `store_client`: the store I/O (fenced writes, retried across connection loss).

Events (watch callbacks, startup, StopReplica answers) go through one queue and are processed
one at a time, like Kafka's ControllerEventManager, so no two decisions interleave. Each event
collects its requests in one `RequestBatch` and sends it at the end. Watches belong to a
*generation*: resigning starts a new one, and events from an older generation's watches are
dropped.

Session handling. A controller whose session expires (or is closed) resigns: it stops acting,
forgets its context and state machines and drops its channel queues (`sync_brokers({})`). It
does nothing more until its owner, having opened a new session (and re-registered the broker
on it), calls `restart_with(new_store)`, which runs for election again. A controller whose
fenced write fails (another controller bumped the epoch) resigns, gives up `/controller` if its
session still holds it, and runs for election again on the same session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.alter_partition import (
    DecideLeaderIsr,
    IsrChangePropagation,
    add_due_isr_changes,
    error_response,
    parse_request,
    process_alter_partition,
    unanswered_response,
)
from wherry.controller.channel import ControllerChannel, ResponseListenable
from wherry.controller.channel_manager import send_batch
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.election import ElectionStrategy, unclean_election_enabled
from wherry.controller.leader_balance import (
    DEFAULT_CHECK_INTERVAL_S,
    DEFAULT_IMBALANCE_PERCENTAGE,
)
from wherry.controller.leadership import LeadershipMoves
from wherry.controller.log_dir_events import LogDirFailures
from wherry.controller.partition_state import (
    ElectionOutcome,
    PartitionState,
    PartitionStateMachine,
)
from wherry.controller.reassign_procedure import ReassignmentProcedure
from wherry.controller.reassignment import ApiResult, Reassignment
from wherry.controller.replica_state import (
    PartitionReplica,
    ReplicaStateMachine,
    dead_isr_members,
    remove_replicas_from_isr,
    replicas_of,
    replicas_on,
)
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import (
    add_update_metadata,
    announcement,
    broker_addresses,
    build_requests,
)
from wherry.controller.store_client import ControllerMovedError, ControllerStoreClient
from wherry.controller.topic_deletion import TopicDeletionManager
from wherry.coordination.paths import TopicAssignment
from wherry.coordination.store import (
    MetadataStore,
    NodeExistsError,
    SessionExpiredError,
    SessionState,
    WatchCallback,
    WatchEvent,
)
from wherry.protocol.interbroker import NO_LEADER, StopReplicaRequest, StopReplicaResponse
from wherry.protocol.interbroker_codec import InterbrokerRequestBody, InterbrokerResponseBody
from wherry.runtime.state_change_log import batched_lines, controller_prefix, state_change_logger
from wherry.runtime.tasks import cancel_and_wait

__all__ = ["Controller", "ControllerMovedError"]

log = logging.getLogger(__name__)

Event = Callable[[], Awaitable[None]]
_TopicRead = tuple[TopicAssignment, dict[str, str], dict[TopicPartition, LeaderIsr]]
TOPICS_READ_AT_ONCE = 100  # topics whose nodes are read concurrently at failover
T = TypeVar("T")


@dataclass(slots=True)
class _Queued:
    event: Event
    generation: int | None  # None: not tied to a generation (startup, session changes)
    done: asyncio.Future[None] | None


class Controller:
    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        channel: ControllerChannel,
        *,
        unclean_leader_election_default: bool = False,
        delete_topic_enable: bool = True,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        isr_propagation: IsrChangePropagation | None = None,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        leader_imbalance_per_broker_percentage: int = DEFAULT_IMBALANCE_PERCENTAGE,
        inter_broker_listener: str | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.listener = inter_broker_listener  # brokers are reached on it (None: the first)
        self.auto_leader_rebalance = auto_leader_rebalance_enable
        self.imbalance_check_interval_s = leader_imbalance_check_interval_s
        self.imbalance_percentage = leader_imbalance_per_broker_percentage
        self.channel = channel
        self.unclean_default = unclean_leader_election_default
        self.delete_topic_enable = delete_topic_enable
        self._now_ms = now_ms
        self.ctx = ControllerContext()
        self.partition_sm = PartitionStateMachine(broker_id)
        self.replica_sm = ReplicaStateMachine(broker_id)
        self.deletion = TopicDeletionManager(broker_id)
        self.active = False
        self.active_controller_id = -1
        self._queue: asyncio.Queue[_Queued] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._generation = 0
        self._watchers: dict[str, WatchCallback] = {}
        # Committed ISR changes (AlterPartition) wait here for a batched push.
        self.isr_propagation = isr_propagation or IsrChangePropagation()
        self._isr_task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._zk = ControllerStoreClient(store, self._on_session_state)
        self.reassignments = ReassignmentProcedure(self)
        self.leadership = LeadershipMoves(self)
        self.log_dirs = LogDirFailures(self, self._send, self._watch, self._enqueue, self._batch)
        if isinstance(channel, ResponseListenable):
            channel.add_response_listener(self.on_broker_response)

    @property
    def store(self) -> MetadataStore:
        return self._zk.store

    @property
    def zk(self) -> ControllerStoreClient:
        return self._zk

    @property
    def prefix(self) -> str:
        return controller_prefix(self.broker_id, self.ctx.epoch)

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the event loop and run for controller (returns after the first election)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"controller-{self.broker_id}")
        if self._isr_task is None:
            self._isr_task = asyncio.create_task(
                self._run_isr_propagation(), name=f"isr-change-propagation-{self.broker_id}"
            )
        if self._rebalance_task is None and self.auto_leader_rebalance:
            self._rebalance_task = asyncio.create_task(
                self._run_auto_rebalance(), name=f"auto-leader-rebalance-{self.broker_id}"
            )
        await self.submit(self._elect)

    async def stop(self) -> None:
        """Stop processing events and resign (the owner closes the session, which frees
        `/controller`)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        while not self._queue.empty():  # nobody will process them: release their waiters
            item = self._queue.get_nowait()
            if item.done is not None and not item.done.done():
                item.done.set_result(None)
        if self._isr_task is not None:
            await cancel_and_wait(self._isr_task)
            self._isr_task = None
        if self._rebalance_task is not None:
            await cancel_and_wait(self._rebalance_task)
            self._rebalance_task = None
        await self._resign("controller stopped")
        self._zk.close()
        if isinstance(self.channel, ResponseListenable):
            self.channel.remove_response_listener(self.on_broker_response)

    async def restart_with(self, store: MetadataStore) -> None:
        """Continue on a new session (after the old one expired): resign if still acting and
        run for election on `store`. The owner re-registers its broker on `store` first."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"controller-{self.broker_id}")

        async def restart() -> None:
            self._zk.close()
            await self._resign("restarting on a new session")
            self.active_controller_id = -1
            self._zk = ControllerStoreClient(store, self._on_session_state)
            await self._elect()

        await self.submit(restart)

    async def submit(self, event: Event) -> None:
        """Run an event on the controller's queue and wait until it has been processed
        (errors are handled and logged by the queue, not raised here)."""
        if self._task is None:
            return  # stopped: nothing runs events any more
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Queued(event, None, done))
        await done

    def _enqueue(self, event: Event, generation: int | None = None) -> None:
        self._queue.put_nowait(_Queued(event, generation, None))

    def _watch(self, key: str, event: Event) -> WatchCallback:
        """One callback per key and generation (the store fires a callback registered twice
        for the same node once)."""
        w = self._watchers.get(key)
        if w is None:
            gen = self._generation

            def fire(_: WatchEvent) -> None:
                if gen == self._generation:
                    self._enqueue(event, gen)

            self._watchers[key] = w = fire
        return w

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if item.generation is None or item.generation == self._generation:
                    await self._process(item.event)
            finally:
                if item.done is not None and not item.done.done():
                    item.done.set_result(None)

    async def _process(self, event: Event) -> None:
        try:
            await event()
        except ControllerMovedError as e:
            log.warning("%s controller moved: %s; resigning", self.prefix, e)
            await self._resign(f"controller moved: {e}")
            try:
                await self._zk.delete_own_controller()
            except SessionExpiredError:
                return
            except Exception:
                log.exception("%s could not give up /controller", self.prefix)
            self._enqueue(self._elect)
        except SessionExpiredError as e:
            log.warning("%s session ended (%s); resigning", self.prefix, e)
            await self._resign("session ended")
            self.active_controller_id = -1
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s error processing a controller event", self.prefix)

    def _on_session_state(self, state: SessionState) -> None:
        self._enqueue(self._on_session_end)

    async def _on_session_end(self) -> None:
        if not self._zk.session_dead:
            return  # a restart already moved to a new session
        log.warning("%s session expired or closed; resigning until restarted", self.prefix)
        await self._resign("session expired")
        self.active_controller_id = -1

    # --- election and resignation ------------------------------------------------------------
    async def _elect(self) -> None:
        if self._zk.session_dead:
            return
        for _ in range(10):
            node = await self._zk.read_controller(self._watch("controller", self._elect))
            if node is not None:
                if node.owner_session == self._zk.session_id:
                    if self.active:
                        return  # still us
                    await self._zk.delete_own_controller()  # ours, yet resigned: run again
                    continue
                if self.active:
                    await self._resign(f"broker {node.broker_id} is the controller now")
                    continue  # read again, watching in the new generation
                self.active_controller_id = node.broker_id
                return
            try:
                epoch, epoch_zk_version = await self._zk.register_controller(
                    self.broker_id, self._now_ms()
                )
            except NodeExistsError:
                continue
            await self._on_controller_failover(epoch, epoch_zk_version)
            return
        log.warning("%s gave up an election round; waiting for /controller to change", self.prefix)

    async def _resign(self, reason: str) -> None:
        """Kafka's onControllerResignation: stop acting, forget everything, drop the queues."""
        was_active, prefix = (
            self.active or self.active_controller_id == self.broker_id,
            self.prefix,
        )
        self._generation += 1
        self._watchers = {}
        self.active = False
        if self.active_controller_id == self.broker_id:
            self.active_controller_id = -1
        self.ctx = ControllerContext()
        self.isr_propagation.clear()
        self.partition_sm.clear()
        self.replica_sm.clear()
        if was_active:
            log.info("%s resigned: %s", prefix, reason)
            state_change_logger.info("%s Resigned as controller: %s", prefix, reason)
        try:
            await self.channel.sync_brokers({})
        except Exception:
            log.exception("%s could not clear the channel's brokers", prefix)

    async def _on_controller_failover(self, epoch: int, epoch_zk_version: int) -> None:
        """Kafka's onControllerFailover."""
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=epoch_zk_version)
        self.active_controller_id = self.broker_id
        self.isr_propagation.last_propagation_ms = self._now_ms()  # full metadata goes out
        log.info("%s elected as controller with epoch %d", self.prefix, epoch)
        state_change_logger.info("%s Became controller", self.prefix)
        ctx = self.ctx
        await self._zk.ensure_paths()
        # Watches and context: brokers, topics (with their assignments and states), deletions.
        ctx.live_brokers = await self._zk.live_brokers(
            self._watch("brokers", self._on_broker_change)
        )
        names = sorted(await self._zk.topics(self._watch("topics", self._on_topic_change)))
        for i in range(0, len(names), TOPICS_READ_AT_ONCE):  # read at once, applied in order
            chunk = names[i : i + TOPICS_READ_AT_ONCE]
            reads = await asyncio.gather(*map(self._read_topic, chunk))
            for t, read in zip(chunk, reads, strict=True):
                self._apply_topic(t, read)
        queued = await self._zk.deletions(self._watch("deletions", self._on_deletion_change))
        legacy = await self._zk.reassignment_request(
            self._watch("admin:reassign", self._on_reassign_node)
        )
        preferred = await self._zk.preferred_election_request(
            self._watch("admin:elect", self._on_preferred_node)
        )
        await self.channel.sync_brokers(broker_addresses(ctx.live_brokers, self.listener))
        await self.log_dirs.start_watching()
        await self._init_deletions(queued)
        self.replica_sm.initialize(ctx)
        self.partition_sm.initialize(ctx)
        announced = announcement(self._batch(), ctx, ctx.live_brokers)
        await self._send(announced)
        sent = dict(announced.update_metadata_states)  # what the brokers' queues hold already
        batch = self._batch()
        await self.reassignments.drop_strays(batch)  # before the LeaderAndIsr below
        self.replica_sm.to_online(
            ctx,
            [
                r
                for r in replicas_on(ctx, set(ctx.live_brokers))
                if not ctx.is_queued_for_deletion(r.tp.topic)
            ],
            batch,
        )
        batch.mark_full(ctx.live_brokers)  # a stray missed its StopReplica: the broker drops it
        await self._trigger_online(batch)
        # The elected leaders go out now, as Kafka's partition state machine startup sends its
        # own batch: the ISR writes below (one per partition with a dead replica, thousands
        # when a broker died with the controller) must not hold the new leaders back.
        batch.drop_metadata_sent(sent, ctx.live_brokers)
        await self._send(batch)
        batch = self._batch()
        # Replicas on brokers that died while no controller watched leave the ISRs.
        await self.replicas_offline(dead_isr_members(ctx), batch, stop_replica=False)
        add_update_metadata(batch, ctx, ctx.live_brokers, ctx.all_partitions())
        batch.drop_metadata_sent(sent, ctx.live_brokers)
        await self._send(batch)
        self.active = True  # acting (`active`) once the context is loaded and announced
        batch = self._batch()
        await self.reassignments.resume(legacy, batch)
        if preferred is not None:
            await self.leadership.preferred_node_election(preferred, batch)
        await self._try_deletions(batch)
        await self._send(batch)

    async def replicas_offline(
        self, replicas: list[PartitionReplica], batch: RequestBatch, *, stop_replica: bool
    ) -> None:
        """OfflineReplica: the replicas leave their partitions' ISRs and leadership (written),
        the remaining replicas hear of it; with `stop_replica` each replica is stopped."""
        ctx, rsm = self.ctx, self.replica_sm
        removals = rsm.offline_isr_changes(ctx, replicas)
        epoch = ctx.epoch

        def shrink(tp: TopicPartition, cur: LeaderIsr) -> LeaderIsr | None:
            return remove_replicas_from_isr(cur, removals[tp], epoch)

        written = await self.update_leader_isr(sorted(removals), shrink)
        rsm.complete_offline(ctx, replicas, written, batch, stop_replica=stop_replica)

    # --- loading -----------------------------------------------------------------------------
    def _modifications_event(self, topic: str) -> Event:
        async def event() -> None:
            await self._on_partition_modifications(topic)

        return event

    async def _load_topic(self, topic: str) -> bool:
        return self._apply_topic(topic, await self._read_topic(topic))

    async def _read_topic(self, topic: str) -> _TopicRead | None:
        """A topic's assignment (watched), config and partition states; None if it is gone."""
        a = await self._zk.topic_assignment(
            topic, self._watch(f"topic:{topic}", self._modifications_event(topic))
        )
        if a is None:
            return None
        config = await self._zk.topic_config(topic)
        states = await self._zk.partition_states([TopicPartition(topic, p) for p in a.partitions])
        return a, config, states

    def _apply_topic(self, topic: str, read: _TopicRead | None) -> bool:
        if read is None:
            return False
        a, config, states = read
        ctx = self.ctx
        if a.topic_id.int != 0:
            ctx.topic_ids[topic] = a.topic_id
        ctx.assignments[topic] = {p: tuple(r) for p, r in a.partitions.items()}
        for p, r in a.partitions.items():
            ctx.set_reassignment(
                TopicPartition(topic, p),
                Reassignment(tuple(r), tuple(a.adding.get(p, ())), tuple(a.removing.get(p, ()))),
            )
        ctx.topic_configs[topic] = config
        ctx.states.update(states)
        return True

    async def _reload_state(self, tp: TopicPartition) -> None:
        st = await self._zk.partition_state(tp)
        if st is None:
            self.ctx.states.pop(tp, None)
        else:
            self.ctx.states[tp] = st

    async def _init_deletions(self, queued: list[str]) -> None:
        if not self.delete_topic_enable:
            for t in queued:
                log.info(
                    "%s topic deletion is disabled; dropping the request for %s", self.prefix, t
                )
                await self._zk.delete_deletion_marker(t)
            return
        for t in queued:
            if t not in self.ctx.assignments:
                await self._zk.delete_deletion_marker(t)  # the topic is gone already
        self.deletion.init(self.ctx, queued)

    # --- writing partition states ------------------------------------------------------------
    async def update_leader_isr(
        self,
        tps: Iterable[TopicPartition],
        decide: DecideLeaderIsr,
    ) -> dict[TopicPartition, LeaderIsr]:
        """Write each partition's new state (decided from its current one) conditionally; a
        partition whose state node changed meanwhile is re-read and decided again (Kafka's
        retry loop). Returns what was written (also put in `ctx.states`)."""
        return await self._zk.write_leader_isr(self.ctx, tps, decide, self.prefix)

    async def _unclean_settings(self, tps: Iterable[TopicPartition]) -> dict[str, bool]:
        """`unclean.leader.election.enable` per topic, read from the store for topics that have
        a partition whose election depends on it (Kafka reads it at election time)."""
        out: dict[str, bool] = {}
        default: bool | None = None  # the broker default: dynamic (own > cluster) or static
        for tp in tps:
            if tp.topic in out or not self.partition_sm.needs_unclean_config(self.ctx, tp):
                continue
            if default is None:
                dynamic = await self._zk.dynamic_broker_config(self.broker_id)
                default = unclean_election_enabled(dynamic, self.unclean_default)
            cfg = await self._zk.topic_config(tp.topic)
            self.ctx.topic_configs[tp.topic] = cfg
            out[tp.topic] = unclean_election_enabled(cfg, default)
        return out

    # --- partition state changes -------------------------------------------------------------
    async def _to_online(self, tps: Iterable[TopicPartition], batch: RequestBatch) -> None:
        """Kafka's handleStateChanges(partitions, OnlinePartition) with the offline election:
        new partitions get their first state, offline (or online) ones an election."""
        ctx, psm = self.ctx, self.partition_sm
        valid = psm.valid(ctx, tps, PartitionState.ONLINE)
        elect = [tp for tp in valid if psm.state(tp) is not PartitionState.NEW]
        initial: list[tuple[TopicPartition, LeaderIsr]] = []
        for tp in valid:
            if psm.state(tp) is not PartitionState.NEW:
                continue
            st = psm.initial_leader_isr(ctx, tp)
            if st is not None:
                initial.append((tp, st))
        versions = await self._zk.create_partition_states(initial, ctx.epoch_zk_version)
        pairs = list(zip(initial, versions, strict=True))
        existing = [tp for (tp, _), version in pairs if version is None]
        with batched_lines():
            for (tp, st), version in pairs:
                if version is not None:
                    ctx.states[tp] = replace(st, zk_version=version)
                    psm.complete_online(ctx, tp, batch, is_new=True)
        for tp in existing:  # initialized meanwhile (by an earlier controller): elect
            await self._reload_state(tp)
            if tp in ctx.states:
                elect.append(tp)
        if elect:
            await self._elect_leaders(elect, batch)

    async def _elect_leaders(self, tps: list[TopicPartition], batch: RequestBatch) -> None:
        await self.elect_with(tps, ElectionStrategy.OFFLINE, batch)

    async def elect_with(
        self, tps: list[TopicPartition], strategy: ElectionStrategy, batch: RequestBatch
    ) -> dict[TopicPartition, ElectionOutcome]:
        """Elect, write and announce leaders with `strategy` (the offline election reads each
        topic's unclean setting; the unclean one allows it anyway)."""
        ctx, psm = self.ctx, self.partition_sm
        unclean = (
            await self._unclean_settings(tps) if strategy is ElectionStrategy.OFFLINE else {}
        )
        outcomes: dict[TopicPartition, ElectionOutcome] = {}

        def decide(tp: TopicPartition, cur: LeaderIsr) -> LeaderIsr | None:
            allowed = unclean.get(
                tp.topic,
                unclean_election_enabled(ctx.topic_configs.get(tp.topic, {}), self.unclean_default),
            )
            outcomes[tp] = o = psm.elect(ctx, tp, cur, unclean_allowed=allowed, strategy=strategy)
            return o.leader_isr

        written = await self.update_leader_isr(tps, decide)
        with batched_lines():  # thousands of elections at a failover: one log record
            for tp in tps:
                if tp in written:
                    outcomes[tp] = replace(outcomes[tp], written=True)
                    psm.complete_online(ctx, tp, batch, unclean=outcomes[tp].unclean)
                else:
                    o = outcomes.get(tp)
                    if o is not None and o.error is not None:
                        psm.fail_online(ctx, tp, o.error)
        return outcomes

    async def _trigger_online(self, batch: RequestBatch) -> None:
        """Kafka's triggerOnlinePartitionStateChange: new and offline partitions (of topics
        not being deleted) try to go online."""
        tps = [
            tp
            for tp in self.partition_sm.partitions_in(PartitionState.NEW, PartitionState.OFFLINE)
            if not self.ctx.is_queued_for_deletion(tp.topic)
        ]
        if tps:
            await self._to_online(tps, batch)

    async def _on_new_partitions(self, tps: list[TopicPartition]) -> None:
        """Kafka's onNewPartitionCreation."""
        ctx, batch = self.ctx, self._batch()
        replicas = replicas_of(ctx, tps)
        with batched_lines():  # a topic of many partitions: one log record
            self.partition_sm.to_new(ctx, tps)
            self.replica_sm.to_new(ctx, replicas, batch)
        await self._to_online(tps, batch)
        self.replica_sm.to_online(ctx, replicas, batch)
        add_update_metadata(batch, ctx, ctx.live_brokers, tps)
        await self._send(batch)

    # --- broker changes ----------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        if not self.active:
            return
        ctx = self.ctx
        before = dict(ctx.live_brokers)
        current = await self._zk.live_brokers(self._watch("brokers", self._on_broker_change))
        new = sorted(set(current) - set(before))
        dead = sorted(set(before) - set(current))
        bounced = sorted(
            b for b in set(current) & set(before) if current[b].epoch != before[b].epoch
        )
        await self.channel.sync_brokers(broker_addresses(current, self.listener))
        if not (new or dead or bounced):
            ctx.live_brokers = current
            return
        log.info("%s broker change: new %s, dead %s, bounced %s", self.prefix, new, dead, bounced)
        batch = self._batch()
        ctx.shutting_down.difference_update([*dead, *bounced])
        if dead or bounced:
            ctx.live_brokers = {b: r for b, r in current.items() if b not in bounced}
            await self._on_broker_failure([*dead, *bounced], batch)
        ctx.live_brokers = current
        if new or bounced:
            await self._on_broker_startup(sorted([*new, *bounced]), batch)
            await self.reassignments.on_brokers_started([*new, *bounced], batch)
        add_update_metadata(
            batch, ctx, ctx.live_brokers, ctx.partitions_on_brokers({*dead, *new, *bounced})
        )
        await self._try_deletions(batch)
        await self._send(batch)

    async def _on_broker_failure(self, dead: list[int], batch: RequestBatch) -> None:
        """Kafka's onBrokerFailure / onReplicasBecomeOffline: partitions led by a dead broker
        go offline and are elected again; the dead replicas leave the ISRs."""
        ctx, psm, rsm = self.ctx, self.partition_sm, self.replica_sm
        replicas = replicas_on(ctx, set(dead))
        for_deletion = [r for r in replicas if ctx.is_queued_for_deletion(r.tp.topic)]
        others = [r for r in replicas if not ctx.is_queued_for_deletion(r.tp.topic)]
        offline_leader = [
            tp
            for tp, st in sorted(ctx.states.items())
            if (st.leader == NO_LEADER or not ctx.is_live(st.leader))
            and not ctx.is_queued_for_deletion(tp.topic)
            and psm.state(tp) is not PartitionState.NON_EXISTENT
        ]
        psm.to_offline(ctx, offline_leader)
        await self._trigger_online(batch)
        await self.replicas_offline(others, batch, stop_replica=False)
        if for_deletion:
            self.deletion.fail_replica_deletion(ctx, rsm, for_deletion)

    async def _on_broker_startup(self, new: list[int], batch: RequestBatch) -> None:
        """Kafka's onBrokerStartup: the new brokers learn every partition first (`announcement`),
        their replicas come online (in a FULL LeaderAndIsr: a partition the broker still holds
        but is no longer a replica of is dropped), offline partitions are elected, pending
        deletions resume."""
        ctx = self.ctx
        await self._send(announcement(self._batch(), ctx, new))
        replicas = replicas_on(ctx, set(new))
        self.replica_sm.to_online(ctx, replicas, batch)
        batch.mark_full(new)
        await self._trigger_online(batch)
        add_update_metadata(batch, ctx, ctx.live_brokers, ctx.all_partitions())
        deleting = {r.tp.topic for r in replicas if ctx.is_queued_for_deletion(r.tp.topic)}
        if deleting:
            self.deletion.resume_for(ctx, deleting)

    # --- topics ------------------------------------------------------------------------------
    async def _on_topic_change(self) -> None:
        if not self.active:
            return
        ctx = self.ctx
        names = set(await self._zk.topics(self._watch("topics", self._on_topic_change)))
        for t in sorted(set(ctx.assignments) - names):  # removed behind our back
            log.info("%s topic %s disappeared from the store", self.prefix, t)
            self._forget_topic(t)
        loaded = [t for t in sorted(names - set(ctx.assignments)) if await self._load_topic(t)]
        if loaded:
            log.info("%s new topics %s", self.prefix, loaded)
            await self._on_new_partitions([tp for t in loaded for tp in ctx.partitions_of(t)])

    def _forget_topic(self, topic: str) -> None:
        ctx = self.ctx
        tps = ctx.partitions_of(topic)
        self.replica_sm.forget(replicas_of(ctx, tps))
        self.partition_sm.forget(tps)
        ctx.remove_topic(topic)

    async def _on_partition_modifications(self, topic: str) -> None:
        """CreatePartitions rewrote the assignment: initialize the added partitions."""
        ctx = self.ctx
        if not self.active or topic not in ctx.assignments:
            return
        a = await self._zk.topic_assignment(
            topic, self._watch(f"topic:{topic}", self._modifications_event(topic))
        )
        if a is None:
            return
        if ctx.is_queued_for_deletion(topic):
            log.info("%s ignoring new partitions of %s: it is being deleted", self.prefix, topic)
            return
        known = ctx.assignments[topic]
        added = {p: tuple(r) for p, r in a.partitions.items() if p not in known}
        if not added:
            return
        known.update(added)
        await self._on_new_partitions([TopicPartition(topic, p) for p in sorted(added)])

    async def _on_deletion_change(self) -> None:
        if not self.active:
            return
        names = await self._zk.deletions(self._watch("deletions", self._on_deletion_change))
        if not self.delete_topic_enable:
            await self._init_deletions(names)
            return
        for t in names:
            if t not in self.ctx.assignments:
                await self._zk.delete_deletion_marker(t)
        self.deletion.enqueue(self.ctx, names)
        batch = self._batch()
        await self._try_deletions(batch)
        await self._send(batch)

    async def _try_deletions(self, batch: RequestBatch) -> None:
        """Kafka's resumeDeletions: start what can start; finish topics fully deleted."""
        ctx = self.ctx
        if not ctx.topics_to_delete:
            return
        for topic in self.deletion.plan(ctx, self.partition_sm, self.replica_sm, batch):
            await self._zk.delete_topic_nodes(topic, ctx.epoch_zk_version)
            self.deletion.complete(ctx, self.partition_sm, self.replica_sm, topic)

    def on_broker_response(
        self, broker_id: int, request: InterbrokerRequestBody, response: InterbrokerResponseBody
    ) -> None:
        """A broker answered (called by a queueing channel, or by `_send` with an in-process
        broker's answer): StopReplica answers drive topic deletion; LeaderAndIsr, log dirs."""
        self.log_dirs.on_response(broker_id, request, response)
        if isinstance(request, StopReplicaRequest) and isinstance(response, StopReplicaResponse):

            async def event() -> None:
                await self._on_stop_replica_response(broker_id, request, response)

            self._enqueue(event)

    async def _on_stop_replica_response(
        self, broker_id: int, req: StopReplicaRequest, resp: StopReplicaResponse
    ) -> None:
        ctx = self.ctx
        if not self.active or req.controller_epoch != ctx.epoch:
            return
        deleting = [p for p in req.partitions if p.delete_partition]
        if not deleting:
            return
        per = {(e.topic_name, e.partition_index): e.error_code for e in resp.partition_errors}
        errors: Mapping[TopicPartition, int] = {
            TopicPartition(p.topic_name, p.partition_index): resp.error_code
            or per.get((p.topic_name, p.partition_index), 0)
            for p in deleting
        }
        self.deletion.stop_replica_answered(ctx, self.replica_sm, broker_id, errors)
        batch = self._batch()
        await self._try_deletions(batch)
        await self._send(batch)

    # --- AlterPartition (controller/alter_partition.py) -----------------------------------
    async def alter_partition(self, body: Any) -> dict[str, Any]:
        """A partition leader's AlterPartition request (kio v2/v3 body), processed on the
        event queue; returns the response as a version-neutral mapping."""
        req = parse_request(body)
        answer: dict[str, Any] = {}

        async def event() -> None:
            if not self.active:
                answer.update(error_response(ErrorCode.not_controller))
                return
            outcome = await process_alter_partition(
                self.ctx, req, self.update_leader_isr, controller_id=self.broker_id
            )
            if outcome.written:
                self.isr_propagation.record(outcome.written, self._now_ms())
            answer.update(outcome.response)
            if outcome.written and self.ctx.reassigning:
                batch = self._batch()
                await self.reassignments.on_isr_change(outcome.written, batch)
                await self._send(batch)

        await self.submit(event)
        if not answer:  # the event failed (logged by the queue), perhaps resigning
            return unanswered_response(still_active=self.active)
        return answer

    async def propagate_isr_changes(self) -> None:
        """An event: send due ISR changes to every live broker as UpdateMetadata."""
        if not self.active:
            self.isr_propagation.clear()
            return
        batch = self._batch()
        add_due_isr_changes(batch, self.ctx, self.isr_propagation, self._now_ms())
        await self._send(batch)

    async def _run_isr_propagation(self) -> None:
        """The `isr-change-propagation` ticker: checks every `check_interval_ms` and queues
        `propagate_isr_changes` (in the current generation) when ISRs changed."""
        while True:
            await asyncio.sleep(self.isr_propagation.check_interval_ms / 1000)
            if self.isr_propagation.changed:
                self._enqueue(self.propagate_isr_changes, self._generation)

    # --- cluster operations (reassign_procedure.py, leadership.py) ----------------------------
    async def _acting(self, work: Callable[[RequestBatch], Awaitable[T]]) -> T | None:
        """Run `work` as an event with a batch that is sent after it; None when this
        controller is not acting (the caller answers NOT_CONTROLLER)."""
        out: list[T] = []

        async def event() -> None:
            if not self.active:
                return
            batch = self._batch()
            try:
                out.append(await work(batch))
            finally:
                await self._send(batch)

        await self.submit(event)
        return out[0] if out else None

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ApiResult] | None:
        """AlterPartitionReassignments: start (or replace) each target; None cancels."""
        return await self._acting(lambda batch: self.reassignments.alter(targets, batch))

    async def list_partition_reassignments(
        self, partitions: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, Reassignment] | None:
        return await self._acting(lambda _: self.reassignments.ongoing(partitions))

    async def elect_leaders(
        self, election_type: int, partitions: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, ApiResult] | None:
        """ElectLeaders: 0 preferred, 1 unclean; None means every partition."""
        return await self._acting(
            lambda batch: self.leadership.elect(election_type, partitions, batch)
        )

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[ErrorCode, list[TopicPartition]]:
        answer = await self._acting(
            lambda batch: self.leadership.controlled_shutdown(broker_id, broker_epoch, batch)
        )
        return (ErrorCode.not_controller, []) if answer is None else answer

    async def _on_reassign_node(self) -> None:
        """`/admin/reassign_partitions` was created or changed (by us too: the watch is on
        existence and data; what is already running is not started again)."""
        if not self.active:
            return
        requested = await self._zk.reassignment_request(
            self._watch("admin:reassign", self._on_reassign_node)
        )
        if requested is not None:
            batch = self._batch()
            await self.reassignments.on_legacy_request(requested, batch)
            await self._send(batch)

    async def _on_preferred_node(self) -> None:
        watch = self._watch("admin:elect", self._on_preferred_node)
        if self.active and (tps := await self._zk.preferred_election_request(watch)) is not None:
            batch = self._batch()
            await self.leadership.preferred_node_election(tps, batch)
            await self._send(batch)

    async def _auto_rebalance(self) -> None:
        if not self.active:
            return
        batch = self._batch()
        moved = await self.leadership.auto_rebalance(self.imbalance_percentage, batch)
        if moved:
            log.info("%s auto leader rebalance moved %d partitions", self.prefix, len(moved))
        await self._send(batch)

    async def _run_auto_rebalance(self) -> None:
        """Kafka's auto-leader-rebalance-task: every `leader.imbalance.check.interval.seconds`
        (the first check after 5 s at most), queued in the current generation."""
        await asyncio.sleep(min(5.0, self.imbalance_check_interval_s))
        while True:
            if self.active:
                self._enqueue(self._auto_rebalance, self._generation)
            await asyncio.sleep(self.imbalance_check_interval_s)

    # --- requests ----------------------------------------------------------------------------
    def _batch(self) -> RequestBatch:
        return RequestBatch(self.broker_id, self.ctx.epoch)

    async def _send(self, batch: RequestBatch) -> None:
        if batch.is_empty():
            return
        sent = await send_batch(self.channel, build_requests(batch, self.ctx, self.listener))
        for req, resp in sent:
            if resp is not None and not isinstance(resp, int):
                self.on_broker_response(req.broker_id, req.body, resp)
