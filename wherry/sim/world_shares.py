"""Share consumers in the world simulation (`python -m wherry.sim --share-consumers`): share
fetches and acknowledgements against the simulated brokers, through leader failovers,
crashes and partitions of the real controller's world.

Each broker process runs a `ShareHost`: the share groups the broker runs
(`coordinator/shares.py`) on its replica node. For each partition of the simulation's topic
it leads, one `share.partition.SharePartition` of the group, loaded from the share
coordinator's state when first fetched at its leader epoch (ReadShareGroupState: a read at a
newer leader epoch fences the older leaders), records read from its real replica manager
below the high watermark, acknowledgements applied and written (WriteShareGroupState) before
they are answered, lock expiries on its background ticker. Only the persister is the
simulation's (`LedgerPersister`): the share coordinator as one store
(`share.state.ShareStateStore`, the real fencing rules) that is always reachable; the share
coordinator's own failovers are `sim/shares.py`'s subject. A crashed broker loses its
share-partitions; a zombie (a deposed leader that has not heard yet) may still answer.

`ShareMember`s fetch from whichever broker claims to lead a partition, over the simulated
network, and acknowledge what they got (mostly ACCEPT, some RELEASE, a few never: their
locks run out). Checked (`ShareLedger`):
* a record is delivered only below the delivering leader's high watermark;
* a record whose ACCEPT was answered OK is never delivered again by a leader at that leader
  epoch or a later one (only a zombie at an older epoch may, as in Kafka);
* no delivery count exceeds the delivery limit.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination.store import MetadataStore
from wherry.coordinator.shares import ShareGroupsRuntime
from wherry.runtime.clock import FunctionClock
from wherry.share.config import ShareBrokerConfig
from wherry.share.partition import (
    AckBatch,
    AckType,
    AcquiredRange,
)
from wherry.share.state import ShareKey, ShareState, ShareStateStore
from wherry.sim.invariants import InvariantViolation
from wherry.sim.network import CLIENT_ID, SimNetwork
from wherry.sim.node import SimBroker

__all__ = ["ShareHost", "ShareLedger", "ShareMember", "ShareWorldConfig"]

GROUP = "sim-share-group"
E = ErrorCode


@dataclass(frozen=True, slots=True)
class ShareWorldConfig:
    members: int = 3
    lock_ms: int = 400
    delivery_limit: int = 4
    max_records: int = 20


class World(Protocol):
    network: SimNetwork
    broker_ids: list[int]

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...


@dataclass(slots=True)
class ShareLedger:
    """The share coordinator's store and what the members were answered."""

    store: ShareStateStore = field(default_factory=ShareStateStore)
    # (partition, offset) -> the leader epoch whose write answered its ACCEPT
    accepted: dict[tuple[int, int], int] = field(default_factory=dict)
    deliveries: int = 0
    accepts: int = 0
    fenced_writes: int = 0
    loads: int = 0
    violation: str | None = None  # the first one seen (raised by the world after the step)

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message

    def check(self) -> None:
        if self.violation is not None:
            raise InvariantViolation(self.violation)

    def delivered(self, p: int, leader_epoch: int, ranges: list[AcquiredRange],
                  limit: int) -> None:
        for r in ranges:
            if r.delivery_count > limit:
                self.fail(f"share: partition {p} records {r.first_offset}-{r.last_offset} "
                          f"delivered {r.delivery_count} times (limit {limit})")
            for o in range(r.first_offset, r.last_offset + 1):
                at = self.accepted.get((p, o))
                if at is not None and leader_epoch >= at:
                    self.fail(f"share: partition {p} offset {o} accepted at leader epoch {at} "
                              f"delivered again by the leader at epoch {leader_epoch}")
                self.deliveries += 1


