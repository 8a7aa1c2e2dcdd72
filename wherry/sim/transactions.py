"""Transactions in the simulation: the real transaction coordinator on every
simulated broker, transactional producers, and coordinator crashes mid-EndTxn.

Each broker process runs the transaction coordinator the broker runs
(`coordinator/transactions.py`, on the coordinator runtime): the pure
`txn.TransactionCoordinator` on `__transaction_state` (acks=all appends through the broker's
real replica manager; partitions loaded and unloaded as their leadership moves, so the
coordinator fails over with the partition's leader), its timers on the replica node's ticker
(timed-out transactions aborted with an epoch bump), and the real marker sender
(`coordinator/txn_markers.py`), whose `RequestClient`s talk to the partition leaders over
`wire.SimConnection`: WriteTxnMarkers frames carried over `SimNetwork` (delays, drops, cuts,
crashes) into the leader's request path and its WriteTxnMarkers handler. A crash abandons
all of it (`TxnHost.abandon`); the restarted broker starts a fresh coordinator.

`TxnProducer` is a transactional producer: InitProducerId on the coordinator FindCoordinator
names (`lookup.py`), then transactions: AddPartitionsToTxn, transactional batches (Produce
frames, acks=all, producer id / epoch / sequence) to the partitions' leaders as Metadata names
them, then EndTxn commit or abort at random, each retried on retriable errors as a client
does. Some stall mid-transaction past their timeout, so the
coordinator aborts them and the producer is fenced; any failure makes the producer abort and
InitProducerId again (a new epoch). Before some EndTxns the coordinator's broker is crashed
a few ms later (with power loss when the run has it), so the crash lands between
PrepareCommit/PrepareAbort and the markers or Complete*; its new leader loads the partition
and finishes them.
Everything the producers were told goes into `invariants.TxnLedger`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import LeaderIsr
from wherry.protocol.records import build_batch, iter_batches
from wherry.replication.fetch_reads import READ_COMMITTED, FetchPartition, FetchResult
from wherry.server.transactions import TransactionsRuntime
from wherry.sim.broker_checks import current_leader
from wherry.sim.edges import sim_edges
from wherry.sim.invariants import (
    TXN_VALUE_PREFIX,
    InvariantViolation,
    LedgerTxn,
    TxnLedger,
    read_committed_values,
)
from wherry.sim.lookup import TRANSACTION_KEY_TYPE, ClusterView
from wherry.sim.network import CLIENT_ID, SimNetwork
from wherry.sim.node import SimBroker
from wherry.sim.wire import SimClients, produce
from wherry.txn.metadata import TxnState
from wherry.txn.records import TRANSACTION_STATE_TOPIC, partition_for

log = logging.getLogger(__name__)

T = TypeVar("T")
E = ErrorCode

INIT_PRODUCER_ID_KEY, ADD_PARTITIONS_TO_TXN_KEY, END_TXN_KEY = 22, 24, 26
# A transactional batch is sent again (same sequence: the leader keeps it once) after these,
# as a producer retries within its delivery timeout; any other error or a lost answer fails
# the transaction.
PRODUCE_ATTEMPTS = 3
RETRIABLE_PRODUCE = frozenset(
    {E.not_enough_replicas, E.not_enough_replicas_after_append, E.request_timed_out}
)
TV2_PRODUCE_VERSION = 12


def _error_of(resp: Any) -> ErrorCode:
    """A coordinator answer's error: the top-level one, else AddPartitionsToTxn's first
    partition error that is not NONE."""
    if hasattr(resp, "error_code"):
        return ErrorCode(resp.error_code)
    for t in resp.results_by_topic_v3_and_below:
        for p in t.results_by_partition:
            if p.partition_error_code != ErrorCode.none:
                return ErrorCode(p.partition_error_code)
    return ErrorCode.none


# Errors after which a client retries the same coordinator request (after finding the
# coordinator again).
RETRIABLE = frozenset(
    {
        E.not_coordinator,
        E.coordinator_not_available,
        E.coordinator_load_in_progress,
        E.concurrent_transactions,
        E.unknown_topic_or_partition,
    }
)


@dataclass(frozen=True, slots=True)
class TxnSimConfig:
    producers: int = 2
    state_partitions: int = 2  # of __transaction_state
    timeout_ms: int = 500  # the producers' transaction.timeout.ms
    abort_check_interval_ms: int = 100  # the coordinator's timed-out transaction check
    stall_probability: float = 0.12  # a producer stalls mid-transaction past its timeout
    commit_probability: float = 0.65
    crash_probability: float = 0.2  # the coordinator's broker crashes right after an EndTxn
    request_timeout_ms: int = 800
    v2_share: float = 0.5  # of the producers, transactions v2 clients


class World(Protocol):
    """What transactions need from `world.World`."""

    network: SimNetwork
    broker_ids: list[int]
    tps: list[TopicPartition]
    txn_ledger: TxnLedger

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...

    def incarnation(self, node_id: int) -> int | None: ...

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None: ...

    def crash_coordinator(self, broker_id: int, why: str) -> None: ...


# --- the broker side -----------------------------------------------------------------------------
class TxnHost(TransactionsRuntime):
    """One broker process's transaction coordinator, built as `wherry server` builds it
    (`server/transactions.py`) on the simulation's edges: its log read inline, its markers'
    WriteTxnMarkers frames sent over the simulated network through the leaders' real
    handler."""

    def __init__(self, world: World, node: SimBroker, config: TxnSimConfig) -> None:
        self.world = world
        self.node = node
        super().__init__(sim_edges(world, node, txn_settings(config)))
        node.services.append(self)
        node.transaction_host = self
        self.start_markers()


def txn_settings(config: TxnSimConfig) -> dict[str, str]:
    """The broker configs of the simulation's transaction coordinators."""
    return {
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(
            config.abort_check_interval_ms
        ),
        "transaction.state.log.num.partitions": str(config.state_partitions),
        # the coordinator's writes and its markers' requests
        "controller.socket.timeout.ms": str(config.request_timeout_ms + 300),
        "transaction.state.log.load.buffer.size": str(1 << 20),
    }


