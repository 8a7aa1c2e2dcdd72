"""KIP-848 consumer groups in the simulation: the real group coordinator on every
simulated broker, members heartbeating through `SimNetwork`, and coordinator crashes.

Each broker runs the group coordinator the broker runs (`coordinator/groups.py`, on the
coordinator runtime): the pure `group.GroupCoordinator` on `__consumer_offsets` (acks=all
appends through the broker's real replica manager; the partition loaded from its log when
this broker becomes its leader and unloaded when it stops), its session and rebalance
deadlines on the replica node's ticker, which a parked heartbeat or join wakes.
`SimMember`s are KIP-848 consumers of the simulation's topic: ConsumerGroupHeartbeat to the
group coordinator (found with FindCoordinator, `lookup.py`) over the simulated network,
owning what the last answer assigned, rejoining at epoch 0 when fenced, sometimes leaving and
coming back, sometimes crashing the coordinator's broker a few ms after a heartbeat.

Checked (`GroupLedger`):
* a coordinator never gives a partition to a member while another owns it (the group's own
  assertion, which fails the run);
* after every load of the partition by its leader at the stored leader epoch, each group
  rebuilt from the log equals a state the coordinators had written, and none older than the
  last one whose write was acknowledged (epochs, members, member epochs and states,
  assignments and the target);
* after healing, the group settles: Stable on the coordinator, every partition of the topic
  assigned once, each member owning what the coordinator says.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import LeaderIsr
from wherry.group.consumer_coordinator import HeartbeatRequest, HeartbeatResult, TopicsImage
from wherry.group.consumer_group import ConsumerGroup, TopicMeta
from wherry.group.coordinator import GroupCoordinator
from wherry.group.records import OFFSETS_TOPIC
from wherry.server.groups import GroupsRuntime
from wherry.sim.broker_checks import current_leader
from wherry.sim.edges import sim_edges
from wherry.sim.invariants import InvariantViolation
from wherry.sim.lookup import ClusterView
from wherry.sim.network import CLIENT_ID, SimNetwork
from wherry.sim.node import SimBroker
from wherry.sim.wire import SimClients

log = logging.getLogger(__name__)

E = ErrorCode
GROUP = "sim-group"
CONSUMER_GROUP_HEARTBEAT_KEY = 68
RETRIABLE = frozenset(
    {E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress}
)


@dataclass(frozen=True, slots=True)
class GroupSimConfig:
    members: int = 3
    heartbeat_interval_ms: int = 100
    session_timeout_ms: int = 1_500
    rebalance_timeout_ms: int = 1_000
    request_timeout_ms: int = 500  # two lost heartbeats in a row stay within the session
    leave_probability: float = 0.01  # per heartbeat
    crash_probability: float = 0.01  # per heartbeat, with faults on


class World(Protocol):
    network: SimNetwork
    broker_ids: list[int]

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...

    def incarnation(self, node_id: int) -> int | None: ...

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None: ...

    def crash_coordinator(self, broker_id: int, why: str) -> None: ...


# --- the ledger ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Written:
    snapshot: object
    acked: bool = False


@dataclass(slots=True)
class GroupLedger:
    """Every state a coordinator wrote for each group, in write order, with whether the
    write was acknowledged."""

    writes: dict[str, list[_Written]] = field(default_factory=dict)
    reloads_checked: int = 0
    deposed_loads: int = 0  # by a leader the controller had moved on from: not checked

    def observe(self, group: ConsumerGroup) -> Callable[[ErrorCode], None]:
        entry = _Written(None if group.dead else group.snapshot())
        self.writes.setdefault(group.group_id, []).append(entry)

        def done(error: ErrorCode) -> None:
            entry.acked = error == E.none

        return done

    def check_reload(self, broker_id: int, coordinator: GroupCoordinator) -> None:
        for group_id, entries in self.writes.items():
            rebuilt = coordinator.consumer_groups.get(group_id)
            got = None if rebuilt is None else rebuilt.snapshot()
            last_acked = max((i for i, w in enumerate(entries) if w.acked), default=-1)
            allowed = [w.snapshot for w in entries[max(last_acked, 0) :]]
            if last_acked < 0:
                allowed.append(None)
            if got not in allowed:
                raise InvariantViolation(
                    f"consumer group {group_id} rebuilt by broker {broker_id} is {got}, not a "
                    f"state written since the last acknowledged one "
                    f"({entries[last_acked].snapshot if last_acked >= 0 else None})"
                )
            self.reloads_checked += 1


# --- one broker's coordinator ------------------------------------------------------------------


class GroupHost(GroupsRuntime):
    """One broker process's group coordinator, built as `wherry server` builds it
    (`server/groups.py`) on the simulation's edges (its log read inline), every reload by the
    current leader checked against the ledger."""

    def __init__(
        self, world: World, node: SimBroker, config: GroupSimConfig, ledger: GroupLedger
    ) -> None:
        self.world = world
        self.node = node
        self.ledger = ledger
        edges = sim_edges(world, node, group_settings(config))
        super().__init__(edges, on_loaded=self._loaded)
        self.coordinator.consumer_groups.write_observer = ledger.observe
        self.coordinator.startup()
        node.services.append(self)
        node.group_host = self

    def _loaded(self, partition: int) -> None:
        """Check the groups rebuilt by a leader at the stored leader epoch. A deposed leader
        the controller has moved on from (a LeaderAndIsr resent after a lost answer, applied
        just before the newer one) may load an older state: leader epochs fence it, none of
        its writes can be acknowledged, and a later load by the current leader is checked."""
        if current_leader(self.world, TopicPartition(OFFSETS_TOPIC, partition)) is self.node:
            self.ledger.check_reload(self.node.broker_id, self.coordinator)
        else:
            self.ledger.deposed_loads += 1


def group_settings(config: GroupSimConfig) -> dict[str, str]:
    """The broker configs of the simulation's group coordinators."""
    return {
        "offsets.topic.num.partitions": "1",
        "group.consumer.session.timeout.ms": str(config.session_timeout_ms),
        "group.consumer.heartbeat.interval.ms": str(config.heartbeat_interval_ms),
        "offsets.commit.timeout.ms": str(config.request_timeout_ms),
        "offsets.load.buffer.size": str(1 << 20),
    }


