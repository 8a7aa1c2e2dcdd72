"""Share groups on the world simulation's brokers (`python -m wherry.sim --share-consumers`):
the broker's share runtime on every simulated broker, and what the share consumers were told.

Each broker process runs a `ShareHost`: the share groups the broker runs
(`coordinator/shares.py`) on its replica node, attached to its group coordinator
(`sim/consumer_groups.py`'s `GroupHost`, as `wherry server` attaches them), so a share group's
membership is written to `__consumer_offsets` and replayed when that partition fails over. For
each partition of the simulation's topic it leads, one `share.partition.SharePartition` of the
group, loaded from the share coordinator's state when first fetched at its leader epoch
(ReadShareGroupState: a read at a newer leader epoch fences the older leaders), records read
from its real replica manager below the high watermark, acknowledgements applied and written
(WriteShareGroupState) before they are answered, lock expiries on its background ticker. Each
broker also runs the share coordinator (`coordinator/share_state.py`) on its replicas of the
simulated `__share_group_state`, and the broker's persister (`coordinator/share_persister.py`):
a share-partition leader reads and writes its state at the leader of the key's
`__share_group_state` partition -- in process when that is itself, else in
Read/WriteShareGroupState request frames over the simulated network through that broker's real
handlers, as `wherry server` does -- so the share coordinator loads, fails over with its
broker and replays its records like the broker's. A crashed broker loses its share-partitions,
share sessions and share coordinator; a zombie (a deposed leader that has not heard yet) may
still answer.

The share consumers (`sim/share_consumers.py`) reach all of it only by request frames through
the brokers' real handlers. Checked (`ShareLedger`), from what the brokers' runtimes acquired
(`ShareHost._acquire`, an observer) and what the consumers' answers said:
* a record is acquired only below the acquiring leader's high watermark;
* a record a consumer is handed was acquired for it by that broker's share-partition, and the
  answer's record batches hold it;
* a record whose ACCEPT was answered NONE is never delivered again by a leader at that leader
  epoch or a later one (only a zombie at an older epoch may, as in Kafka);
* no delivery count exceeds the delivery limit;
* after healing and settling, no record is lost: every record below each partition's high
  watermark (control records aside) was handed to a consumer, and the state the share
  coordinator holds (loaded on the leader of its `__share_group_state` partition) has moved
  past all of them (each accepted, or archived at the delivery limit);
* with transactional producers (`--transactions`) the group of odd seeds reads
  read_committed (`share.isolation.level`): no record of an aborted transaction is handed
  over, and the records that must be are those of committed transactions and plain ones.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import LeaderIsr
from wherry.coordinator.groups import GroupCoordinatorHost
from wherry.coordinator.shares import PartitionFetch
from wherry.protocol.records import ATTR_CONTROL, iter_batches
from wherry.replication.partition import Partition
from wherry.server.shares import ShareRuntime
from wherry.share.config import READ_COMMITTED, READ_UNCOMMITTED
from wherry.share.partition import AcquiredRange, RecordState
from wherry.share.state import SHARE_STATE_TOPIC, ShareKey, ShareState, state_partition_for
from wherry.sim.edges import sim_edges
from wherry.sim.invariants import InvariantViolation, headers_below, transaction_outcomes
from wherry.sim.network import SimNetwork
from wherry.sim.node import SimBroker

__all__ = [
    "ShareHost",
    "ShareLedger",
    "ShareWorldConfig",
    "check_final",
    "coordinator_state",
    "settle",
]

GROUP = "sim-share-group"
E = ErrorCode


@dataclass(frozen=True, slots=True)
class ShareWorldConfig:
    members: int = 3
    lock_ms: int = 400
    delivery_limit: int = 4
    max_records: int = 20
    heartbeat_interval_ms: int = 250
    session_timeout_ms: int = 1_500
    request_timeout_ms: int = 500
    state_partitions: int = 2  # of `__share_group_state`
    write_timeout_ms: int = 1_500  # the persister's retries (`share.coordinator.write.timeout.ms`)
    isolation_level: str = READ_UNCOMMITTED  # the group's `share.isolation.level`


class World(Protocol):
    network: SimNetwork
    broker_ids: list[int]
    tps: list[TopicPartition]

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...

    def incarnation(self, node_id: int) -> int | None: ...

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None: ...


@dataclass(slots=True)
class ShareLedger:
    """What the brokers' share-partitions acquired, and what the consumers were answered."""

    # (broker, member, partition, offset) -> the leader epoch of the share-partition that
    # last acquired the record for the member there
    acquired: dict[tuple[int, str, int, int], int] = field(default_factory=dict)
    # (partition, offset) -> the leader epoch whose write answered its ACCEPT
    accepted: dict[tuple[int, int], int] = field(default_factory=dict)
    handed: set[tuple[int, int]] = field(default_factory=set)  # seen by a consumer
    deliveries: int = 0
    accepts: int = 0
    violation: str | None = None  # the first one seen (raised by the world after the step)

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message

    def check(self) -> None:
        if self.violation is not None:
            raise InvariantViolation(self.violation)

    def acquired_by(self, broker: int, member: str, p: int, leader_epoch: int,
                    ranges: Sequence[AcquiredRange], hw: int) -> None:
        """The broker's share-partition at `leader_epoch` acquired `ranges` for `member`."""
        for r in ranges:
            if r.last_offset >= hw:
                self.fail(f"share: partition {p} offsets {r.first_offset}-{r.last_offset} "
                          f"acquired by broker {broker} at or above its high watermark {hw}")
            for o in range(r.first_offset, r.last_offset + 1):
                self.acquired[(broker, member, p, o)] = leader_epoch

    def handed_over(self, broker: int, member: str, p: int,
                    ranges: Sequence[tuple[int, int, int]], records: bytes,
                    limit: int) -> None:
        """A ShareFetch answer of `broker` gave `member` the acquired `ranges` (first, last,
        delivery count) of partition `p`, with `records`."""
        batches = [(h.base_offset, h.last_offset) for _, h in iter_batches(records)]
        for first, last, count in ranges:
            if count > limit:
                self.fail(f"share: partition {p} records {first}-{last} delivered {count} "
                          f"times (limit {limit})")
            for o in range(first, last + 1):
                self._handed(broker, member, p, o, batches)

    def _handed(self, broker: int, member: str, p: int, o: int,
                batches: list[tuple[int, int]]) -> None:
        epoch = self.acquired.get((broker, member, p, o))
        if epoch is None:
            self.fail(f"share: broker {broker} handed {member} offset {o} of partition {p}, "
                      "which its share-partition never acquired for it")
            return
        if not any(b <= o <= last for b, last in batches):
            self.fail(f"share: broker {broker} handed {member} offset {o} of partition {p} "
                      "without a record batch holding it")
        at = self.accepted.get((p, o))
        if at is not None and epoch >= at:
            self.fail(f"share: partition {p} offset {o} accepted at leader epoch {at} "
                      f"delivered again by broker {broker}'s leader at epoch {epoch}")
        self.deliveries += 1
        self.handed.add((p, o))

    def accepted_by(self, broker: int, member: str, p: int, offsets: Sequence[int]) -> None:
        """`broker` answered NONE to `member`'s ACCEPT of `offsets` of partition `p`."""
        for o in offsets:
            epoch = self.acquired.get((broker, member, p, o))
            if epoch is None:
                self.fail(f"share: broker {broker} accepted offset {o} of partition {p} from "
                          f"{member}, which it never acquired for it")
                continue
            self.accepted.setdefault((p, o), epoch)
            self.accepts += 1