# --- reading as a read_committed consumer --------------------------------------------------------
@dataclass(slots=True)
class CommittedRead:
    records: list[tuple[int, bytes | None]]
    aborted: list[tuple[int, int]]
    high_watermark: int
    last_stable_offset: int
    error: ErrorCode = E.none


def fetch_now(
    node: SimBroker, tp: TopicPartition, offset: int, isolation_level: int
) -> FetchResult:
    """One consumer Fetch through the leader's real fetch path, answered at once (no wait)."""
    out: list[FetchResult] = []
    node.replica_manager.fetch_messages(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 22,
        partitions=[FetchPartition(tp, offset, 1 << 22)],
        respond=out.append,
        isolation_level=isolation_level,
    )
    assert out, "a fetch without wait answers at once"
    return out[0]


def read_committed(node: SimBroker, tp: TopicPartition) -> CommittedRead:
    """The whole partition as a read_committed consumer reads it from `node` (its leader):
    Fetches with isolation level 1 from the log start up to the LSO, each range's records
    filtered by the aborted transactions its answer lists (`read_committed_values`)."""
    part = node.replica_manager.get_partition(tp)
    offset = 0 if part is None else part.log.log_start_offset
    out = CommittedRead([], [], -1, -1)
    while True:
        r = fetch_now(node, tp, offset, READ_COMMITTED)[tp]
        out.error = ErrorCode(r.error_code)
        out.high_watermark, out.last_stable_offset = r.high_watermark, r.last_stable_offset
        if out.error != E.none or not r.records:
            return out
        data = bytes(r.records)
        aborted = r.aborted_transactions or []
        out.aborted.extend(aborted)
        out.records.extend(read_committed_values(data, aborted))
        nxt = offset
        for _pos, h in iter_batches(data):
            nxt = max(nxt, h.next_offset)
        if nxt == offset:
            return out
        offset = nxt


