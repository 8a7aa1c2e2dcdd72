"""The real controller in the simulation (`--controller real`).

The metadata store is a real `EmbeddedCoordinator` (a SQLite file in the run's temporary
directory, its clock the simulated one); every simulated broker keeps its own session there and
registers on it as `server/broker.py` does (`server/store_session.py`, an ephemeral
``/brokers/ids/<id>``, broker epoch = its czxid), and renews it after `expire_session`.
A few *controller hosts* (network addresses `CONTROLLER_ID`,
`CONTROLLER_ID + 1`, ...) each run a real `controller.Controller` candidate on their own
session; they elect one through ``/controller``. Each candidate talks to brokers with the real
`NetworkChannelManager` (one queue per broker, resent until answered), whose `Connector` here
encodes nothing itself: the manager's `RequestClient` encodes each request (interbroker codec)
and `wire.SimConnection` carries the frame over `SimNetwork` (delays, drops, cuts, crashes)
into the broker's request path (its LeaderAndIsr, UpdateMetadata and StopReplica handlers)
and the answer back for the manager to decode. AlterPartition goes
to the controller the broker's metadata cache names, and into `Controller.alter_partition`.

A controller host crash cancels the candidate's tasks at once (no resignation, nothing sent
after it) and its session expires a session timeout later; a session expiry alone makes the
candidate resign and, once its host opened a new session, `restart_with` it. A host can also be
armed to crash right before its n-th next store write (`arm_crash_at_write`: its session is a
`CrashingSession`), so a crash lands between any two writes of one controller event -- e.g.
between the steps of a reassignment, which otherwise run in one simulated instant.

Cluster operations (AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders) go
from the client's address to the acting controller host (`admin`); ControlledShutdown from a
broker to the controller its metadata cache names (`controlled_shutdown`), both over
`SimNetwork`, into the real `Controller` methods.

Everything the coordinator does is synchronous inside its coroutines (no threads, no
executor), and its watch callbacks go through `loop.call_soon`, so the run stays deterministic.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.alter_partition import error_response
from wherry.controller.channel import BrokerAddress
from wherry.controller.channel_manager import (
    BrokerConnection,
    ChannelConfig,
    Connector,
    NetworkChannelManager,
)
from wherry.controller.context import LeaderIsr
from wherry.controller.controller import Controller
from wherry.coordination import paths
from wherry.coordination.embedded import EmbeddedCoordinator, EmbeddedSession
from wherry.coordination.store import (
    ANY_VERSION,
    MultiOp,
    MultiResult,
    NoNodeError,
    SessionState,
    SessionStateListener,
    Stat,
    WatchCallback,
)
from wherry.sim.loop import run_now
from wherry.sim.network import CLIENT_ID, CONTROLLER_ID, SimNetwork
from wherry.sim.node import SimBroker
from wherry.sim.wire import SimConnection

log = logging.getLogger(__name__)

T = TypeVar("T")


def as_attributes(value: Any) -> Any:
    """A version-neutral mapping (AlterPartition request or answer) as the attribute-shaped
    object the codec would have produced (what `parse_request` / `parse_response` read)."""
    if isinstance(value, Mapping):
        return SimpleNamespace(**{k: as_attributes(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(as_attributes(v) for v in value)
    return value


class World(Protocol):
    """What the control plane needs from `world.World`."""

    network: SimNetwork

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...

    def incarnation(self, node_id: int) -> int | None: ...


class CrashingSession:
    """A controller host's `MetadataStore` session that can kill its host right before a
    store write: `writes_left` counts down on every write (create, set, delete, multi); at
    zero `on_crash` kills the host and the write raises `CancelledError`, as if the process
    died there (nothing after it runs: a dead host's every later call raises too)."""

    def __init__(self, session: EmbeddedSession, on_crash: Callable[[], None]) -> None:
        self.inner = session
        self.on_crash = on_crash
        self.writes_left: int | None = None
        self.dead = False

    @property
    def session_id(self) -> int:
        return self.inner.session_id

    @property
    def state(self) -> SessionState:
        return self.inner.state

    def _alive(self) -> None:
        if self.dead:
            raise asyncio.CancelledError

    def _write(self) -> None:
        self._alive()
        if self.writes_left is None:
            return
        if self.writes_left <= 0:
            self.writes_left = None
            self.dead = True
            self.on_crash()
            raise asyncio.CancelledError
        self.writes_left -= 1

    async def create(self, path: str, data: bytes = b"", **flags: bool) -> str:
        """`MetadataStore.create`, its flags (ephemeral, sequential, make_parents) passed on."""
        self._write()
        return await self.inner.create(path, data, **flags)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        self._alive()
        return await self.inner.get(path, watch)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        self._alive()
        return await self.inner.exists(path, watch)

    async def set(self, path: str, data: bytes, *, version: int = ANY_VERSION) -> Stat:
        self._write()
        return await self.inner.set(path, data, version=version)

    async def delete(
        self, path: str, *, version: int = ANY_VERSION, recursive: bool = False
    ) -> None:
        self._write()
        await self.inner.delete(path, version=version, recursive=recursive)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        self._alive()
        return await self.inner.get_children(path, watch)

    async def multi(self, ops: Sequence[MultiOp]) -> list[MultiResult]:
        self._write()
        return await self.inner.multi(ops)

    def add_state_listener(self, listener: SessionStateListener) -> None:
        self.inner.add_state_listener(listener)

    def remove_state_listener(self, listener: SessionStateListener) -> None:
        self.inner.remove_state_listener(listener)

    async def close(self) -> None:
        await self.inner.close()


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """The controller's auto leader rebalance settings (Kafka's names)."""

    auto_leader_rebalance_enable: bool = False
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10


@dataclass(slots=True)
class ControllerHost:
    net_id: int
    incarnation: int = 0
    up: bool = False
    session: CrashingSession | None = None
    channel: NetworkChannelManager | None = None
    controller: Controller | None = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


class RealControlPlane:
    def __init__(
        self,
        world: World,
        root: Path,
        *,
        hosts: int,
        request_timeout_ms: int,
        unclean_election: bool,
        rebalance: RebalanceConfig | None = None,
        session_timeout_ms: int = 400,
        on_crash_at_write: Callable[[int], None] = lambda _net_id: None,
    ) -> None:
        self.world = world
        self.request_timeout_ms = request_timeout_ms
        self.session_timeout_ms = session_timeout_ms  # a host crashed at a write: its session
        self.on_crash_at_write = on_crash_at_write
        self.unclean_election = unclean_election
        self.rebalance = rebalance or RebalanceConfig()
        self.coordinator = EmbeddedCoordinator(
            root / "coordination", clock_ms=world.now_ms, commits_in_thread=False
        )
        self.observer = self.coordinator.session()  # the checker's and the clients' reads
        self.broker_sessions: dict[int, EmbeddedSession] = {}
        self.notice_delays_ms: dict[int, float] = {}  # broker -> its next expiry's notice delay
        self.hosts = {
            CONTROLLER_ID + i: ControllerHost(CONTROLLER_ID + i) for i in range(max(1, hosts))
        }
        self.channel_config = ChannelConfig(
            connect_timeout_ms=request_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=50,
            retry_backoff_max_ms=400,
        )

    # --- the store ----------------------------------------------------------------------------
    def create_topic(self, topic: str, topic_id: uuid.UUID, assignments: Mapping[int, Any]) -> None:
        """What `AdminManager.create_topic` writes: the config, then the assignment."""
        s = self.observer
        run_now(
            s.create(paths.topic_config_path(topic), paths.encode_config({}), make_parents=True)
        )
        run_now(
            s.create(
                paths.topic_path(topic),
                paths.TopicAssignment(
                    topic_id, {p: list(r) for p, r in assignments.items()}
                ).to_json(),
                make_parents=True,
            )
        )

    def stored_assignment(self, topic: str) -> paths.TopicAssignment | None:
        """``/brokers/topics/<topic>``: the replicas and any reassignment in progress."""
        try:
            data, _ = run_now(self.observer.get(paths.topic_path(topic)))
        except NoNodeError:
            return None
        return paths.TopicAssignment.from_json(data)

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None:
        try:
            data, stat = run_now(
                self.observer.get(paths.partition_state_path(tp.topic, tp.partition))
            )
        except NoNodeError:
            return None
        st = paths.PartitionState.from_json(data)
        return LeaderIsr(
            st.leader, st.leader_epoch, tuple(st.isr), st.controller_epoch, stat.version
        )

    # --- broker sessions ------------------------------------------------------------------------
    def open_broker_session(self, b: int) -> EmbeddedSession:
        """A new session for broker `b` (its `StoreSession` opens it, at the start and after
        an expiry, and registers on it); an older one still open expires first (a broker
        restarted after a kill: the old process's session is gone by then)."""
        self.expire_broker(b)
        s = self.coordinator.session()
        self.broker_sessions[b] = s
        return s

    def notice_delay_s(self, b: int) -> float:
        """How long broker `b` takes to notice that its session expired (a ZooKeeper client
        learns of it when it reconnects): what the world drew when it expired the session."""
        return self.notice_delays_ms.pop(b, 0.0) / 1000

    def broker_session(self, b: int) -> int | None:
        s = self.broker_sessions.get(b)
        return None if s is None else s.session_id

    def expire_broker(self, b: int, session_id: int | None = None) -> None:
        """Expire broker `b`'s session (only if it is still `session_id`, when given)."""
        s = self.broker_sessions.get(b)
        if s is None or (session_id is not None and s.session_id != session_id):
            return
        del self.broker_sessions[b]
        self.coordinator.expire_session(s.session_id)

    # --- controller hosts -----------------------------------------------------------------------
    def incarnation(self, net_id: int) -> int | None:
        h = self.hosts.get(net_id)
        return h.incarnation if h is not None and h.up else None

    def _connector(self, host: ControllerHost) -> Connector:
        incarnation = host.incarnation

        async def connect(broker_id: int, address: BrokerAddress) -> BrokerConnection:
            return SimConnection(
                self.world,
                host.net_id,
                broker_id,
                timeout_ms=self.request_timeout_ms,
                alive=lambda: host.up and host.incarnation == incarnation,
            )

        return connect

    def start_host(self, net_id: int) -> None:
        h = self.hosts[net_id]
        if h.up:
            return
        h.incarnation += 1
        h.up = True
        h.session = self._session(net_id)
        h.channel = NetworkChannelManager(
            net_id, config=self.channel_config, connector=self._connector(h)
        )
        rb = self.rebalance
        h.controller = Controller(
            net_id,
            h.session,
            h.channel,
            unclean_leader_election_default=self.unclean_election,
            now_ms=self.world.now_ms,
            auto_leader_rebalance_enable=rb.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=rb.leader_imbalance_check_interval_s,
            leader_imbalance_per_broker_percentage=rb.leader_imbalance_per_broker_percentage,
        )
        h.tasks = [asyncio.get_running_loop().create_task(h.controller.start())]

    def _session(self, net_id: int) -> CrashingSession:
        def crash() -> None:
            self.crash_host(net_id, self.session_timeout_ms)
            self.on_crash_at_write(net_id)

        return CrashingSession(self.coordinator.session(), crash)

    def arm_crash_at_write(self, net_id: int, writes: int) -> None:
        """Crash the host right before its `writes`-th next store write (0: the next one)."""
        h = self.hosts[net_id]
        if h.up and h.session is not None:
            h.session.writes_left = writes

    def disarm_crashes(self) -> None:
        for h in self.hosts.values():
            if h.session is not None:
                h.session.writes_left = None

    def crash_host(self, net_id: int, session_timeout_ms: int | None) -> None:
        """Kill the host: its controller stops at once (no resignation); the session expires
        a session timeout later, which frees ``/controller``."""
        h = self.hosts[net_id]
        if not h.up:
            return
        h.up = False
        c, ch = h.controller, h.channel
        for t in h.tasks:
            t.cancel()
        h.tasks = []
        if c is not None:
            for ct in (c._task, c._isr_task, c._rebalance_task):
                if ct is not None:
                    ct.cancel()
        if ch is not None:
            ch._closed = True
            for sender in ch._senders.values():
                sender.task.cancel()
        session = h.session
        h.controller = h.channel = h.session = None
        if session is not None:
            session.dead = True  # a dead process calls nothing any more
        if session is not None and session_timeout_ms is not None:
            sid = session.session_id
            asyncio.get_running_loop().call_later(
                session_timeout_ms / 1000, self.coordinator.expire_session, sid
            )

    def expire_host_session(self, net_id: int) -> None:
        h = self.hosts[net_id]
        if h.up and h.session is not None:
            self.coordinator.expire_session(h.session.session_id)

    def renew_host_session(self, net_id: int) -> None:
        """After an expiry: a new session and the controller restarted on it."""
        h = self.hosts[net_id]
        if not h.up or h.controller is None:
            return
        if h.session is not None and h.session.session_id in self.coordinator.session_ids:
            return  # not expired
        h.session = self._session(net_id)
        h.tasks.append(asyncio.get_running_loop().create_task(h.controller.restart_with(h.session)))

    def active_host(self) -> ControllerHost | None:
        for h in self.hosts.values():
            if h.up and h.controller is not None and h.controller.active:
                return h
        return None

    async def _known_controller(self, node: SimBroker) -> ControllerHost:
        """The controller host `node`'s metadata cache names, if up; else ConnectionError
        (after a moment, as a failed connection takes)."""
        cid = node.cache.controller_id
        h = None if cid is None else self.hosts.get(cid)
        if h is None or not h.up:
            await asyncio.sleep(0.001)
            raise ConnectionError("no controller known")
        return h

    # --- AlterPartition -------------------------------------------------------------------------
    async def alter_partition(self, node: SimBroker, body: Mapping[str, Any]) -> Any:
        h = await self._known_controller(node)
        inc = h.incarnation
        request = as_attributes(body)

        async def handler() -> Mapping[str, Any]:
            c = h.controller
            if not h.up or h.incarnation != inc or c is None or not c.active:
                return error_response(ErrorCode.not_controller)
            return await c.alter_partition(request)

        answer = await self.world.network.call(
            node.broker_id, h.net_id, handler, timeout_ms=self.request_timeout_ms
        )
        return as_attributes(answer)

    # --- cluster operations -----------------------------------------------------------------------
    async def admin(self, work: Callable[[Controller], Awaitable[T | None]]) -> T | None:
        """A cluster-operation request from the clients' address to the acting controller host
        (as an admin client finds it); None when there is none or it is not acting (the
        handler's NOT_CONTROLLER). Raises ConnectionError / TimeoutError when the request or
        its answer is lost: the operation may then have happened or not."""
        h = self.active_host()
        if h is None:
            await asyncio.sleep(0.001)
            return None
        return await self._call(CLIENT_ID, h, work)

    async def controlled_shutdown(self, node: SimBroker) -> tuple[ErrorCode, list[TopicPartition]]:
        """ControlledShutdown from `node` to the controller its metadata cache names."""
        h = await self._known_controller(node)
        epoch = node.broker_epoch

        async def work(c: Controller) -> tuple[ErrorCode, list[TopicPartition]]:
            return await c.controlled_shutdown(node.broker_id, epoch)

        answer = await self._call(node.broker_id, h, work)
        return (ErrorCode.not_controller, []) if answer is None else answer

    async def _call(
        self, src: int, h: ControllerHost, work: Callable[[Controller], Awaitable[T | None]]
    ) -> T | None:
        inc = h.incarnation

        async def handler() -> T | None:
            c = h.controller
            if not h.up or h.incarnation != inc or c is None or not c.active:
                return None
            return await work(c)

        return await self.world.network.call(
            src, h.net_id, handler, timeout_ms=self.request_timeout_ms
        )

    # --- end of the run -------------------------------------------------------------------------
    def shutdown(self) -> None:
        for net_id in self.hosts:
            self.crash_host(net_id, None)
        self.coordinator.close()