class ShareHost(ShareRuntime):
    """One broker process's share groups and share coordinator, built as `wherry server`
    builds them (`server/shares.py`: `coordinator/shares.py`, `coordinator/share_state.py`,
    the persister between them) on the simulation's edges, on its replica node and its group
    coordinator; the group's configs fixed (the simulation has no metadata store). The
    handlers reach it as the broker's `shares`."""

    def __init__(self, world: World, node: SimBroker, config: ShareWorldConfig,
                 ledger: ShareLedger, groups: GroupCoordinatorHost) -> None:
        super().__init__(sim_edges(world, node, share_settings(config)),
                         groups.coordinator.partition_for)
        self.ledger = ledger
        self.share_config = config
        self.attach_groups(groups)
        node.replica.leadership_listeners.append(self.on_leadership_change)
        node.services.append(self)
        node.share_host = self
        self.start()

    def abandon(self) -> None:
        super().abandon()
        self.coordinator.runtime.abandon()
        self.persister.abandon()

    async def group_config(self, group: str) -> dict[str, str]:
        c = self.share_config
        return {
            "share.auto.offset.reset": "earliest",
            "share.session.timeout.ms": str(c.session_timeout_ms),
            "share.heartbeat.interval.ms": str(c.heartbeat_interval_ms),
            "share.isolation.level": c.isolation_level,
        }

    def _acquire(self, entry: Any, member: str, *args: Any) -> int:
        """The runtime's acquisition for a fetch, what it acquired noted in the ledger at once
        (with the leader epoch of the share-partition that acquired it and the high watermark
        then): the share-partition may be gone before the answer leaves."""
        got = super()._acquire(entry, member, *args)
        pf: PartitionFetch = args[-1]
        if got and pf.acquired:
            part = self.node.replica_manager.get_partition(entry.tp)
            hw = part.high_watermark if part is not None else -1
            self.ledger.acquired_by(self.broker_id, member, entry.tp.partition,
                                    entry.leader_epoch, pf.acquired, hw)
        return got


