"""Controllers on a real store (embedded, or a real ZooKeeper) with stand-in brokers.

A `StandInBroker` is a broker as far as the controller can tell: it registers
`/brokers/ids/<id>` on its own store session (the czxid is its broker epoch) and judges every
LeaderAndIsr / UpdateMetadata / StopReplica by the broker's own rules
(`wherry.replication.controller_requests`), keeping the partitions it hosts, its metadata view and
every request it got. Each `Node` is one broker "process": a session, a stand-in and a
`Controller` on that session (as `server/broker.py` wires them), reached through one shared
`InProcessChannel`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from tests.helpers import bounded_async_test
from tests.helpers import wait_until_async as wait_until
from tests.store_sessions import EmbeddedSessions, ZooKeeperSessions
from wherry.common.topic_partition import TopicPartition
from wherry.controller.channel import BrokerAddress, InProcessChannel
from wherry.controller.channel_manager import ChannelConfig
from wherry.controller.controller import Controller
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NodeExistsError
from wherry.protocol.interbroker import (
    LEADER_DURING_DELETE,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.replication.controller_requests import (
    ControllerFence,
    PartitionAction,
    leader_and_isr_error_response,
    leader_and_isr_verdict,
    request_topic_id,
    stop_replica_error,
    stop_replica_error_response,
)
from wherry.testing.zookeeper import ZooKeeperServer

TEST_TIMEOUT_S = 60.0
async_test = bounded_async_test(TEST_TIMEOUT_S)
"""Runs an ``async def`` test body with `asyncio.run`, bounded by ``TEST_TIMEOUT_S``."""

FAST_CHANNEL = ChannelConfig(
    connect_timeout_ms=1000, request_timeout_ms=1000, retry_backoff_ms=20, retry_backoff_max_ms=100
)
"""`NetworkChannelManager` timings for brokers on loopback: a second to connect or answer,
short backoffs between attempts."""


# ----------------------------------------------------------------------------- backends


class Backend:
    name = "abstract"

    async def new_session(self) -> MetadataStore:
        raise NotImplementedError

    async def expire(self, store: MetadataStore) -> None:
        raise NotImplementedError

    async def settle(self) -> None:
        """Let in-flight watch events arrive."""
        await asyncio.sleep(0.2)

    async def aclose(self) -> None:
        raise NotImplementedError


class EmbeddedBackend(EmbeddedSessions, Backend):
    """The embedded store, in memory."""

    async def settle(self) -> None:
        await asyncio.sleep(0.05)


class ZooKeeperBackend(ZooKeeperSessions, Backend):
    def __init__(self, server: ZooKeeperServer) -> None:
        chroot = f"/wherry-controller-tests/{uuid.uuid4().hex}"
        super().__init__(server, chroot, session_timeout_ms=6_000)


# ----------------------------------------------------------------------------- brokers


@dataclass
class StandInBroker:
    broker_id: int
    store: MetadataStore
    fence: ControllerFence = field(default_factory=ControllerFence)
    partitions: dict[TopicPartition, LeaderAndIsrPartitionState] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    metadata: dict[TopicPartition, UpdateMetadataPartitionState] = field(default_factory=dict)
    live_brokers: tuple[int, ...] = ()
    received: list[Any] = field(default_factory=list)
    rejected: list[tuple[Any, ErrorCode]] = field(default_factory=list)
    deleted: list[TopicPartition] = field(default_factory=list)
    port: int = 0  # advertised in the registration (where a network channel connects)

    async def register(self) -> None:
        port = self.port or 19000 + self.broker_id
        reg = paths.BrokerRegistration(self.broker_id, "127.0.0.1", port)
        await self.store.create(
            paths.broker_path(self.broker_id), reg.to_json(), ephemeral=True, make_parents=True
        )
        _, stat = await self.store.get(paths.broker_path(self.broker_id))
        self.fence.broker_epoch = stat.czxid

    def requests_of(self, kind: type) -> list[Any]:
        return [r for r in self.received if isinstance(r, kind)]

    def _admit(self, req: Any) -> ErrorCode:
        self.received.append(req)
        err = self.fence.admit(req.controller_epoch, req.broker_epoch)
        if err != ErrorCode.none:
            self.rejected.append((req, err))
        return err

    async def handle_leader_and_isr(self, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        err = self._admit(req)
        if err != ErrorCode.none:
            return leader_and_isr_error_response(req, err)
        errors = []
        for st in req.partition_states:
            tp = TopicPartition(st.topic_name, st.partition_index)
            current = self.partitions.get(tp)
            tid = request_topic_id(req, st.topic_name)
            verdict = leader_and_isr_verdict(
                self.broker_id,
                st,
                None if current is None else current.leader_epoch,
                tid,
                self.topic_ids.get(st.topic_name) if current is not None else None,
            )
            if verdict.action is PartitionAction.APPLY:
                self.partitions[tp] = st
                if tid is not None:
                    self.topic_ids[st.topic_name] = tid
            errors.append(
                LeaderAndIsrPartitionError(st.topic_name, st.partition_index, int(verdict.error))
            )
        return LeaderAndIsrResponse(0, tuple(errors))

    async def handle_update_metadata(self, req: UpdateMetadataRequest) -> int:
        err = self._admit(req)
        if err != ErrorCode.none:
            return int(err)
        self.live_brokers = tuple(sorted(b.broker_id for b in req.live_brokers))
        for st in req.partition_states:
            tp = TopicPartition(st.topic_name, st.partition_index)
            if st.leader == LEADER_DURING_DELETE:
                self.metadata.pop(tp, None)
            else:
                self.metadata[tp] = st
        return 0

    async def handle_stop_replica(self, req: StopReplicaRequest) -> StopReplicaResponse:
        err = self._admit(req)
        if err != ErrorCode.none:
            return stop_replica_error_response(err)
        errors = []
        for p in req.partitions:
            tp = TopicPartition(p.topic_name, p.partition_index)
            current = self.partitions.get(tp)
            code = stop_replica_error(p, None if current is None else current.leader_epoch)
            if code == ErrorCode.none:
                self.partitions.pop(tp, None)
                if p.delete_partition:
                    self.deleted.append(tp)
            errors.append(LeaderAndIsrPartitionError(p.topic_name, p.partition_index, int(code)))
        return StopReplicaResponse(0, tuple(errors))


class RecordingChannel:
    """One controller's view of the shared `InProcessChannel`: requests go through, and what
    `sync_brokers` was told is remembered."""

    def __init__(self, shared: InProcessChannel) -> None:
        self.shared = shared
        self.synced: list[dict[int, BrokerAddress]] = []

    async def leader_and_isr(
        self, broker_id: int, req: LeaderAndIsrRequest
    ) -> LeaderAndIsrResponse | None:
        return await self.shared.leader_and_isr(broker_id, req)

    async def update_metadata(self, broker_id: int, req: UpdateMetadataRequest) -> int | None:
        return await self.shared.update_metadata(broker_id, req)

    async def stop_replica(
        self, broker_id: int, req: StopReplicaRequest
    ) -> StopReplicaResponse | None:
        return await self.shared.stop_replica(broker_id, req)

    async def sync_brokers(self, brokers: Mapping[int, BrokerAddress]) -> None:
        self.synced.append(dict(brokers))
        await self.shared.sync_brokers(brokers)


@dataclass
class Node:
    broker_id: int
    store: MetadataStore
    broker: StandInBroker
    controller: Controller
    channel: RecordingChannel


class Cluster:
    def __init__(self, backend: Backend, *, unclean_default: bool = False) -> None:
        self.backend = backend
        self.unclean_default = unclean_default
        self.channel = InProcessChannel()
        self.nodes: dict[int, Node] = {}
        self.admin: MetadataStore | None = None

    async def __aenter__(self) -> Cluster:
        self.admin = await self.backend.new_session()
        await paths.ensure_persistent_paths(self.admin)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for b in list(self.nodes):
            await self.kill(b)
        if self.admin is not None:
            await self.admin.close()
        await self.backend.aclose()

    @property
    def store(self) -> MetadataStore:
        assert self.admin is not None
        return self.admin

    # --- brokers -----------------------------------------------------------------------------
    async def start(
        self,
        broker_id: int,
        *,
        controller_store: Callable[[MetadataStore], MetadataStore] | None = None,
    ) -> Node:
        """`controller_store`: what the controller reaches the broker's session through (a
        test's wrapper), when given."""
        store = await self.backend.new_session()
        broker = StandInBroker(broker_id, store)
        # Reachable before it registers, as a broker's listener is up before its registration:
        # the controller may see the registration (and send) before `register` returns.
        self.channel.register(broker_id, broker)
        await broker.register()
        channel = RecordingChannel(self.channel)
        controller = Controller(
            broker_id,
            store if controller_store is None else controller_store(store),
            channel,
            unclean_leader_election_default=self.unclean_default,
        )
        node = Node(broker_id, store, broker, controller, channel)
        self.nodes[broker_id] = node
        await controller.start()
        return node

    async def start_all(self, *broker_ids: int) -> list[Node]:
        """Start the brokers one after the other, in this order."""
        return [await self.start(b) for b in broker_ids]

    async def kill(self, broker_id: int) -> None:
        """The broker dies: its controller stops and its session closes (its ephemeral nodes
        go, as on a crash once the session times out)."""
        node = self.nodes.pop(broker_id)
        await node.controller.stop()
        self.channel.unregister(broker_id)
        await node.store.close()

    def controller(self) -> Node | None:
        active = [n for n in self.nodes.values() if n.controller.active]
        assert len(active) <= 1, f"several active controllers: {[n.broker_id for n in active]}"
        return active[0] if active else None

    async def wait_for_controller(self, *, other_than: int | None = None) -> Node:
        def ready() -> bool:
            c = self.controller()
            return c is not None and c.broker_id != other_than

        await wait_until(ready)
        node = self.controller()
        assert node is not None
        return node

    async def settle(self) -> None:
        """Let pending watch events arrive and every controller's queue drain."""
        for _ in range(3):
            await self.backend.settle()
            for n in list(self.nodes.values()):
                await n.controller.submit(_noop)

    # --- topics ------------------------------------------------------------------------------
    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str] | None = None,
    ) -> uuid.UUID:
        topic_id = uuid.uuid4()
        await self.store.create(
            paths.topic_config_path(name), paths.encode_config(configs or {}), make_parents=True
        )
        await self.store.create(
            paths.topic_path(name),
            paths.TopicAssignment(topic_id, {p: list(r) for p, r in assignment.items()}).to_json(),
            make_parents=True,
        )
        return topic_id

    async def delete_topic(self, name: str) -> None:
        try:
            await self.store.create(paths.delete_topic_path(name), b"", make_parents=True)
        except NodeExistsError:
            pass

    async def state(self, topic: str, partition: int) -> paths.PartitionState | None:
        st = await self.store.exists(paths.partition_state_path(topic, partition))
        if st is None:
            return None
        data, _ = await self.store.get(paths.partition_state_path(topic, partition))
        return paths.PartitionState.from_json(data)

    async def states(self, topic: str, count: int) -> dict[int, paths.PartitionState]:
        out = {}
        for p in range(count):
            st = await self.state(topic, p)
            assert st is not None, f"{topic}-{p} has no state"
            out[p] = st
        return out

    async def controller_epoch(self) -> int:
        data, _ = await self.store.get(paths.CONTROLLER_EPOCH)
        return paths.decode_controller_epoch(data)

    async def topic_exists(self, name: str) -> bool:
        return await self.store.exists(paths.topic_path(name)) is not None


async def _noop() -> None:
    return None


def describe(st: paths.PartitionState) -> str:
    return json.dumps({"leader": st.leader, "epoch": st.leader_epoch, "isr": st.isr})
