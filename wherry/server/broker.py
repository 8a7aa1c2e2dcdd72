"""A broker: wiring and startup order.

Start: metadata-store session → log manager (recovery) → listeners bound (ApiVersions
answered from now on, every other request held until started) → the rest imported
(`startup.LATE_IMPORTS`) → replica manager and purgatories → broker registration
(ephemeral node) → config-change listener → controller election → background tasks. Stop
reverses it and leaves a clean-shutdown marker so the next start skips recovery.

Coordination. Without `zookeeper.connect` the broker opens a session on an embedded store
(its own, under `<first log dir>/__meta`, or one shared by several brokers of a process, as
`wherry dev` does) and its controller reaches brokers through an `InProcessChannel` (shared
by the brokers of the process). With `zookeeper.connect` it opens a ZooKeeper session and its
controller talks to brokers over the network (a `NetworkChannelManager`). When the session
expires (ZooKeeper's, or an embedded one expired by a test), the broker does what Kafka's does
on re-initializing its ZooKeeper session: its controller instance resigns (it watches the
session), a new session is opened, the broker registers again (a new `/brokers/ids/<id>`
node, so a new broker epoch, its czxid) and the controller restarts on the new session
(`Controller.restart_with`), running for election again. Partitions keep being served meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.coordination.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from wherry.log.config import ConfigError, LogConfig
from wherry.log.manager import LogManager
from wherry.observability.network_stats import NetworkStats
from wherry.observability.request_stats import RequestStats, request_name
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.runtime.clock import Clock, SystemClock
from wherry.runtime.loop_lag import LoopLag, StackWatch, Stall, StallLog, monitor
from wherry.server import config_changes
from wherry.server.broker_configs import DynamicBrokerConfig
from wherry.server.cluster_min_isr import ensure_cluster_min_isr, first_start_nodes
from wherry.server.config import BrokerConfig, new_cluster_id
from wherry.server.handlers import SUPPORTED_VERSIONS, handler_for
from wherry.server.handlers.api_versions import (
    API_VERSIONS_KEY,
    early_answer,
    features_of,
)
from wherry.server.listener_security import BrokerSecurity, broker_security
from wherry.server.log_dir_failure import halt
from wherry.server.meta_properties import check_meta_properties, write_meta_properties
from wherry.server.network import ConnectionInfo, Deferred, NetworkServer
from wherry.server.sasl_gate import SaslGate
from wherry.server.startup import (
    API_VERSIONS_PREFIX,
    HttpStart,
    import_late,
    log_bound,
    own_store,
    raise_open_files_limit,
    sync_in_thread,
)
from wherry.server.store_session import StoreSession

if TYPE_CHECKING:
    import random

    from wherry.controller.channel import ControllerChannel, InProcessChannel
    from wherry.controller.channel_manager import NetworkChannelManager
    from wherry.controller.controller import Controller
    from wherry.coordination.change_notifications import ChangeNotificationListener
    from wherry.coordination.embedded import EmbeddedCoordinator
    from wherry.log.cleaner import LogCleaner
    from wherry.observability.service import ObservabilityServer
    from wherry.observability.sources import BrokerSources
    from wherry.protocol.response_parts import ResponsePart
    from wherry.replication.alter_partition import ControllerSender
    from wherry.replication.controller_requests import ControllerFence
    from wherry.replication.log_dir_mover import LogDirMover
    from wherry.replication.metadata_cache import MetadataCache
    from wherry.replication.node import ReplicaNode
    from wherry.replication.replica_manager import ReplicaManager
    from wherry.runtime.scheduler import Scheduler
    from wherry.runtime.state_change_log import StateChangeLogHandle
    from wherry.security.acl_authorizer import AclAuthorizer
    from wherry.security.authorizer import Authorizer
    from wherry.security.scram_store import ScramCredentialCache
    from wherry.server.admin import AdminManager
    from wherry.server.client_quotas import ClientQuotas
    from wherry.server.groups import GroupsRuntime
    from wherry.server.metadata_gate import MetadataGate
    from wherry.server.producer_ids import ProducerIdManager
    from wherry.server.shares import ShareRuntime
    from wherry.server.transactions import TransactionsRuntime

log = logging.getLogger(__name__)

CONFIG_CHANGE_NAME_PREFIX = "config_change_"
LOOP_LAG_INTERVAL_MS = 100  # how often the loop-lag monitor asks to be woken


def _load_request_path(api_key: int, api_version: int) -> None:
    """What the first request of an API version loads: kio's request and response schemas of
    the version and the handler module of the key."""
    import wherry.protocol.codec as codec

    codec.load_schemas(api_key, api_version)
    handler_for(api_key)


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        coordinator: EmbeddedCoordinator | None = None,
        channel: InProcessChannel | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.clock: Clock = clock or SystemClock()
        if rng is not None:
            self.rng = rng
        if coordinator is not None and config.zookeeper_connect is not None:
            raise ValueError("an embedded coordinator and zookeeper.connect are exclusive")
        self.uses_zookeeper = config.zookeeper_connect is not None
        self._own_coordinator = coordinator is None and not self.uses_zookeeper
        self._coordinator = coordinator
        # Brokers of this process reachable by an in-process controller (embedded mode).
        if channel is not None:
            self.channel = channel
        self._network_channel: NetworkChannelManager | None = None
        self.session = StoreSession(
            self._open_session,
            self._on_new_session,
            self._stop_config_listener,
            lambda: not self._stopped and self._started.is_set(),
            f"[Broker id={config.broker_id}]",
        )
        self.cluster_id = ""
        self.bound_ports: list[int] = []
        self._started = asyncio.Event()
        self._stopped = False
        self._config_listener: ChangeNotificationListener | None = None
        self._topic_overrides: dict[str, dict[str, str]] = {}
        # Dynamic broker configs and the KIP-73 replication quotas they bound.
        self.dynamic_config = DynamicBrokerConfig(
            self.broker_id,
            quota_window_num=config.replication_quota_window_num,
            quota_window_ms=config.replication_quota_window_size_seconds * 1000,
            static=config.raw,
        )
        self._prefix = f"[Broker id={self.broker_id}]"
        # set in start()
        self.log_manager: LogManager
        self.log_dir_mover: LogDirMover  # AlterReplicaLogDirs' background copies
        self.log_cleaner: LogCleaner | None = None
        # This broker's replicas and what it does with the controller's requests.
        self.node: ReplicaNode
        self.admin: AdminManager
        self.producer_ids: ProducerIdManager
        self.controller: Controller
        self.groups: GroupsRuntime
        self.transactions: TransactionsRuntime
        self.shares: ShareRuntime
        self.network: NetworkServer
        self.scheduler: Scheduler
        self._state_change_log: StateChangeLogHandle | None = None
        self._alter_sender: ControllerSender | None = None
        # The ACL authorizer (`authorizer.class.name`); None allows everything.
        self.authorizer: Authorizer | None = None
        # What each listener needs (TLS, SASL) and how this broker reaches the others; read
        # (key stores included) at start.
        self.security: BrokerSecurity
        self.client_security: ClientSecurity = PLAINTEXT
        self.sasl_gate: SaslGate
        # Per-API request counts and times (read by /metrics); the HTTP listener, if any.
        self.request_stats = RequestStats()
        self.network_stats = NetworkStats()
        # How late the event loop wakes a task due every LOOP_LAG_INTERVAL_MS (/metrics).
        self.loop_lag = LoopLag(self.clock.monotonic_ms)
        self._loop_lag_task: asyncio.Task[None] | None = None
        self._stall_log = StallLog(log, self.clock.monotonic_ms)
        self.http: ObservabilityServer | None = None
        self._http_start: HttpStart | None = None
        # What a broker that must stop now does (every log dir failed): exit the process.
        self.fatal: Callable[[str], None] = halt

    # Made on first use (once the listeners are bound, unless asked for before): their
    # modules are imported then.
    @functools.cached_property
    def rng(self) -> random.Random:
        import random

        return random.Random()

    @functools.cached_property
    def channel(self) -> InProcessChannel:  # brokers reachable by an in-process controller
        from wherry.controller.channel import InProcessChannel

        return InProcessChannel()

    @property
    def controller_channel(self) -> ControllerChannel:  # a NetworkChannelManager with ZK
        return self._network_channel if self._network_channel is not None else self.channel

    @functools.cached_property
    def _metadata_gate(self) -> MetadataGate:  # clients wait for the first metadata
        from wherry.server.metadata_gate import broker_gate

        return broker_gate(self.config, self._prefix)

    @property
    def cache(self) -> MetadataCache:  # what UpdateMetadata said
        return self._metadata_gate.cache

    @functools.cached_property
    def fence(self) -> ControllerFence:  # the epochs controller requests are checked against
        from wherry.replication.controller_requests import ControllerFence

        return ControllerFence()

    @functools.cached_property
    def scram_credentials(self) -> ScramCredentialCache:
        """SCRAM credentials of every user (`/config/users/<u>`), for SASL/SCRAM logins;
        loaded at start once the listeners are bound."""
        from wherry.security.scram_store import ScramCredentialCache

        return ScramCredentialCache()

    @functools.cached_property
    def client_quotas(self) -> ClientQuotas:
        """Producer/consumer byte rates and request percentages per user and client id."""
        from wherry.server.client_quotas import ClientQuotas

        return ClientQuotas.of(self.config, self.clock)

    @property
    def replica_manager(self) -> ReplicaManager:
        return self.node.replica_manager

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        # `authorizer.class.name`: refuse an unknown class before anything starts.
        if cfg.raw.get("authorizer.class.name", "").strip():
            from wherry.security.acl_authorizer import authorizer_from_config

            self.authorizer = authorizer_from_config(cfg.raw, self.clock.now_ms)
        self.security = broker_security(cfg.raw, cfg.listeners, cfg.advertised)
        self.client_security = self.security.inter_broker_client
        self.sasl_gate = SaslGate(self.security, lambda: self.scram_credentials)
        raise_open_files_limit()
        for d in cfg.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        if cfg.http_listeners:  # after the Kafka listener, or during a long recovery
            self._http_start = HttpStart(self._start_http)
        deferred: EmbeddedCoordinator | None = None  # its own store: synced once bound
        if self._coordinator is None and not self.uses_zookeeper:
            deferred = self._coordinator = own_store(cfg.metadata_dir, halt)
        await self.session.open()
        # A first start creates its cluster id with the persistent paths (one transaction).
        min_isr, new_id = cfg.log_defaults.min_insync_replicas, None
        if await self.store.exists(paths.CLUSTER_ID) is None:
            new_id = self._new_cluster_id()
        await paths.ensure_persistent_paths(self.store, first_start_nodes(new_id, min_isr))
        self.cluster_id = await self._cluster_id()
        missing_meta = check_meta_properties(self.config.log_dirs, self.cluster_id, self.broker_id)
        if (acl := self._acl_authorizer()) is not None:  # all ACLs cached before any request
            await acl.start(self.store)

        loop = asyncio.get_running_loop()
        await ensure_cluster_min_isr(self.store, min_isr, created=new_id == self.cluster_id)
        await self.dynamic_config.load(self.store)
        await self._load_topic_overrides()
        self.log_manager = LogManager(
            list(cfg.log_dirs),
            self.log_defaults(),
            self.clock.now_ms,
            producer_id_expiration_ms=cfg.producer_id_expiration_ms,
        )
        topic_configs = {t: self.topic_log_config(t) for t in self._topic_overrides}
        await loop.run_in_executor(None, self.log_manager.startup, topic_configs)
        # Bound after log recovery, as Kafka binds its acceptors; only ApiVersions is answered
        # before the start completes (`handle_frame`), while the rest is imported and started.
        self.network = NetworkServer(
            self.handle_frame,
            max_request_bytes=cfg.socket_request_max_bytes,
            limits=cfg.connection_limits,
            inter_broker_listener=cfg.inter_broker_listener,
            stats=self.network_stats,
        )
        self.bound_ports = []
        for ep in cfg.listeners:
            ls = self.security.listeners[ep.listener]
            self.bound_ports.append(
                await self.network.listen(
                    ep.host,
                    ep.port,
                    ep.listener,
                    security_protocol=ls.protocol,
                    ssl_context=ls.ssl_context,
                )
            )
        log_bound(self.bound_ports)
        synced = sync_in_thread(deferred)  # while the rest is imported
        self._loop_lag_task = loop.create_task(
            monitor(self.loop_lag, LOOP_LAG_INTERVAL_MS, self._log_stall, watch=StackWatch),
            name=f"loop-lag-{self.broker_id}",
        )
        await import_late()
        self._attach_state_change_log()  # none happens before: the controller starts later
        if self._http_start is not None:  # the metrics registry and the console too
            await self._http_start.started()
            assert self.http is not None
            self.http.complete()
        await synced  # the start's store writes durable before meta.properties names them
        if missing_meta:  # a first start: written (and fsynced) once the listeners are up
            await loop.run_in_executor(
                None, write_meta_properties, missing_meta, self.cluster_id, self.broker_id
            )
        await self.scram_credentials.load_all(self.store)  # before any SASL login
        await self.client_quotas.load_all(self.store)
        from wherry.replication.alter_partition import ControllerSender
        from wherry.replication.fetcher import FetcherConfig
        from wherry.replication.log_dir_mover import UNLIMITED as UNLIMITED_IO
        from wherry.replication.log_dir_mover import LogDirMover
        from wherry.replication.network_endpoint import socket_connect
        from wherry.runtime.scheduler import Scheduler
        from wherry.server.admin import AdminManager
        from wherry.server.assembly import BrokerIO, replica_node
        from wherry.server.coordinator_edges import BrokerEdges
        from wherry.server.groups import GroupsRuntime
        from wherry.server.log_dir_failure import LogDirEventReporter
        from wherry.server.producer_ids import ProducerIdManager
        from wherry.server.shares import ShareRuntime
        from wherry.server.transactions import TransactionsRuntime

        self.log_dir_mover = LogDirMover(
            self.log_manager,
            io_max_bytes_per_second=int(
                cfg.raw.get("replica.alter.log.dirs.io.max.bytes.per.second", UNLIMITED_IO)
            ),
        )
        fetcher_config = FetcherConfig.from_properties(cfg.raw)
        timeout_s = cfg.controller_socket_timeout_ms / 1000
        self._alter_sender = ControllerSender(
            self.broker_id,
            lambda: self.node.controller_address(),
            connect_timeout_s=timeout_s,
            request_timeout_s=timeout_s,
            security=self.client_security,
        )
        io = BrokerIO(
            self.clock,
            self.rng,
            connect=lambda a: socket_connect(a.host, a.port, fetcher_config, self.client_security),
            send_to_controller=self._alter_sender,
        )
        self.node = replica_node(
            cfg,
            self.log_manager,
            io,
            cache=self.cache,
            fence=self.fence,
            topic_config=self.topic_log_config,
            load_topic_configs=self._ensure_topic_configs,
            leader_quota=self.dynamic_config.leader_quota,
            follower_quota=self.dynamic_config.follower_quota,
        )
        self.admin = AdminManager(cfg, self.store, self.cache, self.rng)
        self.producer_ids = ProducerIdManager(self.broker_id, self.store)
        # each coordinator's runtime listens to the node's leadership changes by itself
        edges = BrokerEdges(
            cfg, self.clock, self.node, lambda: self.admin, lambda: self.client_security,
            lambda: self.store,
        )
        self.groups = GroupsRuntime(edges)
        self.transactions = TransactionsRuntime(edges)
        self.shares = ShareRuntime(edges, lambda g: self.groups.coordinator.partition_for(g))
        self.node.leadership_listeners.append(self.shares.on_leadership_change)
        self.shares.attach_groups(self.groups)
        # markers on this broker's own `__consumer_offsets` partitions: written in process
        self.transactions.attach_groups(self.groups.coordinator.on_transaction_completed)
        self.network.on_close = lambda conn: self.shares.on_connection_closed(conn.id)
        self.node.deletion_listeners.append(self._on_partitions_deleted)
        reporter = LogDirEventReporter(self.broker_id, lambda: self.store)
        self.node.on_log_dir_failure = reporter.report
        self.node.on_all_log_dirs_failed = lambda message: self.fatal(message)
        self.node.start()
        await self.groups.start(self.store)
        await self.transactions.start(self.store)
        self.shares.start()

        # Reachable by an in-process controller before the registration makes it live.
        self.channel.register(self.broker_id, self.node)
        await self._register()
        self._start_config_listener()
        await self._start_controller()
        self.scheduler = Scheduler(self.clock)
        from wherry.server.housekeeping import schedule_housekeeping

        self.log_cleaner = schedule_housekeeping(
            self.scheduler,
            cfg,
            self.log_manager,
            expire_group_offsets=self.groups.cleanup_expired_offsets,
        )
        from wherry.server.dynamic_apply import apply_dynamic

        await apply_dynamic(self)  # the stored dynamic configs: limits, cleaner, TLS stores
        self.log_dir_mover.kick()  # moves a restart interrupted resume
        self._metadata_gate.start_holding(loop.time())
        self._started.set()
        log.info(
            "%s started (cluster %s) listening on %s",
            self._prefix,
            self.cluster_id,
            ", ".join(
                f"{ep.host}:{p}" for ep, p in zip(cfg.listeners, self.bound_ports, strict=True)
            ),
        )

    def _acl_authorizer(self) -> AclAuthorizer | None:
        """The ACL authorizer, when `authorizer.class.name` names it (imported only then)."""
        if self.authorizer is None:
            return None
        from wherry.security.acl_authorizer import AclAuthorizer

        return self.authorizer if isinstance(self.authorizer, AclAuthorizer) else None

    async def _start_http(self) -> None:
        from wherry.observability.service import ObservabilityServer

        self.http = ObservabilityServer(self._observed(), self.config.http_listeners)
        await self.http.start()

    def _log_stall(self, stall: Stall) -> None:
        """A late wake-up of the event loop: a line a minute at most, naming this broker, once
        the start is done (the start's imports hold the loop a few ms at a time by design)."""
        if self._started.is_set():
            self._stall_log(stall, self._prefix)

    def _attach_state_change_log(self) -> StateChangeLogHandle:
        """This broker's (and its controller's) state changes, one parseable line each, in
        its data dir (attached once the listeners are bound: none happens before)."""
        if self._state_change_log is None:
            from wherry.runtime.state_change_log import attach_state_change_log

            self._state_change_log = attach_state_change_log(
                self.config.data_dir, node_id=self.config.broker_id
            )
        return self._state_change_log

    def _observed(self) -> BrokerSources:
        """What the HTTP listener reads of this broker (each part once it exists)."""
        from wherry.observability.sources import BrokerSources

        return BrokerSources(
            self.broker_id,
            self.cache,
            self.request_stats,
            state_change_log=self._attach_state_change_log().path,
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            config=self.config.raw,
            network_stats=self.network_stats,
            replica_manager=lambda: self.node.replica_manager if hasattr(self, "node") else None,
            controller=lambda: getattr(self, "controller", None),
            groups=lambda: self.groups.coordinator if hasattr(self, "groups") else None,
            log_manager=lambda: getattr(self, "log_manager", None),
            started=lambda: self._started.is_set() and not self._stopped,
            registered=self._registered,
            client_quotas=lambda: self.client_quotas,
            client_security=lambda: self.client_security,
            loop_lag=self.loop_lag,
        )

    def _registered(self) -> bool:
        return (
            self.session.connected
            and self.fence.broker_epoch >= 0
        )

    async def stop(self, *, controlled: bool = True) -> None:
        """Graceful shutdown: leaderships moved away (unless `controlled` is False),
        stop serving, flush, checkpoint, leave the clean marker."""
        if self._stopped:
            return
        self._stopped = True
        log.info("%s shutting down", self._prefix)
        await self.session.stop()
        if controlled and self._started.is_set():  # still serving while leaderships move
            from wherry.server import controlled_shutdown

            await controlled_shutdown.run(self)
        if self._http_start is not None:
            self._http_start.cancel()
        if self.http is not None:
            await self.http.stop()
        if hasattr(self, "network"):
            await self.network.close()
        await self._stop_controller()
        self.channel.unregister(self.broker_id)
        if hasattr(self, "groups"):
            await self.groups.stop()
        if hasattr(self, "transactions"):
            await self.transactions.stop()
        if hasattr(self, "log_dir_mover"):
            await self.log_dir_mover.stop()
        if hasattr(self, "shares"):
            await self.shares.stop()
        if hasattr(self, "node"):
            await self.node.stop()
        if self._alter_sender is not None:
            await self._alter_sender.close()
        if self.log_cleaner is not None:  # its worker process: a clean in progress aborts
            await asyncio.get_running_loop().run_in_executor(None, self.log_cleaner.close)
        if hasattr(self, "scheduler"):
            await self.scheduler.shutdown()
        await self._stop_config_listener()
        if (acl := self._acl_authorizer()) is not None:
            await acl.stop()
        if hasattr(self, "log_manager"):
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        if hasattr(self, "store"):
            await self.store.close()
        if self._loop_lag_task is not None:
            self._loop_lag_task.cancel()
        if self._own_coordinator and self._coordinator is not None:
            self._coordinator.close()
        log.info("%s shut down completed", self._prefix)
        if self._state_change_log is not None:
            self._state_change_log.detach()
            self._state_change_log = None

    # --- coordination sessions -------------------------------------------------------------
    async def _open_session(self) -> MetadataStore:
        cfg = self.config
        if cfg.zookeeper_connect is None:
            assert self._coordinator is not None
            return self._coordinator.session()
        from wherry.coordination.zookeeper import connect_zookeeper

        log.info(
            "%s connecting to ZooKeeper at %s (session timeout %d ms)",
            self._prefix,
            cfg.zookeeper_connect,
            cfg.zookeeper_session_timeout_ms,
        )
        store = await connect_zookeeper(
            cfg.zookeeper_connect,
            session_timeout_ms=cfg.zookeeper_session_timeout_ms,
            connect_timeout_s=cfg.zookeeper_connection_timeout / 1000,
            security=cfg.zookeeper_security,
        )
        log.info("%s ZooKeeper session %#x established", self._prefix, store.session_id)
        return store

    @property
    def store(self) -> MetadataStore:
        """The current metadata-store session (a new one after an expiry)."""
        return self.session.store

    @property
    def session_renewals(self) -> int:
        return self.session.renewals

    async def _on_new_session(self, store: MetadataStore) -> None:
        """After an expiry (the controller instance resigned by itself when the session
        ended): everything that talks to the store points at the new session, the broker
        registers again (a new broker epoch), and the config-change listener, the ACL cache
        and the controller instance restart on it, where the controller runs for election."""
        self.admin.store = store
        self.producer_ids.store = store
        await self._register()
        self._start_config_listener()
        if (acl := self._acl_authorizer()) is not None:
            await acl.restart_with(store)
        await self.controller.restart_with(store)
        log.info(
            "%s re-registered on session %#x with broker epoch %d",
            self._prefix,
            store.session_id,
            self.fence.broker_epoch,
        )

    def _start_config_listener(self) -> None:
        from wherry.coordination.change_notifications import ChangeNotificationListener

        listener = ChangeNotificationListener(
            self.store,
            paths.CONFIG_CHANGES,
            CONFIG_CHANGE_NAME_PREFIX,
            self._apply_config_change,
            self.clock.now_ms,
        )
        if self._config_listener is not None:  # a new session: go on after what was applied
            listener.last_seq = self._config_listener.last_seq
        self._config_listener = listener
        listener.start(name=f"config-changes-{self.broker_id}")

    async def _stop_config_listener(self) -> None:
        if self._config_listener is not None:
            await self._config_listener.stop()

    async def _start_controller(self) -> None:
        """This broker's controller instance; it runs for election at once. With ZooKeeper it
        reaches brokers over the network (its `sync_brokers` calls keep the manager's queues
        to the live brokers); otherwise through the process's `InProcessChannel`."""
        cfg = self.config
        if self.uses_zookeeper:
            from wherry.controller.channel_manager import ChannelConfig, NetworkChannelManager

            timeout_ms = cfg.controller_socket_timeout_ms
            self._network_channel = NetworkChannelManager(
                self.broker_id,
                config=ChannelConfig(
                    connect_timeout_ms=timeout_ms,
                    request_timeout_ms=timeout_ms,
                    security=self.client_security,
                ),
            )
        from wherry.controller.controller import Controller

        self.controller = Controller(
            self.broker_id,
            self.store,
            self.controller_channel,
            unclean_leader_election_default=cfg.log_defaults.unclean_leader_election_enable,
            delete_topic_enable=cfg.delete_topic_enable,
            now_ms=self.clock.now_ms,
            auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=cfg.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=cfg.leader_imbalance_per_broker_percentage,
            inter_broker_listener=cfg.inter_broker_listener,
        )
        await self.controller.start()

    async def _stop_controller(self) -> None:
        if hasattr(self, "controller"):
            await self.controller.stop()
        manager, self._network_channel = self._network_channel, None
        if manager is not None:
            await manager.close()

    def _new_cluster_id(self) -> str:
        return self.config.cluster_id or new_cluster_id()

    async def _cluster_id(self) -> str:
        try:
            data, _ = await self.store.get(paths.CLUSTER_ID)
            return paths.decode_cluster_id(data)
        except NoNodeError:
            cid = self._new_cluster_id()
            try:
                await self.store.create(
                    paths.CLUSTER_ID, paths.encode_cluster_id(cid), make_parents=True
                )
            except NodeExistsError:
                data, _ = await self.store.get(paths.CLUSTER_ID)
                return paths.decode_cluster_id(data)
            return cid

    def advertised_endpoints(self) -> tuple[paths.ListenerEndpoint, ...]:
        """The advertised listeners with their security protocols; port 0 stands for the
        port the same-named listener bound."""
        bound = {
            ep.listener: p for ep, p in zip(self.config.listeners, self.bound_ports, strict=True)
        }
        return tuple(
            paths.ListenerEndpoint(
                ep.listener,
                ep.host,
                ep.port or bound.get(ep.listener, 0),
                self.security.protocol_of(ep.listener),
            )
            for ep in self.config.advertised
        )

    async def _register(self) -> None:
        from wherry.server.registration import register_broker

        endpoints = self.advertised_endpoints()
        epoch = await register_broker(
            self.store, self.broker_id, endpoints, self.config.rack, self.clock.now_ms()
        )
        self.fence.broker_epoch = epoch
        log.info(
            "%s registered at %s with broker epoch %d",
            self._prefix,
            ",".join(str(e) for e in endpoints),
            epoch,
        )

    # --- metadata --------------------------------------------------------------------------
    async def wait_for_metadata(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        from wherry.server.assembly import wait_for_metadata

        return await wait_for_metadata(self.cache, self.clock, predicate, timeout_ms)

    async def _ensure_topic_configs(self, topics: Collection[str]) -> None:
        """Before LeaderAndIsr creates logs: the stored configs of topics not yet known."""
        unknown = [t for t in topics if t not in self._topic_overrides]
        if unknown:
            await self._load_topic_overrides(unknown)

    def _on_partitions_deleted(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._topic_overrides.pop(tp.topic, None)
            self.dynamic_config.update_topic(tp.topic, None)
        self.groups.on_partitions_deleted(partitions)

    def log_defaults(self) -> LogConfig:
        """The static log defaults under the dynamic ones (`log.retention.ms`, ... set per
        broker or for the cluster, as with kafka-configs)."""
        try:
            return self.config.log_defaults.with_props(self.dynamic_config.log_overrides())
        except ConfigError:
            log.exception("%s invalid stored dynamic log config; using the static", self._prefix)
            return self.config.log_defaults

    def topic_log_config(self, topic: str) -> LogConfig:
        """The log defaults in force (`log_defaults`), then the topic's own overrides."""
        overrides = self._topic_overrides.get(topic, {})
        defaults = self.log_defaults()
        try:
            return defaults.with_props(overrides)
        except ConfigError:
            log.exception(
                "%s invalid stored config for topic %s; using defaults", self._prefix, topic
            )
            return defaults

    async def _load_topic_overrides(self, topics: list[str] | None = None) -> None:
        await config_changes.load_topic_overrides(
            self.store, self.dynamic_config, self._topic_overrides, topics
        )

    async def reload_topic_overrides(self, topics: list[str]) -> dict[str, str]:
        await self._load_topic_overrides(topics)
        return dict(self._topic_overrides.get(topics[0], {})) if topics else {}

    def on_topic_overrides(self, topic: str, overrides: dict[str, str]) -> None:
        if hasattr(self, "controller") and self.controller.active:
            self.controller.ctx.topic_configs[topic] = overrides

    @property
    def log_prefix(self) -> str:
        return self._prefix

    async def _apply_config_change(self, path: str, data: bytes) -> None:
        await config_changes.apply_config_change(self, path, data)

    # --- client requests -----------------------------------------------------------------
    async def handle_frame(
        self, conn: ConnectionInfo, frame: memoryview
    ) -> bytes | list[ResponsePart] | Deferred | None:
        if not self._started.is_set():
            if frame[:2] != API_VERSIONS_PREFIX:
                await self._started.wait()
            elif (early := self._early_api_versions(conn, frame)) is not None:
                return early
        # The codecs are imported once the listeners are bound (`startup.LATE_IMPORTS`).
        import wherry.protocol.codec as codec
        import wherry.server.dispatch as dispatch

        if (version := codec.schemas_to_load(frame, SUPPORTED_VERSIONS)) is not None:
            # The first request of an API version: what it loads loads in a thread, so that
            # the event loop serves the other connections meanwhile (on the loop, the first
            # Metadata request held it 25-35 ms, the first of each other version 5-15 ms).
            await asyncio.get_running_loop().run_in_executor(None, _load_request_path, *version)
        return await dispatch.handle_frame(
            self, self.sasl_gate, self._metadata_gate, conn, frame, self.request_stats,
            self._prefix,
        )

    def _early_api_versions(self, conn: ConnectionInfo, frame: memoryview) -> bytes | None:
        """ApiVersions while the start goes on, from the hand-written codec (the kio codec is
        not imported yet); None on a SASL listener (its gate sees every request) or for a frame
        that codec leaves to kio."""
        listener = self.security.listeners.get(conn.listener)
        if listener is not None and listener.uses_sasl:
            return None
        started = time.perf_counter()
        answer = early_answer(frame, features_of(self.config.transaction_version))
        if answer is not None:
            self.request_stats.observe(
                request_name(API_VERSIONS_KEY), (time.perf_counter() - started) * 1000
            )
        return answer
