"""A simulated broker process: the real LogManager (files in its own directory) and the real
`ReplicaNode`, built by the same assembly as `wherry server`'s (`server/assembly.py`: replica
manager, purgatories and their ticker, fetchers, fetch sessions, AlterPartition manager, ISR
expiry, HW checkpoints, the controller requests' rules), with the sockets replaced by the
simulated network (`wire.py`) and time by the simulated loop's clock. Clients' requests and
the followers' fetches arrive as request frames and go through the broker's real request path
(`serve`, then `dispatch.handle_frame`: the SASL and metadata gates, codecs, handlers, fetch
sessions, authorizer), each in a task of
the process that runs to its end whatever its client does, as in the network layer; a
connection its client closes is closed here too (`connection_closed`).

The simulated broker hosts the replica node and what the simulation adds on it (the
transaction and group coordinators and the share groups, `services`; the handlers reach them).
Its metadata-store session (with the real controller) is kept by `wherry server`'s
`StoreSession`: it registers on it, and after an expiry, noticed a moment later, opens a new
one and registers again; on it run `wherry server`'s admin manager (CreateTopics,
CreatePartitions, DeleteTopics, configs: written to the store for the controller to act on)
and producer id blocks (InitProducerId). With the model controller (no store) it runs no
admin manager and takes producer ids from the world's one counter: a request that needs what
it does not run closes its connection with a log line. Its log dirs (`NodeConfig.log_dirs`)
have `wherry server`'s log-dir mover (AlterReplicaLogDirs: a future log filled, then promoted),
its copies inline; a move a crash interrupted resumes at the restart. Its
housekeeping is `wherry server`'s (`server/housekeeping.py`: retention, deleted logs'
directories, the log cleaner, the flusher, the checkpoints, group offset expiry), paced by the
simulation's broker config, on simulated time, its file work inline (no threads).
`crash()` ends the process at once: its tasks and housekeeping are cancelled and its file
descriptors closed without flushing or writing anything (the page cache survives, so the files
keep every byte written); for a power loss the world then cuts what was never fsynced
(`disk.py`).
`controlled_shutdown()` then `stop()` is a clean stop, as `wherry server` would do it with
Kafka's `controlled.shutdown.enable`: ask the controller (ControlledShutdown) until it
answers with no partitions still led, at most `controlled.shutdown.max.retries` times with
`controlled.shutdown.retry.backoff.ms` between attempts (Kafka's
KafkaServer.controlledShutdown; it stops anyway when they all fail); then stop the replica
node and close the logs with their checkpoints and the clean-shutdown marker (as
`Broker.stop`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.observability.request_stats import RequestStats
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.replication.controlled_shutdown import ControlledShutdown, ControlledShutdownSettings
from wherry.replication.controller_requests import ControllerFence
from wherry.replication.log_dir_mover import LogDirMover
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.node import ReplicaNode
from wherry.replication.replica_manager import ReplicaManager
from wherry.runtime.clock import Clock, FunctionClock
from wherry.runtime.scheduler import Scheduler
from wherry.security.authorizer import Authorizer
from wherry.security.scram_store import ScramCredentialCache
from wherry.server import dispatch
from wherry.server.admin import AdminManager
from wherry.server.assembly import BrokerIO, replica_node, wait_for_metadata
from wherry.server.client_quotas import ClientQuotas
from wherry.server.config import BrokerConfig
from wherry.server.housekeeping import schedule_housekeeping
from wherry.server.listener_security import broker_security
from wherry.server.metadata_gate import MetadataGate, metadata_gate
from wherry.server.network import ConnectionInfo, Deferred
from wherry.server.producer_ids import ProducerIdManager
from wherry.server.registration import register_broker
from wherry.server.sasl_gate import SaslGate
from wherry.server.store_session import StoreSession
from wherry.sim.controller import ControllerMessage, UpdateLiveBrokers
from wherry.sim.loop import run_now
from wherry.sim.network import CONTROLLER_ID, SimNetwork
from wherry.sim.wire import SimClients, frame_bytes

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class BrokerSessions(Protocol):
    """Where a simulated broker's metadata-store sessions come from (the real controller's
    store), and how late it notices that one expired."""

    def open_broker_session(self, b: int) -> MetadataStore: ...

    def notice_delay_s(self, b: int) -> float: ...


class NodeService(Protocol):
    def abandon(self) -> None: ...

    async def stop(self) -> None: ...


class NotHostedError(LookupError):
    """A request needed a part of the broker the simulated one does not run."""


class SimProducerIds:
    """Producer ids for InitProducerId and EndTxn without a metadata store (the model
    controller), from the world's one counter (what the brokers' id blocks in the store give:
    each id once)."""

    def __init__(self, claim: Callable[[], int]) -> None:
        self._claim = claim

    async def next_id(self) -> int:
        return self._claim()


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig:
    log_config: LogConfig
    # The broker's settings (`replica.*`, fetch sessions), as `wherry server` reads them.
    broker_props: Mapping[str, str]
    request_timeout_ms: int
    controlled_shutdown_max_retries: int = 3  # Kafka's default
    controlled_shutdown_retry_backoff_ms: int = 200  # Kafka's is 5000; simulated runs are short
    # Topics with a config of their own (the coordinators' compacted internal topics).
    topic_log_configs: Mapping[str, LogConfig] = dataclasses.field(default_factory=dict)
    # Log dirs per broker: one (the broker's directory), or that many beneath it.
    log_dirs: int = 1

    def log_config_of(self, topic: str) -> LogConfig:
        return self.topic_log_configs.get(topic, self.log_config)


class SimBroker:
    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        incarnation: int,
        broker_epoch: int,
        network: SimNetwork,
        config: NodeConfig,
        now_ms: Callable[[], int],
        send_to_controller: Callable[[int, Mapping[str, Any]], Any],
        node_for: Callable[[int], SimBroker | None],
        peers: Any,
        rng: random.Random,
        sessions: BrokerSessions | None = None,
    ) -> None:
        """`peers` is the world (`wire.Brokers`: the network, who is up); `rng` this process's
        randomness (fetch session ids). With `sessions` (the real controller's store), the
        broker keeps its own session and registers on it, as `wherry server` does
        (`broker_epoch` is then what it registers with); without, the world registers it."""
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.log_dirs = (
            [data_dir]
            if config.log_dirs == 1
            else [data_dir / f"log-dir-{i}" for i in range(config.log_dirs)]
        )
        self.incarnation = incarnation
        self.network = network
        self.settings = config
        self.now_ms = now_ms
        self._broker_epoch = broker_epoch
        self._send_to_controller = send_to_controller
        self._node_for = node_for
        self._peers = peers
        self._rng = rng
        self._sessions = sessions
        self.session: StoreSession | None = None
        # On the session's store (the real controller): `wherry server`'s admin manager and
        # producer id blocks.
        self._admin: AdminManager | None = None
        self._producer_ids: ProducerIdManager | None = None
        self._log_dir_mover: LogDirMover | None = None  # AlterReplicaLogDirs' copies, inline
        self.broker_config = BrokerConfig.from_props(
            {
                **config.broker_props,
                "broker.id": str(broker_id),
                "log.dirs": ",".join(str(d) for d in self.log_dirs),
            }
        )
        self.clock: Clock = FunctionClock(now_ms)
        self.request_stats = RequestStats()
        self.client_quotas = ClientQuotas.of(self.broker_config, self.clock)
        self.scram_credentials = ScramCredentialCache()
        self.authorizer: Authorizer | None = None
        self.cluster_id = "sim"
        self._live: tuple[BrokerEndpoint, ...] = ()  # the model controller's live brokers
        # The broker's housekeeping (`server/housekeeping.py`), its file work inline.
        self.scheduler = Scheduler(self.clock, blocking_in_executor=False)
        self._requests: set[asyncio.Task[bytes | None]] = set()  # requests being handled
        self.up = False
        self.replica: ReplicaNode
        self.sasl_gate: SaslGate
        self.metadata_gate: MetadataGate
        # What else runs in the process on the replica node (the transaction coordinator):
        # abandoned at a crash, stopped first at a clean stop.
        self.services: list[NodeService] = []
        # The transaction coordinator among them (`sim/transactions.py`), for the handlers.
        self.transaction_host: Any = None
        self.group_host: Any = None  # and the group coordinator (`sim/consumer_groups.py`)
        self.share_host: Any = None  # and the share groups (`sim/world_shares.py`)

    @property
    def fence(self) -> ControllerFence:
        return self.replica.fence

    @property
    def broker_epoch(self) -> int:
        return self.replica.fence.broker_epoch

    @property
    def cache(self) -> MetadataCache:
        """The real controller's UpdateMetadata lands here (live brokers, controller id)."""
        return self.replica.cache

    @property
    def replica_manager(self) -> ReplicaManager:
        return self.replica.replica_manager

    # --- what the request handlers see of the broker (`server.services.BrokerServices`) -------
    @property
    def config(self) -> BrokerConfig:
        return self.broker_config

    @property
    def node(self) -> ReplicaNode:
        return self.replica

    def _hosted(self, part: _T | None, what: str) -> _T:
        """`part` of the broker, which the simulation may not run here (`what` it is)."""
        if part is None:
            raise NotHostedError(f"the simulated broker {self.broker_id} runs no {what}")
        return part

    @property
    def groups(self) -> Any:
        """The group coordinator the simulation runs here (`--consumer-groups`)."""
        return self._hosted(self.group_host, "group coordinator")

    @property
    def transactions(self) -> Any:
        """The transaction coordinator the simulation runs here (`--transactions`)."""
        return self._hosted(self.transaction_host, "transaction coordinator")

    @property
    def shares(self) -> Any:
        """The share groups the simulation runs here (`--share-consumers`)."""
        return self._hosted(self.share_host, "share group runtime")

    @property
    def admin(self) -> AdminManager:
        return self._hosted(
            self._admin, "admin manager (no metadata store: the model controller)"
        )

    @property
    def producer_ids(self) -> ProducerIdManager | SimProducerIds:
        if self._producer_ids is None:
            return SimProducerIds(self._peers.claim_producer_id)
        return self._producer_ids

    @property
    def log_dir_mover(self) -> LogDirMover:
        assert self._log_dir_mover is not None, "the broker has not started"
        return self._log_dir_mover

    async def wait_for_metadata(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        return await wait_for_metadata(self.cache, self.clock, predicate, timeout_ms)

    async def handle_frame(
        self, conn: ConnectionInfo, frame: memoryview
    ) -> bytes | list[Any] | Deferred | None:
        """A request frame through the broker's request path, its gates included, as
        `Broker.handle_frame` (no TLS, and no start-up gate: the simulated listeners are
        plaintext and open once the node runs)."""
        return await dispatch.handle_frame(
            self, self.sasl_gate, self.metadata_gate, conn, frame, self.request_stats,
            f"[Broker id={self.broker_id}]",
        )

    def serve(self, conn: ConnectionInfo, frame: memoryview) -> asyncio.Task[bytes | None]:
        """Handle a request frame in this process, its answer's bytes (None: none, acks=0) the
        task's result. As in `server/network.py`, the request runs to its end whatever its
        connection does (the connection's `connection_closed` gives up a waiting Fetch only);
        the process dying ends it."""
        task = asyncio.get_running_loop().create_task(self._answer(conn, frame))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        task.add_done_callback(_handled)
        return task

    async def _answer(self, conn: ConnectionInfo, frame: memoryview) -> bytes | None:
        return await frame_bytes(await self.handle_frame(conn, frame))

    def connection_closed(self, conn: ConnectionInfo) -> None:
        """A client's connection is gone (`Broker`'s close listener): the share sessions it
        held close."""
        if self.share_host is not None:
            self.share_host.on_connection_closed(conn.id)

    def _end_requests(self) -> None:
        for t in self._requests:
            t.cancel()
        self._requests.clear()

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.settings
        self.log_manager = LogManager(
            self.log_dirs, cfg.log_config, self.now_ms, topic_configs=cfg.topic_log_configs
        )
        self.log_manager.startup()
        fetcher_timeout_ms = self.broker_config.raw.get("replica.socket.timeout.ms", "30000")
        fetchers = SimClients(
            self._peers,
            self.broker_id,
            client_id=f"broker-{self.broker_id}-fetcher",
            timeout_ms=int(fetcher_timeout_ms),
            alive=self._alive(),
        )
        io = BrokerIO(
            self.clock,
            self._rng,
            connect=lambda a: fetchers.connect(a.broker_id),
            send_to_controller=self._send_alter_partition,
            blocking_in_executor=False,  # deterministic: no threads
        )
        epoch = self._broker_epoch
        store: MetadataStore | None = None
        if (sessions := self._sessions) is not None:
            self.session = StoreSession(
                self._open_session,
                self._on_new_session,
                _nothing,
                lambda: self.up,
                f"[Broker id={self.broker_id}]",
                notice_delay_s=lambda: sessions.notice_delay_s(self.broker_id),
            )
            store = run_now(self.session.open())
            epoch = run_now(self._register(store))
        self.replica = replica_node(
            self.broker_config,
            self.log_manager,
            io,
            cache=MetadataCache(self.broker_id),
            fence=ControllerFence(broker_epoch=epoch),
            topic_config=cfg.log_config_of,
        )
        self.replica.start()
        self._log_dir_mover = LogDirMover(self.log_manager, blocking_in_executor=False)
        self._log_dir_mover.kick()  # moves a crash or stop interrupted resume
        if store is not None:
            self._admin = AdminManager(self.broker_config, store, self.replica.cache, self._rng)
            self._producer_ids = ProducerIdManager(self.broker_id, store)
        # The broker's gates, as `Broker` sets them: clients' requests wait for the first
        # metadata; the SASL exchange on SASL listeners (the simulated ones are plaintext).
        cfg_b = self.broker_config
        self.sasl_gate = SaslGate(
            broker_security(cfg_b.raw, cfg_b.listeners, cfg_b.advertised),
            lambda: self.scram_credentials,
        )
        self.metadata_gate = metadata_gate(
            self.replica.cache, cfg_b, f"[Broker id={self.broker_id}]"
        )
        self.metadata_gate.start_holding(asyncio.get_running_loop().time())
        schedule_housekeeping(
            self.scheduler,
            self.broker_config,
            self.log_manager,
            expire_group_offsets=self._expire_group_offsets,
        )
        self.up = True

    async def _open_session(self) -> MetadataStore:
        assert self._sessions is not None
        return self._sessions.open_broker_session(self.broker_id)

    async def _register(self, store: MetadataStore) -> int:
        endpoint = paths.ListenerEndpoint("PLAINTEXT", "sim", self.broker_id)
        return await register_broker(store, self.broker_id, (endpoint,), None, self.now_ms())

    async def _on_new_session(self, store: MetadataStore) -> None:
        """Registered again after an expiry, with a new broker epoch; the admin manager and
        producer ids use the new session (as `Broker`'s)."""
        self.replica.fence.broker_epoch = await self._register(store)
        if self._admin is not None and self._producer_ids is not None:
            self._admin.store = store
            self._producer_ids.store = store

    def _alive(self) -> Callable[[], bool]:
        """True while this incarnation of the process runs (its connections die with it)."""
        incarnation = self.incarnation
        return lambda: self.up and self._node_for(self.broker_id) is self and (
            self.incarnation == incarnation
        )

    def crash(self) -> list[Path]:
        """Kill the process: nothing more runs, nothing is flushed or checkpointed. Returns
        the segment files, for a power loss to cut (`disk.DurableFiles`)."""
        self.up = False
        if self.session is not None:
            self.session.abandon()  # its session expires a session timeout later (the world)
        self.scheduler.cancel_all()
        self._end_requests()
        for s in self.services:
            s.abandon()
        if self._log_dir_mover is not None:
            self._log_dir_mover.abandon()
        self.replica.abandon()
        files: list[Path] = []
        for plog in self.log_manager.all_logs():
            if plog.closed:
                continue
            for seg in plog.segments:
                files.append(seg.log_path)
                # Release the descriptor only: a killed process writes no index, no snapshot.
                seg._release_fd()
        self.log_manager.abandon()
        return files

    async def controlled_shutdown(
        self,
        request: Callable[[SimBroker], Awaitable[tuple[ErrorCode, list[TopicPartition]]]],
    ) -> bool:
        """Ask the controller to move everything away from this broker, with the attempts and
        retries `wherry server` makes (`replication/controlled_shutdown.py`); `request` is one
        ControlledShutdown over the simulated network. True when the controller answered with
        nothing left."""
        cfg = self.settings

        async def ask() -> tuple[ErrorCode, list[TopicPartition]] | None:
            try:
                return await request(self)
            except (ConnectionError, TimeoutError) as e:
                log.info("broker %d: controlled shutdown request lost: %s", self.broker_id, e)
                return None

        settings = ControlledShutdownSettings(
            max_retries=cfg.controlled_shutdown_max_retries,
            retry_backoff_ms=cfg.controlled_shutdown_retry_backoff_ms,
        )
        led = self.replica.replica_manager.partitions
        return await ControlledShutdown(
            self.broker_id,
            settings,
            ask=ask,
            led_partitions=lambda: [
                tp for tp, p in led.items() if p.is_leader and len(p.assignment) > 1
            ],
        ).run()

    async def stop(self) -> None:
        """A clean stop (after `controlled_shutdown`): the replica node stops (fetchers,
        purgatories, HW checkpoint), then the housekeeping, then the logs are flushed and closed
        with every checkpoint and the clean-shutdown marker (as `Broker.stop`)."""
        self._end_requests()  # the listener closes with its connections
        if self.session is not None:
            await self.session.stop()
        for s in self.services:
            await s.stop()
        if self._log_dir_mover is not None:
            await self._log_dir_mover.stop()
        await self.replica.stop()
        await self.scheduler.shutdown()
        self.log_manager.shutdown()
        self.up = False

    def _expire_group_offsets(self) -> None:
        if self.group_host is not None:  # attached after the start (`--consumer-groups`)
            self.group_host.cleanup_expired_offsets()

    async def _send_alter_partition(self, body: Mapping[str, Any]) -> Any:
        return await self._send_to_controller(self.broker_id, body)

    # --- controller requests -------------------------------------------------------------------
    async def handle_controller_message(self, msg: ControllerMessage) -> int:
        """A message from the model controller (`--controller model`). Its LeaderAndIsr is
        followed by the UpdateMetadata Kafka's controller sends with it (the partitions'
        leaders and ISRs, for the request handlers)."""
        if isinstance(msg, UpdateLiveBrokers):
            self._live = tuple(BrokerEndpoint(b, "sim", b) for b in sorted(msg.live))
            return await self.replica.handle_update_metadata(
                UpdateMetadataRequest(
                    CONTROLLER_ID, msg.controller_epoch, msg.broker_epoch, (), self._live
                )
            )
        error = (await self.replica.handle_leader_and_isr(msg)).error_code
        if error == ErrorCode.none:
            states = tuple(
                UpdateMetadataPartitionState(
                    p.topic_name,
                    p.partition_index,
                    p.controller_epoch,
                    p.leader,
                    p.leader_epoch,
                    p.isr,
                    p.partition_epoch,
                    p.replicas,
                )
                for p in msg.partition_states
            )
            await self.replica.handle_update_metadata(
                UpdateMetadataRequest(
                    CONTROLLER_ID,
                    msg.controller_epoch,
                    msg.broker_epoch,
                    states,
                    self._live,
                    topic_ids=dict(msg.topic_ids),
                )
            )
        return error


async def _nothing() -> None:
    """What a simulated broker stops before a new session: nothing watches the old one."""


def _handled(task: asyncio.Task[bytes | None]) -> None:
    """A request whose client stopped waiting: its error is not news (`dispatch` logged it)."""
    if not task.cancelled():
        task.exception()


__all__ = ["CONTROLLER_ID", "NodeConfig", "NotHostedError", "SimBroker"]