# --- the client side ---------------------------------------------------------------------------
class TxnProducer:
    def __init__(self, world: World, index: int, rng: random.Random, config: TxnSimConfig) -> None:
        self.world = world
        self.rng = rng
        self.config = config
        self.tid = f"txn-{index}"
        self.producer_id = -1
        self.epoch = -1
        self.sequences: dict[TopicPartition, int] = {}
        self.number = 0
        self.crashes_armed = 0
        self.stalls = 0
        # Transactions v2 (KIP-890): no AddPartitionsToTxn, Produce v12, EndTxn v5's new epoch.
        self.v2 = rng.random() < config.v2_share
        # its connections to the coordinator and the partitions' leaders (request frames)
        self.clients = SimClients(
            world, CLIENT_ID, client_id=self.tid, timeout_ms=config.request_timeout_ms + 500
        )
        # the coordinator from FindCoordinator, the leaders from Metadata (lookup.py)
        self.view = ClusterView(self.clients, world.broker_ids, rng)

    # --- requests to the coordinator --------------------------------------------------------
    def _stored_coordinator(self) -> int | None:
        """The coordinator as the store has it (where the world's fault lands)."""
        p = partition_for(self.tid, self.config.state_partitions)
        state = self.world.stored_state(TopicPartition(TRANSACTION_STATE_TOPIC, p))
        return None if state is None or state.leader < 0 else state.leader

    async def _retrying(
        self, api_key: int, version: int, body: Mapping[str, Any], *, attempts: int = 30
    ) -> tuple[ErrorCode, Any] | None:
        """A request to the transaction coordinator (FindCoordinator's), retried as a client
        does -- a new coordinator lookup after an error --; (error, answer), or None when no
        answer came that is not retriable."""
        view = self.view
        for _ in range(attempts):
            b = await view.coordinator(self.tid, TRANSACTION_KEY_TYPE)
            if b is None:
                await asyncio.sleep(0.05)
                continue
            try:
                resp = await self.clients.call(b, api_key, version, body)
            except ConnectionError:
                view.forget_coordinator(self.tid, TRANSACTION_KEY_TYPE)
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
                continue
            err = _error_of(resp)
            if err in RETRIABLE:
                view.forget_coordinator(self.tid, TRANSACTION_KEY_TYPE)
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
                continue
            return err, resp
        return None

    async def init(self) -> bool:
        body = {
            "transactional_id": self.tid,
            "transaction_timeout": self.config.timeout_ms,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        answer = await self._retrying(INIT_PRODUCER_ID_KEY, 4, body)
        if answer is None or answer[0] != E.none:
            return False
        resp = answer[1]
        self.producer_id, self.epoch = int(resp.producer_id), int(resp.producer_epoch)
        self.sequences = {}
        return True

    def _reset(self) -> None:
        self.producer_id = self.epoch = -1

    # --- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(5, 60) / 1000)
            if self.producer_id < 0 and not await self.init():
                await asyncio.sleep(0.1)
                continue
            await self.transaction()

    async def transaction(self) -> None:
        world, rng, tid = self.world, self.rng, self.tid
        pid, epoch = self.producer_id, self.epoch
        self.number += 1
        txn = world.txn_ledger.begin(tid, self.number, pid, epoch, world.now_ms())
        tps = rng.sample(world.tps, rng.randint(1, len(world.tps)))

        if not self.v2:  # a v2 client's partitions are added by their leaders
            topics: dict[str, list[int]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(tp.partition)
            body = {
                "v3_and_below_transactional_id": tid,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            answer = await self._retrying(ADD_PARTITIONS_TO_TXN_KEY, 3, body)
            if answer is None or answer[0] != E.none:
                self._reset()  # fenced, or no answer: start over with a new epoch
                return
        failed = False
        for i in range(rng.randint(1, 5)):
            if rng.random() < self.config.stall_probability / 3:
                self.stalls += 1
                await asyncio.sleep((self.config.timeout_ms + rng.uniform(100, 600)) / 1000)
            if not await self._produce(txn, rng.choice(tps), i):
                failed = True
                break
        commit = not failed and rng.random() < self.config.commit_probability
        if commit:
            txn.commit_sent = True
        else:
            txn.abort_sent = True
        b = self._stored_coordinator()
        if b is not None and rng.random() < self.config.crash_probability:
            self.crashes_armed += 1
            world.crash_coordinator(b, f"EndTxn({'commit' if commit else 'abort'}) of {tid}")
        body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                "committed": commit}
        answer = await self._retrying(END_TXN_KEY, 5 if self.v2 else 3, body)
        err = None if answer is None else answer[0]
        if answer is not None and err == E.none:
            txn.answer = "committed" if commit else "aborted"
            if self.v2:  # every commit or abort bumps the epoch (or gives a new id)
                resp = answer[1]
                self.producer_id, self.epoch = int(resp.producer_id), int(resp.producer_epoch)
                self.sequences = {}
        if err != E.none or failed:
            self._reset()

    async def _produce(self, txn: LedgerTxn, tp: TopicPartition, i: int) -> bool:
        world = self.world
        value = TXN_VALUE_PREFIX + f"{self.tid}:{txn.number}:{i}".encode()
        seq = self.sequences.get(tp, 0)
        batch = build_batch(
            [(None, value)],
            timestamp_ms=world.now_ms(),
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        world.txn_ledger.sent(txn, tp, value)
        for attempt in range(PRODUCE_ATTEMPTS):  # the same batch again, as clients retry
            if attempt:
                await asyncio.sleep(self.rng.uniform(20, 100) / 1000)
            leader = (await self.view.leaders(tp.topic)).get(tp.partition)
            if leader is None:
                answer = None
                break
            answer = await produce(
                self.clients,
                leader,
                tp,
                batch,
                self.config.request_timeout_ms,
                transactional_id=self.tid,
                version=TV2_PRODUCE_VERSION if self.v2 else None,
            )
            if answer is None or answer[0] not in RETRIABLE_PRODUCE:
                break
        if answer is None or answer[0] != E.none:
            self.view.forget_leaders(tp.topic)
            return False
        self.sequences[tp] = seq + 1
        TxnLedger.acked(txn, tp, value)
        return True


__all__ = [
    "CommittedRead",
    "TxnHost",
    "TxnProducer",
    "TxnSimConfig",
    "check_final",
    "check_reads",
    "fetch_now",
    "read_committed",
]


# --- the checks ---------------------------------------------------------------------------------
def check_reads(world: World) -> None:
    """During the run: a read_committed read of each partition from its current leader shows
    nothing of an aborted or open transaction, and its LSO is not above its HW."""
    for tp in world.tps:
        node = current_leader(world, tp)
        if node is None:
            continue
        r = read_committed(node, tp)
        if r.error != E.none:
            continue
        _check_lso(tp, node, r)
        world.txn_ledger.check_read_committed(tp, r.records, f"leader {node.broker_id}")


def _check_lso(tp: TopicPartition, node: SimBroker, r: CommittedRead) -> None:
    if r.last_stable_offset > r.high_watermark:
        raise InvariantViolation(
            f"{tp}: leader {node.broker_id} answers a read_committed fetch with LSO "
            f"{r.last_stable_offset} above its high watermark {r.high_watermark}"
        )


def check_final(world: World, producers: list[TxnProducer]) -> None:
    """After healing (producers stopped, every open transaction past its timeout): no
    partition is held back by an open transaction (LSO = HW), every committed transaction is
    wholly visible to read_committed (its markers are on every partition of it), and every
    transactional id's coordinator has completed its last transaction."""
    ledger = world.txn_ledger
    visible: dict[TopicPartition, set[bytes]] = {}
    for tp in world.tps:
        node = current_leader(world, tp)
        if node is None:
            raise InvariantViolation(f"{tp}: after healing, no broker leads it")
        r = read_committed(node, tp)
        if r.error != E.none:
            raise InvariantViolation(f"{tp}: after healing, read_committed fails: {r.error.name}")
        _check_lso(tp, node, r)
        if r.last_stable_offset != r.high_watermark:
            raise InvariantViolation(
                f"{tp}: after healing, leader {node.broker_id}'s LSO {r.last_stable_offset} "
                f"is still below its high watermark {r.high_watermark}: a transaction is left "
                "open (its markers never written)"
            )
        ledger.check_read_committed(tp, r.records, f"leader {node.broker_id}, after healing")
        visible[tp] = {v for _o, v in r.records if v is not None}
    ledger.check_committed_complete(visible)
    unfinished = _unfinished_transaction(world, producers)
    if unfinished is not None:
        raise InvariantViolation(unfinished)


async def settle(world: World, producers: list[TxnProducer], grace_ms: int) -> None:
    """Every transaction's end is a chain of requests (the markers at acks=-1, which wait for
    the followers' fetches and the ISR's AlterPartition, then the Complete* record), and the
    network still drops a message now and then after healing, each loss costing a request
    timeout. Give a chain that such losses stretched past the settle time up to `grace_ms`
    more (seed 421); a seed whose transactions have all ended waits for nothing (and replays
    as before)."""
    deadline = world.now_ms() + grace_ms
    while world.now_ms() < deadline and _unfinished_transaction(world, producers) is not None:
        await asyncio.sleep(0.01)


def _unfinished_transaction(world: World, producers: list[TxnProducer]) -> str | None:
    """Why some transactional id's coordinator has not completed its last transaction (None:
    every one has)."""
    for p in producers:
        s = partition_for(p.tid, p.config.state_partitions)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, s)
        node = current_leader(world, tp)
        host = (
            None
            if node is None
            else next((h for h in node.services if isinstance(h, TxnHost)), None)
        )
        if host is None:
            return f"{tp}: after healing, no broker leads it"
        c = host.coordinator
        if c.is_partition_loading(s) or s not in c.owned_partitions():
            return f"{tp}: after healing, its leader {host.node.broker_id} has not loaded it"
        txn = c.transaction(p.tid)
        if txn is not None and txn.state not in (
            TxnState.EMPTY,
            TxnState.COMPLETE_COMMIT,
            TxnState.COMPLETE_ABORT,
        ):
            return (
                f"after healing, {p.tid}'s transaction is still {txn.state.name} on its "
                f"coordinator {host.node.broker_id} (partitions {sorted(txn.partitions)})"
            )
    return None
