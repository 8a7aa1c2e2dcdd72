"""A simulated controller built from the real controller's pure rules.

Not the real `controller.Controller` (which is driven by store watches through an
`EmbeddedCoordinator` and a channel manager): this one keeps the durable state in `SimStore`
(what ZooKeeper would hold: controller epoch, broker registrations with their epochs,
partition states with versions) and decides with the real pieces: `election.
offline_partition_election` for a failed leader, Kafka's ZooKeeper-mode rule for removing a
failed follower from the ISR (leader epoch bumped; the last ISR member stays, leaderless),
`controller.alter_partition.check_requester` / `validate` for AlterPartition with a
conditional write (version + 1). Requests to brokers go through one ordered queue per broker,
resent until the broker answers or leaves (like the channel manager). A controller crash ends
the instance; its successor takes epoch + 1, reloads the store and resends everything.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.alter_partition import IsrChange, check_requester, validate
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.election import offline_partition_election
from wherry.coordination.paths import BrokerRegistration
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
)
from wherry.sim.network import CONTROLLER_ID, SimNetwork

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(slots=True)
class SimStore:
    """The durable metadata (ZooKeeper's part): survives controller crashes."""

    topic: str
    topic_id: uuid.UUID
    assignments: dict[int, tuple[int, ...]]
    controller_epoch: int = 0
    states: dict[TopicPartition, LeaderIsr] = field(default_factory=dict)
    registrations: dict[int, BrokerRegistration] = field(default_factory=dict)
    next_czxid: int = 100

    def register(self, broker_id: int) -> int:
        self.next_czxid += 1
        self.registrations[broker_id] = BrokerRegistration(
            broker_id, "sim", broker_id, epoch=self.next_czxid
        )
        return self.next_czxid


@dataclass(frozen=True, slots=True)
class UpdateLiveBrokers:
    """The part of UpdateMetadata the replicas use: who is alive (ISR eligibility)."""

    controller_epoch: int
    broker_epoch: int
    live: frozenset[int]


ControllerMessage = LeaderAndIsrRequest | UpdateLiveBrokers
Deliver = Callable[[int, ControllerMessage], Any]  # (broker, message) -> awaitable answer


@dataclass(frozen=True, slots=True)
class SimPartitionResult:
    partition_index: int
    error_code: int
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class SimTopicResult:
    topic_id: uuid.UUID
    partitions: tuple[SimPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class SimAlterPartitionResponse:
    """Shaped like kio's AlterPartition response (what `parse_response` reads)."""

    error_code: int
    topics: tuple[SimTopicResult, ...] = ()


class SimController:
    def __init__(
        self,
        store: SimStore,
        network: SimNetwork,
        deliver: Callable[[int, ControllerMessage], Any],
        *,
        request_timeout_ms: int = 1000,
        retry_backoff_ms: int = 50,
        unclean_election: bool = False,
    ) -> None:
        store.controller_epoch += 1
        self.store = store
        self.network = network
        self.deliver = deliver
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.unclean_election = unclean_election
        self.epoch = store.controller_epoch
        self.ctx = ControllerContext(epoch=self.epoch)
        self.ctx.topic_ids[store.topic] = store.topic_id
        self.ctx.assignments[store.topic] = dict(store.assignments)
        self.ctx.states = dict(store.states)
        self.ctx.live_brokers = dict(store.registrations)
        self._queues: dict[int, asyncio.Queue[ControllerMessage]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self.alive = True

    # --- lifecycle ------------------------------------------------------------------------
    def activate(self) -> None:
        """Failover: elect leaderless partitions, send every live broker the full
        state of its partitions and the live set."""
        if not self.store.states:
            self._create_partitions()
        for b in sorted(self.ctx.live_brokers):
            self._add_sender(b)
        self._elect_offline()
        self._send_leader_and_isr(self.ctx.all_partitions(), set(self.ctx.live_brokers))
        self._send_live_brokers()

    def crash(self) -> None:
        self.alive = False
        for t in self._senders.values():
            t.cancel()
        self._senders.clear()
        self._queues.clear()

    def _create_partitions(self) -> None:
        live = set(self.ctx.live_brokers)
        for tp in self.ctx.all_partitions():
            replicas = self.ctx.replicas(tp)
            isr = tuple(r for r in replicas if r in live)
            leader = isr[0] if isr else NO_LEADER
            self._write(tp, LeaderIsr(leader, 0, isr or replicas, self.epoch, 0))

    # --- store writes -----------------------------------------------------------------------
    def _write(self, tp: TopicPartition, state: LeaderIsr) -> None:
        self.ctx.states[tp] = state
        self.store.states[tp] = state

    def _next(self, cur: LeaderIsr, leader: int, isr: tuple[int, ...]) -> LeaderIsr:
        return LeaderIsr(leader, cur.leader_epoch + 1, isr, self.epoch, cur.zk_version + 1)

    # --- broker changes (watch events) ----------------------------------------------------------
    def on_broker_change(self) -> None:
        if not self.alive:
            return
        now = dict(self.store.registrations)
        old = self.ctx.live_brokers
        dead = {b for b, r in old.items() if b not in now or now[b].epoch != r.epoch}
        born = {b for b, r in now.items() if b not in old or old[b].epoch != r.epoch}
        if not dead and not born:
            return
        self.ctx.live_brokers = now
        for b in sorted(dead):
            self._remove_sender(b)
        changed: set[TopicPartition] = set()
        if dead:
            changed |= self._on_brokers_failed(dead)
        for b in sorted(born):
            self._add_sender(b)
        if born:
            changed |= self._elect_offline()
            # onBrokerStartup: the new broker learns all its partitions' states.
            for b in sorted(born):
                self._send_leader_and_isr(self.ctx.partitions_on_broker(b), {b})
        if changed:
            self._send_leader_and_isr(sorted(changed), set(self.ctx.live_brokers) - born)
        self._send_live_brokers()

    def _on_brokers_failed(self, dead: set[int]) -> set[TopicPartition]:
        """Failed leaders are replaced first; then each failed replica leaves the ISR (Kafka's
        removeReplicasFromIsr: the leader epoch goes up; a last member stays, leaderless)."""
        changed = self._elect_offline()
        for tp in self.ctx.all_partitions():
            cur = self.ctx.states[tp]
            isr = list(cur.isr)
            leader = cur.leader
            for r in [r for r in cur.isr if r in dead]:
                if leader == r:
                    leader = NO_LEADER
                if len(isr) > 1:
                    isr.remove(r)
            if tuple(isr) == cur.isr and leader == cur.leader:
                continue
            self._write(tp, self._next(cur, leader, tuple(isr)))
            changed.add(tp)
        return changed

    def _elect_offline(self) -> set[TopicPartition]:
        """Partitions whose leader is not live get the first live ISR member (or, only with
        unclean election enabled, any live replica: a way to prove the checker sees loss)."""
        live = set(self.ctx.live_brokers)
        changed: set[TopicPartition] = set()
        for tp in self.ctx.all_partitions():
            cur = self.ctx.states[tp]
            if cur.leader in live:
                continue
            e = offline_partition_election(
                self.ctx.replicas(tp), cur.isr, live, unclean_allowed=self.unclean_election
            )
            if e.leader is None:
                if cur.leader != NO_LEADER:
                    self._write(tp, self._next(cur, NO_LEADER, cur.isr))
                    changed.add(tp)
                continue
            self._write(tp, self._next(cur, e.leader, e.isr))
            changed.add(tp)
        return changed

    # --- AlterPartition ------------------------------------------------------------------------
    def alter_partition(self, body: Any) -> SimAlterPartitionResponse:
        if not self.alive:
            return SimAlterPartitionResponse(int(ErrorCode.not_controller))
        broker_id = int(body["broker_id"])
        err = check_requester(self.ctx, broker_id, int(body["broker_epoch"]))
        if err is not ErrorCode.none:
            return SimAlterPartitionResponse(int(err))
        topics: list[SimTopicResult] = []
        for t in body["topics"]:
            results: list[SimPartitionResult] = []
            for p in t["partitions"]:
                members = p["new_isr_with_epochs"]
                change = IsrChange(
                    t["topic_id"],
                    int(p["partition_index"]),
                    int(p["leader_epoch"]),
                    tuple(int(m["broker_id"]) for m in members),
                    tuple(int(m["broker_epoch"]) for m in members),
                    int(p["partition_epoch"]),
                )
                tp = TopicPartition(self.store.topic, change.partition)
                verdict = validate(self.ctx, broker_id, tp, change)
                state = verdict.current
                if verdict.write is not None:
                    state = LeaderIsr(
                        verdict.write.leader,
                        verdict.write.leader_epoch,
                        verdict.write.isr,
                        self.epoch,
                        verdict.write.zk_version + 1,
                    )
                    self._write(tp, state)
                if state is None:
                    results.append(SimPartitionResult(change.partition, int(verdict.error)))
                else:
                    results.append(
                        SimPartitionResult(
                            change.partition,
                            0,
                            state.leader,
                            state.leader_epoch,
                            state.isr,
                            state.zk_version,
                        )
                    )
            topics.append(SimTopicResult(t["topic_id"], tuple(results)))
        return SimAlterPartitionResponse(0, tuple(topics))

    # --- the channel ------------------------------------------------------------------------------
    def _add_sender(self, b: int) -> None:
        self._remove_sender(b)
        q: asyncio.Queue[ControllerMessage] = asyncio.Queue()
        self._queues[b] = q
        self._senders[b] = asyncio.get_running_loop().create_task(self._send_loop(b, q))

    def _remove_sender(self, b: int) -> None:
        t = self._senders.pop(b, None)
        if t is not None:
            t.cancel()
        self._queues.pop(b, None)

    async def _send_loop(self, b: int, q: asyncio.Queue[ControllerMessage]) -> None:
        while True:
            msg = await q.get()
            while True:
                try:
                    await self.network.call(
                        CONTROLLER_ID,
                        b,
                        lambda m=msg: self.deliver(b, m),  # type: ignore[misc]
                        timeout_ms=self.request_timeout_ms,
                    )
                    break
                except (ConnectionError, TimeoutError):
                    await asyncio.sleep(self.retry_backoff_ms / 1000)

    def _send(self, b: int, msg: ControllerMessage) -> None:
        q = self._queues.get(b)
        if q is not None:
            q.put_nowait(msg)

    def _send_leader_and_isr(self, tps: list[TopicPartition], to: set[int]) -> None:
        per_broker: dict[int, list[LeaderAndIsrPartitionState]] = {}
        for tp in tps:
            cur = self.ctx.states[tp]
            replicas = self.ctx.replicas(tp)
            if cur.leader == NO_LEADER:
                continue  # an offline partition: nothing to lead or follow
            for r in replicas:
                if r in to and r in self.ctx.live_brokers:
                    per_broker.setdefault(r, []).append(
                        LeaderAndIsrPartitionState(
                            tp.topic,
                            tp.partition,
                            cur.controller_epoch,
                            cur.leader,
                            cur.leader_epoch,
                            cur.isr,
                            cur.zk_version,
                            replicas,
                        )
                    )
        leaders = tuple(BrokerEndpoint(b, "sim", b) for b in sorted(self.ctx.live_brokers))
        for b, states in sorted(per_broker.items()):
            self._send(
                b,
                LeaderAndIsrRequest(
                    CONTROLLER_ID,
                    self.epoch,
                    self.ctx.live_brokers[b].epoch,
                    tuple(states),
                    {self.store.topic: self.store.topic_id},
                    leaders,
                ),
            )

    def _send_live_brokers(self) -> None:
        live = frozenset(self.ctx.live_brokers)
        for b in sorted(self.ctx.live_brokers):
            self._send(b, UpdateLiveBrokers(self.epoch, self.ctx.live_brokers[b].epoch, live))
