"""Cluster operations as simulated events, with the real controller only.

Chosen at random with the seed's own RNG, alongside the faults: partition reassignments to a
random replica set (random brokers among the live ones, the same or a random replication
factor), cancellations of reassignments, preferred leader elections (every partition or
some), and controlled shutdowns of a broker followed by its clean stop and a later restart
(`SimBroker.controlled_shutdown`, retried as Kafka's broker does); beside them an admin
client's own operations through the brokers' handlers (`topic_operations.py`: CreateTopics,
CreatePartitions and DeleteTopics; `log_dir_operations.py`: AlterReplicaLogDirs). Cluster
requests go over the simulated network to the acting controller host
(`RealControlPlane.admin`) and may be lost; `ReassignmentLedger` keeps what each may have
done, for the final check.

A reassignment overlaps a controller crash often: right after one is started, the acting
controller host is, with some probability, either armed to crash right before one of its
next few store writes (so the crash lands between two steps of a reassignment event) or
crashed a random few milliseconds to seconds later (while the new replicas catch up).

Auto leader rebalance is on in some seeds, with a short interval in simulated time
(`rebalance_config`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.controller import Controller
from wherry.controller.leadership import PREFERRED
from wherry.controller.reassignment import ApiResult
from wherry.sim.admin_client import AdminOperations, AdminWorld
from wherry.sim.invariants import (
    LedgerEntry,
    ReassignmentLedger,
    check_reassignments_settled,
)
from wherry.sim.real_controller import RealControlPlane, RebalanceConfig

T = TypeVar("T")


class World(AdminWorld, Protocol):
    """What the operations need from `world.World` (the admin operations' needs too)."""

    tps: list[TopicPartition]

    def crash_controller(self, host: int) -> None: ...

    def start_controller(self, host: int) -> None: ...

    async def stop_broker(self, b: int) -> None: ...

    async def restart_later(self, b: int, delay_ms: float) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...


def rebalance_config(rng: random.Random) -> RebalanceConfig:
    """Half the seeds run auto leader rebalance, checking every 0.2 to 1 s (simulated)."""
    if rng.random() < 0.5:
        return RebalanceConfig(False)
    return RebalanceConfig(True, round(rng.uniform(0.2, 1.0), 3), rng.choice([0, 10]))


class ClusterOperations:
    # Kinds of operation, drawn uniformly (reassignments the most often).
    KINDS = ("reassign", "reassign", "reassign", "cancel", "elect", "shutdown")
    INTERVAL_MS = (150, 700)
    CRASH_AFTER_REASSIGN = 0.5  # probability of a controller crash soon after a reassignment

    def __init__(
        self,
        world: World,
        plane: RealControlPlane,
        rng: random.Random,
        topic: str,
        initial: dict[int, tuple[int, ...]],
        admin: Sequence[AdminOperations] = (),
        *,
        keep_in_sync: bool = True,
        min_replication_factor: int = 1,
    ) -> None:
        self.world = world
        self.keep_in_sync = keep_in_sync
        # Targets below it are not asked for (with transactions: min.insync.replicas, so
        # markers can be written once the cluster is healthy).
        self.min_replication_factor = min_replication_factor
        self.plane = plane
        self.rng = rng
        self.topic = topic
        self.ledger = ReassignmentLedger(initial={topic: dict(initial)})
        self.admin = admin
        self.tasks: list[asyncio.Task[None]] = []
        self.until_ms = 0
        self.counts: dict[str, int] = {}

    # --- the event source ---------------------------------------------------------------------
    async def run(self, until_ms: int) -> None:
        self.until_ms = until_ms
        loop = asyncio.get_running_loop()
        for ops in self.admin:
            self.tasks.append(loop.create_task(ops.run(until_ms, self._maybe_crash_controller)))
        while True:
            await asyncio.sleep(self.rng.uniform(*self.INTERVAL_MS) / 1000)
            if self.world.now_ms() >= until_ms:
                return
            kind = self.rng.choice(self.KINDS)
            op = {
                "reassign": self.reassign,
                "cancel": self.cancel,
                "elect": self.elect,
                "shutdown": self.shutdown,
            }[kind]
            self.tasks = [t for t in self.tasks if not t.done()]
            self.tasks.append(loop.create_task(op()))

    async def stop(self) -> list[int]:
        """At heal: end every operation still running; returns the brokers that were in a
        controlled shutdown (the world restarts them)."""
        stopping = sorted(self.world.stopping)
        for ops in self.admin:
            await ops.stop()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []
        self.plane.disarm_crashes()
        return stopping

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _live(self) -> list[int]:
        w = self.world
        return [b for b in w.broker_ids if b not in w.down and b not in w.stopping]

    async def _admin(self, work: Callable[[Controller], Awaitable[T | None]]) -> T | None:
        """None when the answer is lost or no controller acts."""
        try:
            return await self.plane.admin(work)
        except (ConnectionError, TimeoutError):
            return None

    # --- operations ---------------------------------------------------------------------------
    async def reassign(self) -> None:
        w, rng = self.world, self.rng
        live = self._live()
        assignment = self.plane.stored_assignment(self.topic)
        if not live or assignment is None:
            return
        tps = rng.sample(w.tps, rng.randint(1, len(w.tps)))
        targets: dict[TopicPartition, list[int]] = {}
        for tp in tps:
            current = assignment.partitions.get(tp.partition, [])
            removing = assignment.removing.get(tp.partition, [])
            rf = len([r for r in current if r not in removing])
            if rng.random() < 0.5:  # a new replication factor too
                rf = rng.randint(1, len(w.broker_ids))
            rf = max(rf, self.min_replication_factor)
            target = rng.sample(live, max(1, min(rf, len(live))))
            if len(target) < self.min_replication_factor:
                continue
            state = self.plane.stored_state(tp)
            in_sync = [b for b in (state.isr if state else ()) if b in live]
            if self.keep_in_sync and not set(target) & set(in_sync):
                # A careful operator keeps a live in-sync replica: a target with none (a
                # cancel back to lagging originals, say) can leave the partition with no ISR
                # member among its replicas, offline for good (Kafka 3.9 allows it too).
                if not in_sync:
                    continue
                target[rng.randrange(len(target))] = rng.choice(in_sync)
            targets[tp] = target
        if not targets:
            return
        now = w.now_ms()
        asked = {tp: self.ledger.start(tp.topic, tp.partition, t, now) for tp, t in targets.items()}
        w.log_fault(
            f"{w.now_ms()}: reassign "
            + ", ".join(f"{tp.partition} -> {t}" for tp, t in sorted(targets.items()))
        )
        self._count("reassign")
        self._maybe_crash_controller()

        async def work(c: Controller) -> dict[TopicPartition, ApiResult] | None:
            return await c.alter_partition_reassignments(dict(targets))

        self._record(asked, await self._admin(work))

    async def cancel(self) -> None:
        w, rng = self.world, self.rng
        a = self.plane.stored_assignment(self.topic)
        if a is None:
            return
        moving = [p for p in sorted(a.partitions) if a.adding.get(p) or a.removing.get(p)]
        p = rng.choice(moving) if moving and rng.random() < 0.8 else rng.choice(w.tps).partition
        tp = TopicPartition(self.topic, p)
        original = [r for r in a.partitions[p] if r not in a.adding.get(p, [])]
        state = self.plane.stored_state(tp)
        in_sync = {b for b in (state.isr if state else ()) if b in self._live()}
        if self.keep_in_sync and moving and not in_sync & set(original):
            return  # the careful operator does not cancel back to replicas all out of sync
        asked = {
            tp: self.ledger.cancel(
                self.topic,
                p,
                a.partitions[p],
                a.adding.get(p, []),
                a.removing.get(p, []),
                w.now_ms(),
            )
        }
        w.log_fault(f"{w.now_ms()}: cancel the reassignment of {p}")
        self._count("cancel")

        async def work(c: Controller) -> dict[TopicPartition, ApiResult] | None:
            return await c.alter_partition_reassignments({tp: None})

        self._record(asked, await self._admin(work))

    def _record(
        self,
        asked: dict[TopicPartition, LedgerEntry],
        answer: dict[TopicPartition, ApiResult] | None,
    ) -> None:
        if answer is None:
            return  # lost or not the controller: it may have happened
        for tp, request in asked.items():
            result = answer.get(tp)
            if result is not None:
                request.answer = "ok" if result[0] is ErrorCode.none else "error"

    async def elect(self) -> None:
        w, rng = self.world, self.rng
        some: Sequence[TopicPartition] | None = None
        if rng.random() < 0.5:
            some = sorted(rng.sample(w.tps, rng.randint(1, len(w.tps))))
        w.log_fault(
            f"{w.now_ms()}: preferred leader election of "
            + ("every partition" if some is None else str([tp.partition for tp in some]))
        )
        self._count("elect")

        async def work(c: Controller) -> dict[TopicPartition, ApiResult] | None:
            return await c.elect_leaders(PREFERRED, some)

        await self._admin(work)

    async def shutdown(self, broker: int | None = None) -> None:
        """Controlled shutdown of a live broker (`broker`, or one at random), its clean stop,
        a restart later."""
        w, rng = self.world, self.rng
        live = self._live()
        if len(w.down | w.stopping) >= len(w.broker_ids) - 1 or not live:
            return
        b = rng.choice(live) if broker is None else broker
        node = w.node(b)
        if node is None:
            return
        w.stopping.add(b)
        self._count("shutdown")
        w.log_fault(f"{w.now_ms()}: controlled shutdown of broker {b}")
        try:
            ok = await node.controlled_shutdown(self.plane.controlled_shutdown)
            if w.node(b) is not node:
                return
            w.log_fault(
                f"{w.now_ms()}: broker {b} stops"
                + ("" if ok else " (every controlled shutdown attempt failed)")
            )
            await w.stop_broker(b)
        finally:
            w.stopping.discard(b)
        w.spawn(w.restart_later(b, rng.uniform(100, 1500)))

    # --- controller crashes during reassignments ----------------------------------------------
    def _maybe_crash_controller(self, rng: random.Random | None = None) -> None:
        """`rng`: whose randomness decides (the topic operations' own), else the operations'."""
        rng, w = rng or self.rng, self.world
        if rng.random() >= self.CRASH_AFTER_REASSIGN:
            return
        h = self.plane.active_host()
        if h is None:
            return
        host = h.net_id
        if rng.random() < 0.5:
            writes = rng.randint(0, 6)
            w.log_fault(f"{w.now_ms()}: arm controller host {host} to crash at write {writes}")
            self.plane.arm_crash_at_write(host, writes)
            return
        delay_ms = rng.choice([rng.uniform(1, 20), rng.uniform(20, 1500)])
        if w.now_ms() + delay_ms >= self.until_ms:
            return
        restart_ms = rng.uniform(20, 500)

        def crash() -> None:
            if w.now_ms() >= self.until_ms:
                return
            w.crash_controller(host)
            asyncio.get_running_loop().call_later(restart_ms / 1000, w.start_controller, host)

        asyncio.get_running_loop().call_later(delay_ms / 1000, crash)

    def on_crash_at_write(self, host: int) -> None:
        """An armed host crashed: it restarts a little later (unless the faults are over)."""
        w = self.world
        w.log_fault(f"{w.now_ms()}: crash controller host {host} at a store write")
        if w.now_ms() < self.until_ms:
            delay = self.rng.uniform(20, 500) / 1000
            asyncio.get_running_loop().call_later(delay, w.start_controller, host)

    # --- the final check ----------------------------------------------------------------------
    async def check_final(self, grace_ms: int) -> None:
        """Every reassignment completed or was cancelled (`check_reassignments_settled`); the
        admin operations' checks (`settle_and_check`), given `grace_ms` to get there."""
        for ops in self.admin:
            await ops.settle_and_check(grace_ms)
        w = self.world
        a = self.plane.stored_assignment(self.topic)
        if a is None:
            raise AssertionError(f"the topic {self.topic} is gone")
        h = self.plane.active_host()
        ongoing: list[tuple[str, int]] | None = None
        if h is not None and h.controller is not None:
            listed = await h.controller.list_partition_reassignments(None)
            if listed is not None:
                ongoing = [(tp.topic, tp.partition) for tp in listed]
        online: dict[int, set[int]] = {}
        on_disk: dict[int, set[int]] = {}
        for b in w.broker_ids:
            node = w.node(b)
            if node is None:
                continue
            for tp in w.tps:
                part = node.replica_manager.get_partition(tp)
                if part is not None and not part.log.closed:
                    online.setdefault(tp.partition, set()).add(b)
                if node.log_manager.get_log(tp) is not None:
                    on_disk.setdefault(tp.partition, set()).add(b)
        check_reassignments_settled(
            self.topic,
            a.partitions,
            a.adding,
            a.removing,
            ongoing,
            online,
            on_disk,
            self.ledger,
        )