def share_settings(config: ShareWorldConfig) -> dict[str, str]:
    """The broker configs of the simulation's share groups and share coordinators."""
    return {
        "group.share.record.lock.duration.ms": str(config.lock_ms),
        "group.share.delivery.count.limit": str(config.delivery_limit),
        "group.share.partition.max.record.locks": "200",
        "share.coordinator.state.topic.num.partitions": str(config.state_partitions),
        "share.coordinator.write.timeout.ms": str(config.write_timeout_ms),
        # the persister's connections to the share coordinators
        "controller.socket.timeout.ms": str(config.request_timeout_ms),
    }


def _leader(world: World, tp: TopicPartition) -> Partition | None:
    """The partition on its leader as stored, if that broker leads it."""
    state = world.stored_state(tp)
    node = None if state is None else world.node(state.leader)
    part = None if node is None else node.replica_manager.get_partition(tp)
    return part if part is not None and part.is_leader else None


def _high_watermark(world: World, tp: TopicPartition) -> int | None:
    part = _leader(world, tp)
    return None if part is None else part.high_watermark


FINISHED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class _Unavailable:
    """No share coordinator holds a key's state (its partition has no loaded leader)."""


UNAVAILABLE = _Unavailable()


def coordinator_state(
    world: World, key: ShareKey, partitions: int
) -> ShareState | _Unavailable | None:
    """The state of `key` the share coordinator holds: the leader of its
    `__share_group_state` partition, once loaded."""
    tp = TopicPartition(SHARE_STATE_TOPIC, state_partition_for(key, partitions))
    stored = world.stored_state(tp)
    node = None if stored is None else world.node(stored.leader)
    host = None if node is None else node.share_host
    if not isinstance(host, ShareHost) or host.coordinator.owner_check(key)[0] != E.none:
        return UNAVAILABLE
    return host.coordinator.store.states.get(key)


def _unfinished(state: ShareState | None, end: int, limit: int) -> int | None:
    """The first offset below `end` the share coordinator's state leaves to deliver (None:
    none): not acknowledged, not archived, and short of the delivery limit (a record at the
    limit is archived when a leader next reaches it)."""
    if state is None:
        return 0 if end > 0 else None
    kept = {o: b for b in state.batches for o in range(b.first_offset, b.last_offset + 1)}
    for o in range(state.start_offset, end):
        b = kept.get(o)
        if b is None or (b.delivery_state not in FINISHED and b.delivery_count < limit):
            return o
    return None


def _done(world: World, config: ShareWorldConfig, topic_id: uuid.UUID) -> bool:
    for tp in world.tps:
        hw = _high_watermark(world, tp)
        key = ShareKey(GROUP, topic_id, tp.partition)
        state = coordinator_state(world, key, config.state_partitions)
        if hw is None or isinstance(state, _Unavailable):
            return False
        if _unfinished(state, hw, config.delivery_limit) is not None:
            return False
    return True


