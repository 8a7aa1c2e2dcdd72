"""The world's checks of its brokers' partitions (the rules themselves are `invariants.py`'s).

After every step (`check_step`): one leader per leader epoch of a topic, a leader's high
watermark never going down within its epoch nor above a maximal-ISR member's log end. Now and
then (`check_data`): what every broker holds below its high watermark is what was committed,
and every acknowledged record is on the stored leader. After healing (`settle_leaders`, then
`check_leaders_final`): every partition of the main topic led at its stored state by that
broker alone, and every acknowledged record below its high watermark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Protocol

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import LeaderIsr
from wherry.replication.partition import Partition
from wherry.sim.invariants import (
    History,
    InvariantViolation,
    LeaderView,
    batches_below,
    records_below,
)
from wherry.sim.node import SimBroker

__all__ = [
    "CheckedWorld",
    "check_data",
    "check_leaders_final",
    "check_step",
    "current_leader",
    "settle_leaders",
]


class StoredLeaders(Protocol):
    """The brokers and the stored partition states (what `current_leader` reads)."""

    def node(self, broker_id: int) -> SimBroker | None: ...

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None: ...


def current_leader(world: StoredLeaders, tp: TopicPartition) -> SimBroker | None:
    """The broker leading `tp` at the stored leader epoch (None while it is on its way, or
    when the leader is a deposed one the controller has moved on from)."""
    state = world.stored_state(tp)
    if state is None or state.leader < 0:
        return None
    node = world.node(state.leader)
    part = None if node is None else node.replica_manager.get_partition(tp)
    if part is None or not part.is_leader or part.leader_epoch != state.leader_epoch:
        return None
    return node


class CheckedWorld(Protocol):
    """What the checks read of `world.World`."""

    nodes: dict[int, SimBroker]
    broker_ids: list[int]
    tps: list[TopicPartition]
    history: History

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...

    def stored_state(self, tp: TopicPartition) -> LeaderIsr | None: ...


def open_partitions(
    nodes: Mapping[int, SimBroker],
) -> Iterator[tuple[int, SimBroker, TopicPartition, Partition]]:
    """(broker, node, tp, partition) of every partition with an open log on a broker up."""
    for b, node in nodes.items():
        if not node.up:
            continue
        for tp, part in node.replica_manager.partitions.items():
            if not part.log.closed:
                yield b, node, tp, part


def check_step(nodes: Mapping[int, SimBroker], history: History) -> None:
    leaders: list[LeaderView] = []
    leo: dict[tuple[int, TopicPartition], int] = {}
    epochs: dict[tuple[int, TopicPartition], int] = {}
    for b, node in nodes.items():  # `open_partitions`, inline: it runs every step
        if not node.up:
            continue
        for tp, part in node.replica_manager.partitions.items():
            plog = part.log
            if plog.closed:
                continue
            key = (b, tp)
            leo[key] = plog.log_end_offset
            epochs[key] = epoch = part.leader_epoch
            if part.is_leader:
                leaders.append(
                    LeaderView(
                        b,
                        node.incarnation,
                        tp,
                        epoch,
                        part.high_watermark,
                        part.state.maximal_isr,
                        None if (tid := part.topic_id) is None else tid.int,
                    )
                )
    history.check_leaders(leaders, leo, epochs)


def check_data(world: CheckedWorld) -> None:
    h = world.history
    for b, _node, tp, part in open_partitions(world.nodes):
        plog, hw, who = part.log, part.high_watermark, f"broker {b} below its HW"
        if plog.config.compact:
            kept = records_below(plog, hw)
            h.record_compacted(tp, plog.log_start_offset, hw, kept, who)
        else:
            h.record_committed(tp, batches_below(plog, hw), who)
    for tp in world.tps:
        state = world.stored_state(tp)
        if state is None or state.leader < 0:
            continue
        leader = world.node(state.leader)
        if leader is None:
            continue
        lpart = leader.replica_manager.get_partition(tp)
        if lpart is None or not lpart.is_leader or lpart.leader_epoch != state.leader_epoch:
            continue  # the LeaderAndIsr is still on its way
        h.check_acked_on_leader(tp, state.leader, lpart.log)


def _led_as_stored(world: CheckedWorld, tp: TopicPartition) -> bool:
    state = world.stored_state(tp)
    node = None if state is None else world.node(state.leader)
    part = None if node is None else node.replica_manager.get_partition(tp)
    return (
        state is not None
        and part is not None
        and part.is_leader
        and part.leader_epoch == state.leader_epoch
        and not _stray_leaders(world, tp, state.leader)
    )


def _stray_leaders(world: CheckedWorld, tp: TopicPartition, leader: int) -> list[tuple[int, int]]:
    """(broker, leader epoch) of every live broker other than the stored `leader` that still
    leads `tp`: one that missed the request that took its leadership away."""
    out = []
    for b in world.broker_ids:
        node = world.node(b) if b != leader else None
        part = None if node is None else node.replica_manager.get_partition(tp)
        if part is not None and part.is_leader:
            out.append((b, part.leader_epoch))
    return out


async def settle_leaders(world: CheckedWorld, grace_ms: int) -> None:
    """The auto leader rebalance goes on while the cluster settles; a LeaderAndIsr it sends
    near the end and the network drops is sent again only after the request timeout. Give
    such a last leader change up to `grace_ms` more (seed 936); a seed whose leaders are all
    in place waits for nothing (and replays as before)."""
    deadline = world.now_ms() + grace_ms
    while world.now_ms() < deadline and not all(_led_as_stored(world, tp) for tp in world.tps):
        await asyncio.sleep(0.01)


def check_leaders_final(world: CheckedWorld) -> None:
    for tp in world.tps:
        state = world.stored_state(tp)
        if state is None:
            raise InvariantViolation(f"{tp}: after healing, the store has no state for it")
        node = world.node(state.leader)
        part = None if node is None else node.replica_manager.get_partition(tp)
        if part is None or not part.is_leader or part.leader_epoch != state.leader_epoch:
            raise InvariantViolation(
                f"{tp}: after healing, no broker leads at the stored state {state}"
            )
        stray = _stray_leaders(world, tp, state.leader)
        if stray:
            raise InvariantViolation(
                f"{tp}: after healing, broker(s) (id, leader epoch) {stray} still lead it "
                f"beside the stored state {state}"
            )
        world.history.check_acked_committed(tp, state.leader, part.high_watermark)
