"""Failed log dirs, the controller's side (KIP-112; Kafka's LogDirEventNotification handling,
`onBrokerLogDirFailure` and the LeaderAndIsr response handler).

1. A broker whose log dir fails writes a sequential
   `/log_dir_event_notification/log_dir_event_<seq>` node naming itself. The controller
   watches the path; for each notification it deletes the node and sends the broker a
   LeaderAndIsr for every replica it holds (`ReplicaStateMachine.to_online`): the broker
   answers KAFKA_STORAGE_ERROR for those in a failed dir.
2. Every LeaderAndIsr answer updates `ControllerContext.replicas_on_offline_dirs` (storage
   errors in, successful answers out). Replicas newly offline lead nothing and leave their
   ISRs (Kafka's onReplicasBecomeOffline): partitions they led get an offline election among
   the other replicas (`ControllerContext.candidates_for` leaves them out), and the replicas go
   OfflineReplica (ISR shrink written, the remaining replicas told).
3. The offline replicas are kept with the broker epoch they were reported under: a broker that
   registers again (restarted, its dirs checked anew) has none. A new controller deletes the
   pending notifications: its failover sends every broker its replicas' states, whose answers
   tell the same.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext
from wherry.controller.election import ElectionStrategy
from wherry.controller.partition_state import PartitionState, PartitionStateMachine
from wherry.controller.replica_state import PartitionReplica, ReplicaStateMachine, replicas_on
from wherry.controller.request_batch import RequestBatch
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError, WatchCallback
from wherry.protocol.interbroker import LeaderAndIsrRequest, LeaderAndIsrResponse

__all__ = ["LogDirFailures"]

log = logging.getLogger(__name__)

Event = Callable[[], Awaitable[None]]


class _Controller(Protocol):
    ctx: ControllerContext
    partition_sm: PartitionStateMachine
    replica_sm: ReplicaStateMachine
    active: bool

    @property
    def store(self) -> MetadataStore: ...

    @property
    def prefix(self) -> str: ...

    async def replicas_offline(
        self, replicas: list[PartitionReplica], batch: RequestBatch, *, stop_replica: bool
    ) -> None: ...

    async def elect_with(
        self, tps: list[TopicPartition], strategy: ElectionStrategy, batch: RequestBatch
    ) -> Mapping[TopicPartition, object]: ...


class LogDirFailures:
    def __init__(
        self,
        controller: _Controller,
        send: Callable[[RequestBatch], Awaitable[None]],
        watch: Callable[[str, Event], WatchCallback],
        enqueue: Callable[[Event], None],
        new_batch: Callable[[], RequestBatch],
    ) -> None:
        self.c = controller
        self._send = send
        self._watch = watch
        self._enqueue = enqueue
        self._batch = new_batch

    # --- notifications -----------------------------------------------------------------------
    async def start_watching(self) -> None:
        """At failover: watch the notifications and drop the pending ones."""
        for name in await self._children():
            await self._delete(name)

    async def _children(self) -> list[str]:
        watch = self._watch("log_dir_events", self.on_notification)
        try:
            return await self.c.store.get_children(paths.LOG_DIR_EVENT_NOTIFICATION, watch)
        except NoNodeError:
            return []

    async def _delete(self, name: str) -> None:
        try:
            await self.c.store.delete(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}")
        except NoNodeError:
            pass

    async def on_notification(self) -> None:
        """Kafka's LogDirEventNotification event: the brokers named learn their replicas'
        states again, and their answers tell which replicas are offline."""
        if not self.c.active:
            return
        brokers: set[int] = set()
        for name in await self._children():
            try:
                data, _ = await self.c.store.get(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}")
            except NoNodeError:
                continue
            broker = paths.decode_log_dir_event(data)
            if broker is not None:
                brokers.add(broker)
            await self._delete(name)
        ctx = self.c.ctx
        live = {b for b in brokers if ctx.is_live(b)}
        if not live:
            return
        log.info("%s log dir failure notified by brokers %s", self.c.prefix, sorted(live))
        batch = self._batch()
        self.c.replica_sm.to_online(ctx, replicas_on(ctx, live), batch)  # Kafka: OnlineReplica
        await self._send(batch)

    # --- LeaderAndIsr answers ------------------------------------------------------------------
    def on_response(self, broker_id: int, req: object, resp: object) -> None:
        """A broker answered a LeaderAndIsr (called outside the event queue): the offline
        replicas it reports are handled as an event."""
        if not isinstance(req, LeaderAndIsrRequest) or not isinstance(resp, LeaderAndIsrResponse):
            return
        if resp.error_code:
            return
        names: dict[object, str] = {tid: name for name, tid in req.topic_ids.items()}
        codes = {  # v5+ answers name topics by id
            (e.topic_name or names.get(e.topic_id, ""), e.partition_index): e.error_code
            for e in resp.partition_errors
        }
        storage = int(ErrorCode.kafka_storage_error)
        offline = {TopicPartition(*k) for k, c in codes.items() if c == storage}
        online = {TopicPartition(*k) for k, c in codes.items() if c == 0}
        if not offline and not online:
            return
        epoch = req.controller_epoch

        async def event() -> None:
            if self.c.active and epoch == self.c.ctx.epoch:
                await self.answered(broker_id, offline, online)

        self._enqueue(event)

    async def answered(
        self, broker_id: int, offline: set[TopicPartition], online: set[TopicPartition]
    ) -> None:
        """Kafka's handleLeaderAndIsrResponseReceived."""
        ctx = self.c.ctx
        reg = ctx.live_brokers.get(broker_id)
        if reg is None:
            return
        before = ctx.offline_dir_replicas(broker_id)
        now = (before - online) | offline
        if now:
            ctx.replicas_on_offline_dirs[broker_id] = (reg.epoch, frozenset(now))
        else:
            ctx.replicas_on_offline_dirs.pop(broker_id, None)
        new = sorted(now - before)
        if new:
            log.warning(
                "%s replicas %s on broker %d are in an offline log dir",
                self.c.prefix,
                ", ".join(f"{tp.topic}-{tp.partition}" for tp in new),
                broker_id,
            )
            await self.replicas_offline(broker_id, new)

    async def replicas_offline(self, broker_id: int, tps: list[TopicPartition]) -> None:
        """Kafka's onReplicasBecomeOffline for one broker's replicas: partitions it led are
        elected among the others, then its replicas leave the ISRs."""
        c, ctx = self.c, self.c.ctx
        tps = [tp for tp in tps if not ctx.is_queued_for_deletion(tp.topic)]
        led = [
            tp
            for tp in tps
            if (st := ctx.states.get(tp)) is not None
            and st.leader == broker_id
            and c.partition_sm.state(tp) is not PartitionState.NON_EXISTENT
        ]
        batch = self._batch()
        if led:
            c.partition_sm.to_offline(ctx, led)
            await c.elect_with(led, ElectionStrategy.OFFLINE, batch)
        replicas = [PartitionReplica(tp, broker_id) for tp in tps]
        await c.replicas_offline(replicas, batch, stop_replica=False)
        await self._send(batch)