async def settle(world: World, config: ShareWorldConfig, topic_id: uuid.UUID,
                 grace_ms: int) -> None:
    """Give the consumers up to `grace_ms` more to finish the records below the high
    watermarks (the last ones may be on their way to the delivery limit), and `grace_ms` again
    each time the share state finishes more records -- a consumer slow to acknowledge, whose
    records go round to the delivery limit, or one working through the backlog of a long run
    alone, is progress, not a stall; the records to finish are bounded, so this ends -- and
    while a share-partition leader still has a change of its state to write (a write retried
    while the share coordinator's partition is short of in-sync replicas, just after healing,
    is on its way, not lost) up to `SETTLE_ROUNDS` graces in all; a seed already done waits
    for nothing."""
    start = world.now_ms()
    deadline = start + grace_ms
    last = _finished(world, config, topic_id)
    while world.now_ms() < deadline and not _done(world, config, topic_id):
        await asyncio.sleep(0.05)
        now = _finished(world, config, topic_id)
        if now > last:
            last = now
            deadline = world.now_ms() + grace_ms
        elif _writing(world):
            deadline = max(
                deadline, min(world.now_ms() + grace_ms, start + SETTLE_ROUNDS * grace_ms)
            )


def _writing(world: World) -> bool:
    """A live broker's share-partition holds a change its share coordinator has not taken
    yet (its write on its way, or to be retried)."""
    for b in world.broker_ids:
        node = world.node(b)
        host = node.share_host if node is not None else None
        if host is not None and any(e.unwritten for e in host.parts.values()):
            return True
    return False


SETTLE_ROUNDS = 4


def _finished(world: World, config: ShareWorldConfig, topic_id: uuid.UUID) -> int:
    """How many records the share coordinators' states count as done, over all partitions (a
    measure of progress only)."""
    n = 0
    for tp in world.tps:
        state = coordinator_state(world, ShareKey(GROUP, topic_id, tp.partition),
                                  config.state_partitions)
        if isinstance(state, ShareState):
            n += state.start_offset + sum(
                b.last_offset - b.first_offset + 1 for b in state.batches
                if b.delivery_state in FINISHED or b.delivery_count >= config.delivery_limit
            )
    return n


def check_final(world: World, ledger: ShareLedger, config: ShareWorldConfig,
                topic_id: uuid.UUID) -> None:
    """After healing and settling: every record below each partition's high watermark was
    handed to a consumer, and the share coordinator's state has each accepted or archived."""
    for tp in world.tps:
        part = _leader(world, tp)
        if part is None:
            continue  # the world's own final check reports a partition without a leader
        hw = part.high_watermark
        records = [
            o for h in headers_below(part.log, hw) if not h.attributes & ATTR_CONTROL
            for o in range(h.base_offset, h.last_offset + 1)
        ]
        if config.isolation_level == READ_COMMITTED:
            aborted, still_open = transaction_outcomes(part.log, hw)
            shown = sorted(o for p, o in ledger.handed if p == tp.partition and o in aborted)
            if shown:
                raise InvariantViolation(f"share: {tp} offsets {shown[:10]} of aborted "
                                         f"transactions handed to a read_committed group")
            # never delivered: aborted, or above the last stable offset
            records = [o for o in records if o not in aborted and o not in still_open]
        missing = [o for o in records if (tp.partition, o) not in ledger.handed]
        if missing:
            raise InvariantViolation(f"share: {tp} offsets {missing[:10]} below the high "
                                     f"watermark {hw} never delivered")
        key = ShareKey(GROUP, topic_id, tp.partition)
        state = coordinator_state(world, key, config.state_partitions)
        if isinstance(state, _Unavailable):
            raise InvariantViolation(f"share: {tp} after settling, no share coordinator has "
                                     f"its state loaded")
        left = _unfinished(state, hw, config.delivery_limit)
        if left is not None:
            raise InvariantViolation(f"share: {tp} after settling, offset {left} below the high "
                                     f"watermark {hw} is still to deliver in the share state")
