"""One simulated cluster run: brokers, controller, network, clients and faults on one seed.

`run_seed(seed, options)` builds the world in a temporary directory, drives it on a
`SimLoop` for `options.duration_ms` of simulated time with faults, then heals everything,
lets it settle, runs the final checks and returns a `SimResult` (violation or None).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import tempfile
import traceback
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import LeaderIsr
from wherry.log.config import LogConfig
from wherry.protocol.records import build_batch, parse_header
from wherry.replication.fetch_reads import READ_COMMITTED, READ_UNCOMMITTED
from wherry.share.config import READ_COMMITTED as SHARE_READ_COMMITTED
from wherry.share.state import SHARE_STATE_TOPIC
from wherry.sim import broker_checks as checks
from wherry.sim import consumer_groups as cg
from wherry.sim import world_shares as ws
from wherry.sim.admin_client import AdminOperations
from wherry.sim.controller import ControllerMessage, SimController, SimStore
from wherry.sim.disk import DurableFiles
from wherry.sim.invariants import (
    History,
    InvariantViolation,
    TxnLedger,
    decode_batches,
    read_committed_values,
)
from wherry.sim.log_dir_operations import LogDirOperations
from wherry.sim.lookup import ClusterView
from wherry.sim.loop import SimLoop
from wherry.sim.network import CLIENT_ID, CONTROLLER_ID, NetworkConfig, SimNetwork
from wherry.sim.node import NodeConfig, SimBroker
from wherry.sim.operations import ClusterOperations, rebalance_config
from wherry.sim.real_controller import RealControlPlane, RebalanceConfig
from wherry.sim.share_consumers import ShareConsumer
from wherry.sim.topic_operations import NAMES as ADMIN_TOPICS
from wherry.sim.topic_operations import TopicOperations
from wherry.sim.transactions import TxnHost, TxnProducer, TxnSimConfig
from wherry.sim.transactions import check_final as check_txn_final
from wherry.sim.transactions import check_reads as check_txn_reads
from wherry.sim.transactions import settle as settle_txns
from wherry.sim.wire import SimClients, fetch, produce
from wherry.txn.records import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

TOPIC = "sim"


@dataclass(frozen=True, slots=True)
class SimOptions:
    brokers: int = 3
    partitions: int = 2
    min_insync_replicas: int = 2
    duration_ms: int = 6_000  # with faults
    settle_ms: int = 4_000  # healed, before the final check
    power_loss: bool = False  # a crash loses unflushed bytes; flush.messages=1
    power_loss_flush_messages: int = 1  # larger: acknowledged data may be lost (self-test)
    segment_bytes: int = 4096  # small, so logs roll and truncation crosses segments
    internal_segment_ms: int = 300  # the compacted internal topics roll this often
    faults: bool = True
    fault_interval_ms: tuple[int, int] = (100, 700)
    session_timeout_ms: int = 400
    replica_lag_time_max_ms: int = 600
    request_timeout_ms: int = 800
    produce_timeout_ms: int = 1_000
    producers: int = 3
    produce_interval_ms: tuple[int, int] = (5, 40)
    data_check_interval_ms: int = 200
    network: NetworkConfig = field(default_factory=NetworkConfig)
    broken_rule: str | None = None  # checker self-test (see History.broken_rule)
    unclean_election: bool = False  # allows losing acknowledged data: the checker must see it
    # "real": `controller.Controller` candidates on an EmbeddedCoordinator (real_controller.py);
    # "model": the small controller built from the pure rules (controller.py).
    controller: str = "real"
    controller_hosts: int = 2  # real controller: candidates on their own network addresses
    # Real controller, with faults: reassignments, cancellations, preferred elections and
    # controlled shutdowns as events (operations.py).
    operations: bool = True
    # With the operations: an admin client's topics created, extended and deleted
    # (topic_operations.py) and replicas moved between log dirs (log_dir_operations.py)
    # through the brokers' handlers, on randomness of their own (the other events draw theirs
    # as without them).
    admin_operations: bool = True
    # Log dirs per broker.
    log_dirs: int = 2
    # Auto leader rebalance: None lets the seed decide (on in half the seeds, short interval).
    auto_rebalance: RebalanceConfig | None = None
    # Reassignment targets keep one live in-sync replica (False: any live brokers, which can
    # strand a partition with no ISR member among its replicas -- see operations.py).
    reassign_keep_in_sync: bool = True
    # Real controller: transactional producers, the transaction coordinator on every broker
    # and coordinator crashes mid-EndTxn (transactions.py), checked by `TxnLedger`.
    transactions: bool = False
    txn: TxnSimConfig = field(default_factory=TxnSimConfig)
    # Real controller: KIP-848 consumer groups -- the group coordinator on every broker,
    # members heartbeating, coordinator crashes (consumer_groups.py), checked by `GroupLedger`.
    consumer_groups: bool = False
    groups: cg.GroupSimConfig = field(default_factory=cg.GroupSimConfig)
    # Real controller: share consumers (KIP-932) heartbeating, fetching and acknowledging in
    # request frames through the failovers (share_consumers.py; the share groups on every
    # broker, world_shares.py), checked by `ShareLedger`.
    share_consumers: bool = False
    share: ws.ShareWorldConfig = field(default_factory=ws.ShareWorldConfig)

    def refusal(self) -> str | None:
        """Why no world can be built with these options; None when one can."""
        if self.controller not in ("real", "model"):
            return f"controller must be 'real' or 'model', not {self.controller!r}"
        coordinators = self.transactions or self.consumer_groups or self.share_consumers
        if coordinators and self.controller != "real":
            return "transactions, consumer groups and share consumers need the real controller"
        return None


@dataclass(slots=True)
class SimResult:
    seed: int
    violation: str | None = None
    error: str | None = None
    acks: int = 0
    produced: int = 0
    consumed: int = 0
    faults: list[str] = field(default_factory=list)
    steps: int = 0
    sim_ms: int = 0
    transactions: int = 0  # transactions begun
    committed: int = 0  # of them, EndTxn(commit) answered NONE
    txn_reads: int = 0  # read_committed reads checked
    group_reloads: int = 0  # consumer groups rebuilt from the log and checked
    group_deposed_loads: int = 0  # loads by a leader the controller had moved on from
    share_deliveries: int = 0  # share consumers' deliveries checked
    share_accepts: int = 0

    @property
    def ok(self) -> bool:
        return self.violation is None and self.error is None


class World:
    def __init__(self, seed: int, options: SimOptions, root: Path) -> None:
        if (refused := options.refusal()) is not None:
            raise ValueError(refused)
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.root = root
        self.loop = SimLoop()
        self._spawned: set[asyncio.Task[None]] = set()
        self.disk = DurableFiles()
        self.history = History(broken_rule=options.broken_rule)
        self.txn_ledger = TxnLedger()
        self.txn_producers: list[TxnProducer] = []
        self.group_ledger = cg.GroupLedger()
        self.share_ledger = ws.ShareLedger()
        # With transactional producers, the share group of odd seeds reads read_committed.
        self.share_config = (
            replace(options.share, isolation_level=SHARE_READ_COMMITTED)
            if options.transactions and seed % 2
            else options.share
        )
        self.group_members: list[cg.SimMember] = []
        self._next_producer_id = 1000
        self.network = SimNetwork(random.Random(self.rng.random()), self, options.network)
        self.fault_rng = random.Random(self.rng.random())
        self.client_rng = random.Random(self.rng.random())
        ops_rng = random.Random(self.rng.getrandbits(64))
        broker_ids = list(range(1, options.brokers + 1))
        rf = min(3, options.brokers)
        assignments = {
            p: tuple(broker_ids[(p + i) % len(broker_ids)] for i in range(rf))
            for p in range(options.partitions)
        }
        self.store = SimStore(TOPIC, uuid.UUID(int=self.rng.getrandbits(128)), assignments)
        self.broker_ids = broker_ids
        self.nodes: dict[int, SimBroker] = {}
        self.incarnations: dict[int, int] = {}
        self.down: set[int] = set()
        self.stopping: set[int] = set()  # in a controlled shutdown
        self.controller: SimController | None = None
        self.controller_incarnation = 0
        self.result = SimResult(seed)
        self._next_data_check = 0
        self._failure: BaseException | None = None
        log_config = LogConfig(
            min_insync_replicas=options.min_insync_replicas, segment_bytes=options.segment_bytes
        )
        if options.power_loss:
            log_config = replace(log_config, flush_messages=options.power_loss_flush_messages)
        # The coordinators' internal topics are compacted, as the brokers create them, their
        # segments rolling every few hundred ms and the cleaner taking any dirty section, so
        # compaction runs under the faults and the coordinators' reloads read cleaned logs.
        compacted = replace(
            log_config,
            cleanup_policy=("compact",),
            segment_ms=options.internal_segment_ms,
            min_cleanable_dirty_ratio=0.01,
        )
        self.node_config = NodeConfig(
            log_config=log_config,
            topic_log_configs={
                **{t: compacted for t in (TRANSACTION_STATE_TOPIC, cg.OFFSETS_TOPIC,
                                          SHARE_STATE_TOPIC)},
                # the administered topics' deleted logs go within the seed's time
                **{t: replace(log_config, file_delete_delay_ms=500) for t in ADMIN_TOPICS},
            },
            broker_props={
                "replica.fetch.wait.max.ms": "100",
                "replica.fetch.backoff.ms": "50",
                "replica.socket.timeout.ms": "800",
                "replica.lag.time.max.ms": str(options.replica_lag_time_max_ms),
                "replica.high.watermark.checkpoint.interval.ms": "200",
                # The housekeeping (`server/housekeeping.py`) paced to run within a seed's
                # simulated seconds; retention keeps the topics' week (nothing acknowledged goes).
                "log.flush.offset.checkpoint.interval.ms": "300",
                "log.flush.start.offset.checkpoint.interval.ms": "1000",
                "log.retention.check.interval.ms": "1000",
                "log.cleaner.backoff.ms": "1000",
            },
            request_timeout_ms=options.request_timeout_ms,
            log_dirs=options.log_dirs,
        )

        self.tps = [TopicPartition(TOPIC, p) for p in range(options.partitions)]
        self.plane: RealControlPlane | None = None
        self.operations: ClusterOperations | None = None
        if options.controller == "real":
            with_ops = options.operations and options.faults
            rebalance = options.auto_rebalance or (
                rebalance_config(ops_rng) if with_ops else RebalanceConfig()
            )
            self.plane = RealControlPlane(
                self,
                root,
                hosts=options.controller_hosts,
                request_timeout_ms=options.request_timeout_ms,
                unclean_election=options.unclean_election,
                rebalance=rebalance,
                session_timeout_ms=options.session_timeout_ms,
                on_crash_at_write=self._on_controller_crash_at_write,
            )
            if rebalance.auto_leader_rebalance_enable:
                self.result.faults.append(
                    f"0: auto leader rebalance every {rebalance.leader_imbalance_check_interval_s}"
                    f" s, imbalance {rebalance.leader_imbalance_per_broker_percentage}%"
                )
            if with_ops:
                self.operations = ClusterOperations(
                    self,
                    self.plane,
                    ops_rng,
                    TOPIC,
                    dict(assignments),
                    self._admin_operations(seed) if options.admin_operations else (),
                    keep_in_sync=options.reassign_keep_in_sync,
                    min_replication_factor=(
                        options.min_insync_replicas if options.transactions else 1
                    ),
                )

    def _admin_operations(self, seed: int) -> list[AdminOperations]:
        assert self.plane is not None
        out: list[AdminOperations] = [
            TopicOperations(self, self.plane, random.Random(f"{seed}:topics"))
        ]
        if self.options.log_dirs > 1:
            out.append(LogDirOperations(self, random.Random(f"{seed}:log-dirs"), TOPIC))
        return out

    @property
    def controller_ids(self) -> list[int]:
        """The network addresses of the controller (candidates)."""
        return [CONTROLLER_ID] if self.plane is None else sorted(self.plane.hosts)

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None:
        """The partition's leader and ISR as the store holds them."""
        if self.plane is not None:
            return self.plane.stored_state(tp)
        return self.store.states.get(tp)

    # --- Endpoints -----------------------------------------------------------------------------
    def incarnation(self, node_id: int) -> int | None:
        if node_id == CLIENT_ID:
            return 0
        if self.plane is not None and node_id in self.plane.hosts:
            return self.plane.incarnation(node_id)
        if node_id == CONTROLLER_ID:
            c = self.controller
            return self.controller_incarnation if c is not None and c.alive else None
        if node_id in self.down or node_id not in self.nodes:
            return None
        return self.incarnations[node_id]

    def now_ms(self) -> int:
        return self.loop.now_ms()

    def node(self, broker_id: int) -> SimBroker | None:
        n = self.nodes.get(broker_id)
        return n if n is not None and n.up else None

    # --- processes ------------------------------------------------------------------------------
    def start_broker(self, b: int) -> None:
        self.incarnations[b] = self.incarnations.get(b, 0) + 1
        epoch = -1  # with the real controller's store, the broker registers itself
        if self.plane is None:
            if b in self.store.registrations:  # the old session: expire it first
                self.expire_session(b)
            epoch = self.store.register(b)
        node = SimBroker(
            b,
            self.root / f"broker-{b}",
            self.incarnations[b],
            epoch,
            self.network,
            self.node_config,
            self.now_ms,
            self._send_to_controller,
            self.node,
            self,
            random.Random(self.rng.getrandbits(64)),
            sessions=self.plane,
        )
        node.start()
        if self.options.transactions:
            TxnHost(self, node, self.options.txn)
        if self.options.consumer_groups or self.options.share_consumers:
            groups = cg.GroupHost(self, node, self.options.groups, self.group_ledger)
            if self.options.share_consumers:
                ws.ShareHost(self, node, self.share_config, self.share_ledger, groups)
        self.nodes[b] = node
        self.down.discard(b)
        self._notify_controller()

    def crash_broker(self, b: int) -> None:
        node = self.nodes[b]
        files = node.crash()
        self.down.add(b)
        self.result.faults.append(f"{self.now_ms()}: crash broker {b}")
        if self.options.power_loss:
            for path, before, after in self.disk.lose_unsynced(files, self.fault_rng):
                self.result.faults.append(
                    f"{self.now_ms()}:   power loss cuts {path.name} of broker {b} "
                    f"from {before} to {after} bytes"
                )
        epoch = node.broker_epoch
        plane = self.plane
        if plane is not None:
            sid = plane.broker_session(b)
            if sid is not None:  # None: already expired (a restart registers anew)
                self.loop.call_later(
                    self.options.session_timeout_ms / 1000, lambda: plane.expire_broker(b, sid)
                )
            return

        async def expire() -> None:
            await asyncio.sleep(self.options.session_timeout_ms / 1000)
            reg = self.store.registrations.get(b)
            if reg is not None and reg.epoch == epoch:
                self.expire_session(b)

        self.spawn(expire())

    async def stop_broker(self, b: int) -> None:
        """A clean stop (after a controlled shutdown): the process stops and closes its
        session, so its registration goes at once."""
        node = self.nodes[b]
        await node.stop()
        self.down.add(b)
        self.expire_session(b)

    def log_fault(self, line: str) -> None:
        self.result.faults.append(line)

    def claim_producer_id(self) -> int:
        """A producer id no one else has (the brokers' producer id blocks, simulated)."""
        self._next_producer_id += 1
        return self._next_producer_id

    def crash_coordinator(self, b: int, why: str) -> None:
        """Crash broker `b` (the transaction coordinator) in a few ms, if the faults are still
        on and it may crash then; it restarts later."""
        o = self.options
        if not o.faults or self.now_ms() >= o.duration_ms:
            return
        rng = self.fault_rng

        def crash() -> None:
            if (
                self.now_ms() >= o.duration_ms
                or self.node(b) is None
                or b in self.stopping
                or len(self.down | self.stopping) >= o.brokers - 1
            ):
                return
            self.result.faults.append(f"{self.now_ms()}: coordinator crash after {why}")
            self.crash_broker(b)
            self.spawn(self.restart_later(b, rng.uniform(50, 800)))

        self.loop.call_later(rng.uniform(0, 15) / 1000, crash)

    def _on_controller_crash_at_write(self, host: int) -> None:
        if self.operations is not None:
            self.operations.on_crash_at_write(host)

    def expire_session(self, b: int) -> None:
        if self.plane is not None:
            self.plane.expire_broker(b)
            return
        self.store.registrations.pop(b, None)
        self._notify_controller()

    def reregister(self, b: int) -> None:
        """A live broker whose session expired registers again with a new broker epoch (the
        model controller's; with the real one, the broker's own `StoreSession` does, once it
        has noticed)."""
        node = self.node(b)
        if node is None:
            return
        node.fence.broker_epoch = self.store.register(b)
        self._notify_controller()

    def start_controller(self, host: int = CONTROLLER_ID) -> None:
        if self.plane is not None:
            self.plane.start_host(host)
            return
        if self.controller is not None and self.controller.alive:
            return  # one is running already (e.g. started when healing)
        self.controller_incarnation += 1
        c = SimController(
            self.store, self.network, self._deliver, unclean_election=self.options.unclean_election
        )
        self.controller = c
        c.activate()

    def crash_controller(self, host: int = CONTROLLER_ID) -> None:
        if self.plane is not None:
            self.plane.crash_host(host, self.options.session_timeout_ms)
            self.result.faults.append(f"{self.now_ms()}: crash controller host {host}")
            return
        if self.controller is not None:
            self.controller.crash()
        self.result.faults.append(f"{self.now_ms()}: crash controller")

    def _notify_controller(self) -> None:
        """A store watch: the controller sees broker changes a little later."""
        if self.plane is not None:
            return  # the real controller has its own watches
        c = self.controller

        async def fire() -> None:
            await asyncio.sleep(self.fault_rng.uniform(0.5, 5) / 1000)
            if c is not None and c.alive:
                c.on_broker_change()

        self.spawn(fire())

    async def _deliver(self, b: int, msg: ControllerMessage) -> int:
        node = self.node(b)
        if node is None:
            raise ConnectionError(f"broker {b} is down")
        return await node.handle_controller_message(msg)

    async def _send_to_controller(self, b: int, body: Mapping[str, Any]) -> Any:
        if self.plane is not None:
            node = self.node(b)
            if node is None:
                raise ConnectionError("down")
            return await self.plane.alter_partition(node, body)
        c = self.controller
        if c is None or not c.alive:
            raise ConnectionError("no controller")

        async def handler() -> Any:
            return c.alter_partition(body)

        return await self.network.call(
            b, CONTROLLER_ID, handler, timeout_ms=self.options.request_timeout_ms
        )

    # --- clients --------------------------------------------------------------------------------
    def client(self, name: str) -> SimClients:
        """A client process's connections to the brokers (request frames)."""
        timeout_ms = self.options.produce_timeout_ms + 500
        return SimClients(self, CLIENT_ID, client_id=name, timeout_ms=timeout_ms)

    async def producer(self, pid: int) -> None:
        rng = random.Random(self.client_rng.random())
        o = self.options
        clients = self.client(f"producer-{pid}")
        view = ClusterView(clients, self.broker_ids, rng)  # Metadata: possibly stale
        seq = 0
        while True:
            await asyncio.sleep(rng.uniform(*o.produce_interval_ms) / 1000)
            tp = rng.choice(self.tps)
            leader = (await view.leaders(tp.topic)).get(tp.partition)
            if leader is None:
                view.forget_leaders(tp.topic)
                continue
            seq += 1
            value = f"p{pid}-{seq}".encode()
            batch = build_batch([(None, value)], timestamp_ms=self.now_ms())
            self.result.produced += 1
            answer = await produce(clients, leader, tp, batch, o.produce_timeout_ms)
            if answer is not None and answer[0] is ErrorCode.none:
                self.history.record_ack(tp, answer[1], parse_header(batch).crc)
            else:
                view.forget_leaders(tp.topic)

    async def consumer(self) -> None:
        rng = random.Random(self.client_rng.random())
        clients = self.client("consumer")
        view = ClusterView(clients, self.broker_ids, rng)
        while True:
            await asyncio.sleep(rng.uniform(20, 120) / 1000)
            tp = rng.choice(self.tps)
            # The leader a Metadata answer names, or half the time any broker (a client whose
            # metadata is wrong): a stale (zombie) leader is allowed to answer, others refuse.
            b = named = (await view.leaders(tp.topic)).get(tp.partition)
            if b is None or rng.random() < 0.5:
                b = rng.choice(self.broker_ids)
            offset = rng.choice([0, rng.randint(0, 50)])
            r = await fetch(clients, b, tp, offset, READ_UNCOMMITTED)
            if b == named and (r is None or r.error_code != ErrorCode.none):
                view.forget_leaders(tp.topic)
            if r is None or r.error_code != ErrorCode.none or not r.records:
                continue
            values = {
                off: crc
                for off, (last, crc) in decode_batches(bytes(r.records)).items()
                if last < r.high_watermark
            }
            self.history.consumed += len(values)
            self.history.record_committed(tp, values, f"consumer reading broker {b}")
            if self.options.transactions and rng.random() < 0.5:
                # The same offset as a read_committed consumer, from the same (maybe stale)
                # leader: it may show only committed transactions.
                rc = await fetch(clients, b, tp, offset, READ_COMMITTED)
                if rc is not None and rc.error_code == ErrorCode.none:
                    self.txn_ledger.check_read_committed(
                        tp,
                        read_committed_values(rc.records, rc.aborted_transactions),
                        f"consumer reading broker {b}",
                    )

    # --- faults ---------------------------------------------------------------------------------
    async def faults(self, until_ms: int) -> None:
        rng = self.fault_rng
        o = self.options
        while True:
            await asyncio.sleep(rng.uniform(*o.fault_interval_ms) / 1000)
            if self.now_ms() >= until_ms:
                return
            kind = rng.choice(
                ["crash", "crash", "expire", "partition", "partition", "controller", "nothing"]
            )
            up = [b for b in self.broker_ids if b not in self.down]
            stable = [b for b in up if b not in self.stopping]
            if kind == "crash" and len(self.down | self.stopping) < o.brokers - 1 and stable:
                b = rng.choice(stable)
                self.crash_broker(b)
                self.spawn(self.restart_later(b, rng.uniform(50, 1500)))
            elif kind == "expire" and up:
                b = rng.choice(up)
                self.result.faults.append(f"{self.now_ms()}: expire session of broker {b}")
                self.expire_session(b)
                notice_ms = rng.uniform(20, 400)  # how late the broker learns of it
                if self.plane is not None:  # the broker renews its session itself
                    self.plane.notice_delays_ms[b] = notice_ms
                else:
                    self.loop.call_later(notice_ms / 1000, self.reregister, b)
            elif kind == "partition":
                ends = [*self.broker_ids, *self.controller_ids, CLIENT_ID]
                a, c = rng.sample(ends, 2)
                self.network.partition(a, c)
                self.result.faults.append(f"{self.now_ms()}: cut {a} <-> {c}")
                self.loop.call_later(rng.uniform(50, 1500) / 1000, self.network.heal, a, c)
            elif kind == "controller" and self.plane is not None:
                self._real_controller_fault(rng)
            elif kind == "controller" and self.controller is not None and self.controller.alive:
                self.crash_controller()
                self.loop.call_later(rng.uniform(20, 500) / 1000, self.start_controller)

    def _real_controller_fault(self, rng: random.Random) -> None:
        """Crash the active controller's host (or, as often, expire its session)."""
        plane = self.plane
        assert plane is not None
        active = plane.active_host()
        if active is None:
            return
        host = active.net_id
        if rng.random() < 0.5:
            self.crash_controller(host)
            self.loop.call_later(rng.uniform(20, 500) / 1000, self.start_controller, host)
        else:
            self.result.faults.append(f"{self.now_ms()}: expire session of controller {host}")
            plane.expire_host_session(host)
            self.loop.call_later(rng.uniform(20, 400) / 1000, plane.renew_host_session, host)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in a task of the world's own, kept until it ends (a task nothing refers
        to may be collected while it waits)."""
        task = self.loop.create_task(work)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    async def restart_later(self, b: int, delay_ms: float) -> None:
        await asyncio.sleep(delay_ms / 1000)
        if b in self.down:
            self.result.faults.append(f"{self.now_ms()}: restart broker {b}")
            self.start_broker(b)

    # --- checks ---------------------------------------------------------------------------------
    def after_step(self) -> None:
        if self._failure is not None:
            return
        try:
            self.share_ledger.check()
            checks.check_step(self.nodes, self.history)
            if self.now_ms() >= self._next_data_check:
                self._next_data_check = self.now_ms() + self.options.data_check_interval_ms
                self.check_data()
        except BaseException as e:
            self._failure = e
            self.loop.stop()

    def check_data(self) -> None:
        checks.check_data(self)
        if self.options.transactions:
            check_txn_reads(self)

    def check_final(self) -> None:
        self.check_data()
        checks.check_leaders_final(self)
        if self.options.transactions:
            check_txn_final(self, self.txn_producers)
        if self.options.consumer_groups:
            cg.check_final(self, self.group_members, self.options.partitions)
        if self.options.share_consumers:
            ws.check_final(self, self.share_ledger, self.share_config, self.store.topic_id)

    def create_internal_topic(self, topic: str, partitions: int, shift: int) -> None:
        """A coordinator's internal topic, three replicas (fewer brokers: all), partition p's
        first on the broker `p + shift` along."""
        assert self.plane is not None
        n = len(self.broker_ids)
        self.plane.create_topic(
            topic,
            uuid.UUID(int=self.rng.getrandbits(128)),
            {
                p: tuple(self.broker_ids[(p + shift + i) % n] for i in range(min(3, n)))
                for p in range(partitions)
            },
        )

    # --- the run ----------------------------------------------------------------------------------
    async def main(self) -> None:
        o = self.options
        for b in self.broker_ids:
            self.start_broker(b)
        if self.plane is not None:
            for host in self.controller_ids:
                self.start_controller(host)
            self.plane.create_topic(TOPIC, self.store.topic_id, self.store.assignments)
            if o.transactions:
                self.create_internal_topic(TRANSACTION_STATE_TOPIC, o.txn.state_partitions, 1)
            if o.consumer_groups or o.share_consumers:
                self.create_internal_topic(cg.OFFSETS_TOPIC, 1, 2)
            if o.share_consumers:
                self.create_internal_topic(SHARE_STATE_TOPIC, o.share.state_partitions, 1)
        else:
            self.start_controller()
        tasks = [self.loop.create_task(self.producer(i)) for i in range(o.producers)]
        if o.consumer_groups:
            meta = cg.topic_meta(TOPIC, self.store.topic_id, o.partitions)
            for i in range(o.groups.members):
                rng = random.Random(self.client_rng.random())
                limit = o.duration_ms if o.faults else 0
                m = cg.SimMember(self, i, rng, o.groups, meta, limit)
                self.group_members.append(m)
                tasks.append(self.loop.create_task(m.run()))
        if o.share_consumers:
            for i in range(o.share.members):
                sc = ShareConsumer(self, i, random.Random(self.client_rng.random()),
                                   self.share_config, self.share_ledger, self.store.topic_id)
                tasks += [self.loop.create_task(t) for t in sc.tasks()]
        tasks.append(self.loop.create_task(self.consumer()))
        txn_tasks = []
        if o.transactions:
            for i in range(o.txn.producers):
                p = TxnProducer(self, i, random.Random(self.client_rng.random()), o.txn)
                self.txn_producers.append(p)
                txn_tasks.append(self.loop.create_task(p.run()))
        ops = self.operations
        if ops is not None:
            tasks.append(self.loop.create_task(ops.run(o.duration_ms)))
        if o.faults:
            await self.faults(o.duration_ms)
        else:
            await asyncio.sleep(o.duration_ms / 1000)
        # Heal: restore the network, restart what is down, make sure a controller runs.
        self.result.faults.append(f"{self.now_ms()}: heal")
        if ops is not None:
            for b in await ops.stop():  # interrupted in a controlled shutdown: bounce it
                if self.node(b) is not None:
                    self.crash_broker(b)
        self.network.heal_all()
        for b in sorted(self.down):
            self.start_broker(b)
        if self.plane is not None:
            for host in self.controller_ids:
                self.start_controller(host)
                self.plane.renew_host_session(host)
        elif self.controller is None or not self.controller.alive:
            self.start_controller()
        for t in [*tasks[: o.producers], *txn_tasks]:
            t.cancel()  # stop producing, so everything can get committed
        await asyncio.sleep(o.settle_ms / 1000)
        await checks.settle_leaders(self, 2 * o.request_timeout_ms)
        if o.transactions:
            await settle_txns(self, self.txn_producers, 4 * o.request_timeout_ms)
        if o.share_consumers:
            await ws.settle(self, self.share_config, self.store.topic_id, o.settle_ms)
        if o.consumer_groups:
            # Last, right before the checks: a group goes on living while the others settle,
            # and a member whose heartbeats the network lost there may still be rejoining.
            await cg.settle(self, self.group_members, o.partitions, 4 * o.groups.request_timeout_ms)
        self.check_final()
        if ops is not None:
            await ops.check_final(4 * o.request_timeout_ms)

    def run(self) -> SimResult:
        asyncio.set_event_loop(self.loop)
        self.loop.after_step = self.after_step
        self.loop.set_exception_handler(self._on_loop_error)
        res = self.result
        try:
            with self.disk:
                self.loop.run_until_complete(self.main())
                # A task that failed and that nothing awaited is reported when it is freed,
                # which a reference cycle (an exception's traceback) puts off to a later
                # collection: collect now, while such a report still fails the seed.
                gc.collect()
        except RuntimeError as e:
            if self._failure is None:  # "Event loop stopped before Future completed" otherwise
                res.error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        except InvariantViolation as e:
            self._failure = e
        except Exception as e:
            res.error = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        finally:
            self._shutdown()
        if self._failure is not None:
            if isinstance(self._failure, InvariantViolation):
                res.violation = str(self._failure)
            else:
                res.error = "".join(traceback.format_exception(self._failure))
        res.acks = self.history.acks
        res.transactions = len(self.txn_ledger.txns)
        res.committed = self.txn_ledger.committed()
        res.txn_reads = self.txn_ledger.checked_reads
        res.group_reloads = self.group_ledger.reloads_checked
        res.group_deposed_loads = self.group_ledger.deposed_loads
        res.share_deliveries = self.share_ledger.deliveries
        res.share_accepts = self.share_ledger.accepts
        res.consumed = self.history.consumed
        res.steps = self.loop.steps
        res.sim_ms = self.now_ms()
        return res

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if self._failure is None:
            if exc is None:  # e.g. a task destroyed pending: name it, for the replay
                what = context.get("task") or context.get("future") or context.get("handle")
                exc = RuntimeError(f"{context.get('message')} {what!r}" if what else
                                   context.get("message"))
            self._failure = exc
        if loop.is_running():  # (reported by the collection after the run: nothing to stop)
            loop.stop()

    def _shutdown(self) -> None:
        loop = self.loop
        loop.after_step = None
        for node in self.nodes.values():
            if node.up:
                node.crash()
        if self.controller is not None:
            self.controller.crash()
        if self.plane is not None:
            self.plane.shutdown()
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.set_exception_handler(lambda _l, _c: None)
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
        asyncio.set_event_loop(None)


def _tmp_root() -> str | None:
    """tmpfs when there is one: fsync is then free (durability is simulated anyway)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def run_seed(seed: int, options: SimOptions | None = None) -> SimResult:
    with tempfile.TemporaryDirectory(prefix=f"wherry-sim-{seed}-", dir=_tmp_root()) as tmp:
        return World(seed, options or SimOptions(), Path(tmp)).run()