class LedgerPersister:
    """The share coordinator as one always-reachable store (`ShareLedger.store`) with the real
    fencing rules: a read at a newer leader epoch fences the older leaders, a stale write is
    refused."""

    def __init__(self, ledger: ShareLedger) -> None:
        self.ledger = ledger

    async def read(self, key: ShareKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        store = self.ledger.store
        fenced = store.fence_read(key, leader_epoch)
        if fenced is not None:
            store.apply(key, 0, fenced)
        self.ledger.loads += 1
        return store.read(key, leader_epoch)

    async def write(self, key: ShareKey, state: ShareState) -> ErrorCode:
        store = self.ledger.store
        err = store.check_write(key, state)
        if err != E.none:
            self.ledger.fenced_writes += 1
            return err
        store.apply(key, 0, state)
        return E.none

    async def delete(self, key: ShareKey) -> ErrorCode:
        return E.none  # groups are not deleted here

    def close(self) -> None:
        pass


class ShareHost(ShareGroupsRuntime):
    """One broker process's share groups, as `wherry server` runs them
    (`coordinator/shares.py`), on its replica node; the group's configs fixed (the simulation
    has no metadata store)."""

    def __init__(self, world: World, node: SimBroker, config: ShareWorldConfig,
                 ledger: ShareLedger, topic_id: uuid.UUID) -> None:
        broker = ShareBrokerConfig.from_props({
            "group.share.record.lock.duration.ms": str(config.lock_ms),
            "group.share.delivery.count.limit": str(config.delivery_limit),
            "group.share.partition.max.record.locks": "200",
        })
        super().__init__(node.broker_id, broker, FunctionClock(world.now_ms), node.replica,
                         self._no_store, LedgerPersister(ledger), lambda _g: 0)
        self.world = world
        self.ledger = ledger
        self.share_config = config
        self.topic_id = topic_id
        node.replica.leadership_listeners.append(self.on_leadership_change)
        node.services.append(self)
        node.share_host = self  # type: ignore[attr-defined]
        self.start()

    @staticmethod
    def _no_store() -> MetadataStore:
        raise RuntimeError("the simulation has no metadata store")

    async def group_config(self, group: str) -> dict[str, str]:
        return {"share.auto.offset.reset": "earliest"}

    async def fetch_for(self, member: str, tp: TopicPartition, max_records: int
                        ) -> tuple[ErrorCode, int, list[AcquiredRange]]:
        """A ShareFetch of one partition, answered at once: (error, the leader epoch of the
        share-partition that acquired the records, the acquired ranges)."""
        out = await self.fetch(GROUP, member, [(tp, self.topic_id)], max_wait_ms=0,
                               max_bytes=1 << 20, max_records=max_records)
        pf = out[tp]
        entry = self.parts.get((GROUP, tp))
        if pf.error_code != E.none or entry is None:
            return pf.error_code, -1, []
        got = pf.acquired
        part = self.node.replica_manager.get_partition(tp)
        hw = part.high_watermark if part is not None else -1
        for r in got:
            if r.last_offset >= hw:
                self.ledger.fail(f"share: {tp} offsets {r.first_offset}-{r.last_offset} "
                                 f"delivered at or above the leader's high watermark {hw}")
        limit = self.share_config.delivery_limit
        self.ledger.delivered(tp.partition, entry.leader_epoch, got, limit)
        return E.none, entry.leader_epoch, got

    async def acknowledge_at(self, member: str, tp: TopicPartition, leader_epoch: int,
                             batches: list[AckBatch]) -> ErrorCode:
        """A ShareAcknowledge of records acquired from the share-partition at `leader_epoch`."""
        entry = self.parts.get((GROUP, tp))
        if entry is None or entry.leader_epoch != leader_epoch:
            return E.not_leader_or_follower
        return await self.acknowledge(GROUP, member, tp, self.topic_id, batches)


class ShareMember:
    """A share consumer: fetch from a partition's (claimed) leader, acknowledge."""

    def __init__(self, world: World, index: int, rng: random.Random, config: ShareWorldConfig,
                 ledger: ShareLedger, tps: list[TopicPartition]) -> None:
        self.world = world
        self.member = f"share-member-{index}"
        self.rng = rng
        self.config = config
        self.ledger = ledger
        self.tps = tps

    async def _call(self, b: int, fn: Any) -> Any:
        async def handler() -> Any:
            node = self.world.node(b)
            host = None if node is None else getattr(node, "share_host", None)
            if host is None:
                raise ConnectionError("down")
            return await fn(host)

        return await self.world.network.call(CLIENT_ID, b, handler, timeout_ms=1000)

    async def run(self) -> None:
        rng = self.rng
        while True:
            await asyncio.sleep(rng.uniform(20, 100) / 1000)
            tp = rng.choice(self.tps)
            leaders = [b for b in self.world.broker_ids
                       if (n := self.world.node(b)) is not None
                       and (p := n.replica_manager.get_partition(tp)) is not None
                       and p.is_leader]
            if not leaders:
                continue
            b = rng.choice(leaders)
            try:
                err, epoch, got = await self._call(
                    b, lambda h, tp=tp: h.fetch_for(self.member, tp, self.config.max_records))
            except (ConnectionError, TimeoutError):
                continue
            if err != E.none or not got or rng.random() < 0.1:
                continue  # nothing, or never acknowledged: the locks run out
            await asyncio.sleep(rng.uniform(0, 2 * self.config.lock_ms) / 1000)
            types = {o: int(AckType.ACCEPT) if rng.random() < 0.85 else int(AckType.RELEASE)
                     for r in got for o in range(r.first_offset, r.last_offset + 1)}
            batches = [AckBatch(o, o, (t,)) for o, t in sorted(types.items())]
            try:
                code = await self._call(
                    b,
                    lambda h, tp=tp, e=epoch, bs=batches: h.acknowledge_at(self.member, tp, e, bs),
                )
            except (ConnectionError, TimeoutError):
                continue  # unknown outcome: not counted as accepted
            if code == E.none:
                for o, t in types.items():
                    if t == AckType.ACCEPT:
                        self.ledger.accepted.setdefault((tp.partition, o), epoch)
                        self.ledger.accepts += 1