def _host(world: World, b: int) -> GroupHost:
    node = world.node(b)
    services = () if node is None else node.services
    host = next((s for s in services if isinstance(s, GroupHost)), None)
    if host is None:
        raise ConnectionError(f"broker {b} is down")
    return host


# --- members -----------------------------------------------------------------------------------


class SimMember:
    def __init__(
        self,
        world: World,
        index: int,
        rng: random.Random,
        config: GroupSimConfig,
        topic: TopicMeta,
        faults_until_ms: int,
    ) -> None:
        self.world = world
        self.rng = rng
        self.config = config
        self.index = index
        self.topics = TopicsImage({topic.name: topic})
        self.topic = topic
        self.faults_until_ms = faults_until_ms
        self.member_id = f"m{index}-{uuid.UUID(int=rng.getrandbits(128)).hex[:8]}"
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.heartbeats = 0
        self.full = False
        # its connections to the group coordinator (request frames)
        self.clients = SimClients(
            world, CLIENT_ID, client_id=f"member-{index}", timeout_ms=config.request_timeout_ms
        )
        self.view = ClusterView(self.clients, world.broker_ids, rng)

    async def _heartbeat(self, b: int, req: HeartbeatRequest) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat (v0) to broker `b`, a request frame through its
        handler; ConnectionError when no answer came."""
        body = {
            "group_id": req.group_id,
            "member_id": req.member_id,
            "member_epoch": req.member_epoch,
            "instance_id": req.instance_id,
            "rack_id": req.rack_id,
            "rebalance_timeout": req.rebalance_timeout_ms,
            "subscribed_topic_names": (
                None if req.subscribed_topic_names is None else list(req.subscribed_topic_names)
            ),
            "server_assignor": req.server_assignor,
            "topic_partitions": (
                None
                if req.owned is None
                else [
                    {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(req.owned.items())
                ]
            ),
        }
        resp = await self.clients.call(b, CONSUMER_GROUP_HEARTBEAT_KEY, 0, body)
        assignment = None
        if resp.assignment is not None:
            assignment = {
                tp.topic_id: frozenset(int(p) for p in tp.partitions)
                for tp in resp.assignment.topic_partitions
            }
        return HeartbeatResult(
            ErrorCode(resp.error_code),
            resp.error_message,
            resp.member_id,
            int(resp.member_epoch),
            int(resp.heartbeat_interval.total_seconds() * 1000),
            assignment,
        )

    def _request(self) -> HeartbeatRequest:
        if self.epoch == 0:
            return HeartbeatRequest(
                GROUP,
                self.member_id,
                0,
                rebalance_timeout_ms=self.config.rebalance_timeout_ms,
                subscribed_topic_names=(self.topic.name,),
                owned={},
            )
        if self.full:  # after an error or a lost answer, a full request (as clients do)
            return HeartbeatRequest(
                GROUP,
                self.member_id,
                self.epoch,
                rebalance_timeout_ms=self.config.rebalance_timeout_ms,
                subscribed_topic_names=(self.topic.name,),
                owned=dict(self.owned),
            )
        return HeartbeatRequest(GROUP, self.member_id, self.epoch, owned=dict(self.owned))

    async def run(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        while True:
            b = await self.view.coordinator(GROUP)
            if b is None:
                await asyncio.sleep(0.05)
                continue
            try:
                r = await self._heartbeat(b, self._request())
            except (ConnectionError, TimeoutError):
                self.view.forget_coordinator(GROUP)
                self.full = True
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
                continue
            self.heartbeats += 1
            if r.error in RETRIABLE:
                self.view.forget_coordinator(GROUP)
                self.full = True
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
                continue
            self.full = False
            if r.error != E.none:
                # fenced or unknown: give everything up and join again
                self.epoch, self.owned = 0, {}
                continue
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = dict(r.assignment)
            now = self.world.now_ms()
            if now < self.faults_until_ms and self.rng.random() < self.config.crash_probability:
                self.world.crash_coordinator(b, f"a heartbeat of {self.member_id}")
            if now < self.faults_until_ms and self.rng.random() < self.config.leave_probability:
                await self._leave(b)
            await asyncio.sleep(interval_s)

    async def _leave(self, b: int) -> None:
        req = HeartbeatRequest(GROUP, self.member_id, -1)
        try:
            await self._heartbeat(b, req)
        except (ConnectionError, TimeoutError):
            pass
        # a new consumer process: new member id, nothing owned
        self.member_id = f"m{self.index}-{uuid.UUID(int=self.rng.getrandbits(128)).hex[:8]}"
        self.epoch, self.owned = 0, {}
        await asyncio.sleep(self.rng.uniform(50, 300) / 1000)


def check_final(world: World, members: Sequence[SimMember], partitions: int) -> None:
    """After healing and settling: the group is Stable on its coordinator and matches what
    the members own."""
    state = world.stored_state(TopicPartition(OFFSETS_TOPIC, 0))
    b = None if state is None or state.leader < 0 else state.leader
    if b is None:
        raise InvariantViolation("consumer groups: no coordinator after healing")
    group = _host(world, b).coordinator.consumer_groups.get(GROUP)
    if group is None:
        raise InvariantViolation(f"consumer groups: broker {b} has no group {GROUP}")
    if group.state != "Stable":
        raise InvariantViolation(f"consumer group {GROUP} is {group.state} after settling")
    owned: list[tuple[uuid.UUID, int]] = []
    for m in members:
        cm = group.members.get(m.member_id)
        if cm is None:
            raise InvariantViolation(f"member {m.member_id} is not in the settled group")
        if cm.assigned != m.owned or cm.member_epoch != m.epoch:
            raise InvariantViolation(
                f"member {m.member_id} owns {m.owned} at epoch {m.epoch}; the coordinator "
                f"says {cm.assigned} at epoch {cm.member_epoch}"
            )
        owned += [(t, p) for t, ps in m.owned.items() for p in ps]
    if sorted(p for _, p in owned) != list(range(partitions)):
        raise InvariantViolation(f"settled group {GROUP} owns {sorted(owned)}")


async def settle(
    world: World, members: Sequence[SimMember], partitions: int, grace_ms: int
) -> None:
    """Give the members up to `grace_ms` more to agree with their coordinator. The network
    still loses a leg now and then after healing, and a member notices a heartbeat or its
    answer lost only at its request timeout: two such losses in a row near the end outlast
    the world's settling (seed 1933: the coordinator had moved a member to epoch 7 in an
    answer that was lost). A group already in agreement waits for nothing (and replays as
    before); one that does not agree by then fails `check_final`."""
    deadline = world.now_ms() + grace_ms
    while world.now_ms() < deadline:
        try:
            check_final(world, members, partitions)
            return
        except InvariantViolation:
            await asyncio.sleep(0.05)


def topic_meta(name: str, topic_id: uuid.UUID, partitions: int) -> TopicMeta:
    return TopicMeta(topic_id, name, partitions)


__all__ = [
    "GROUP",
    "GroupHost",
    "GroupLedger",
    "GroupSimConfig",
    "SimMember",
    "check_final",
    "settle",
    "topic_meta",
]
