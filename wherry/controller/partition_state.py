"""The partition state machine (Kafka's ZooKeeper-mode PartitionStateMachine), pure.

States and the states each may be entered from::

    NonExistentPartition  <- OfflinePartition
    NewPartition          <- NonExistentPartition
    OnlinePartition       <- NewPartition, OnlinePartition, OfflinePartition
    OfflinePartition      <- NewPartition, OnlinePartition, OfflinePartition

A transition from any other state is invalid: it is logged (state-change log, ERROR) and the
partition is skipped, as Kafka does.

Going online needs a store write, so it comes in two halves with the controller's I/O in
between: `initial_leader_isr` (a new partition: leader = first live assigned replica, ISR = the
live assigned replicas) or `elect` (an offline or online partition: the offline election,
`election.offline_partition_election`) decide the new leader and ISR; once the controller has
written them (conditionally, re-deciding on a version conflict) `complete_online` records the
state and adds the LeaderAndIsr (to the live replicas) and UpdateMetadata (to every live
broker) requests to the event's batch. A partition whose election finds no leader stays
where it is (`fail_online` logs why).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from wherry.common.state_enum import StateEnum
from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.election import (
    Election,
    ElectionStrategy,
    controlled_shutdown_election,
    live_isr,
    offline_partition_election,
    preferred_replica_election,
    reassign_partition_election,
)
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import add_leader_and_isr
from wherry.controller.state_machine import ControllerStates
from wherry.protocol.interbroker import NO_LEADER
from wherry.runtime.state_change_log import (
    controller_prefix,
    log_controller_partition_change,
    state_change_logger,
)

log = logging.getLogger(__name__)


class PartitionState(StateEnum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


_S = PartitionState

VALID_PREVIOUS_STATES: Final[Mapping[PartitionState, frozenset[PartitionState]]] = MappingProxyType(
    {
        _S.NON_EXISTENT: frozenset({_S.OFFLINE}),
        _S.NEW: frozenset({_S.NON_EXISTENT}),
        _S.ONLINE: frozenset({_S.NEW, _S.ONLINE, _S.OFFLINE}),
        _S.OFFLINE: frozenset({_S.NEW, _S.ONLINE, _S.OFFLINE}),
    }
)


def is_valid_transition(current: PartitionState, target: PartitionState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """What `elect` decided for one partition: a new state to write, or why there is none."""

    leader_isr: LeaderIsr | None
    unclean: bool = False
    error: str | None = None
    written: bool = False  # set by the controller once the new state is stored


class PartitionStateMachine(ControllerStates[TopicPartition, PartitionState]):
    def __init__(self, controller_id: int) -> None:
        super().__init__(
            controller_id,
            absent=PartitionState.NON_EXISTENT,
            valid_previous=VALID_PREVIOUS_STATES,
            describe=lambda tp: f"partition {tp}",
        )

    # --- queries -----------------------------------------------------------------------------
    def partitions_in(self, *states: PartitionState) -> list[TopicPartition]:
        return sorted(tp for tp, s in self._states.items() if s in states)

    # --- startup -----------------------------------------------------------------------------
    def initialize(self, ctx: ControllerContext) -> None:
        """Kafka's initializePartitionState: a partition with a live leader is online, with a
        stored state but no live leader offline, without a stored state new."""
        self._states.clear()
        for tp in ctx.all_partitions():
            st = ctx.states.get(tp)
            if st is None:
                self._states[tp] = PartitionState.NEW
            elif st.leader != NO_LEADER and ctx.is_live(st.leader):
                self._states[tp] = PartitionState.ONLINE
            else:
                self._states[tp] = PartitionState.OFFLINE

    # --- transitions -------------------------------------------------------------------------
    def _set(
        self,
        ctx: ControllerContext,
        tp: TopicPartition,
        target: PartitionState,
        *,
        level: int = logging.INFO,
        unclean: bool = False,
    ) -> None:
        old = self.state(tp)
        st = ctx.states.get(tp)
        extra: dict[str, int | bool] = {}
        if st is not None:
            extra["zk_version"] = st.zk_version
        if unclean:
            extra["unclean"] = True
        log_controller_partition_change(
            self.controller_id,
            ctx.epoch,
            tp.topic,
            tp.partition,
            str(old),
            str(target),
            leader=None if st is None else st.leader,
            leader_epoch=None if st is None else st.leader_epoch,
            isr=None if st is None else st.isr,
            level=level,
            **extra,
        )
        self._record(tp, target)

    def to_new(self, ctx: ControllerContext, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        return self._move(ctx, tps, PartitionState.NEW)

    def to_offline(
        self, ctx: ControllerContext, tps: Iterable[TopicPartition]
    ) -> list[TopicPartition]:
        return self._move(ctx, tps, PartitionState.OFFLINE)

    def to_non_existent(
        self, ctx: ControllerContext, tps: Iterable[TopicPartition]
    ) -> list[TopicPartition]:
        return self._move(ctx, tps, PartitionState.NON_EXISTENT)

    def _move(
        self, ctx: ControllerContext, tps: Iterable[TopicPartition], target: PartitionState
    ) -> list[TopicPartition]:
        """The partitions of `tps` that may go to `target`, now in it (one already there, an
        offline partition going offline again, is left as it is)."""
        done = self.valid(ctx, tps, target)
        for tp in done:
            if self.state(tp) is not target:
                self._set(ctx, tp, target)
        return done

    # --- going online (the controller writes between deciding and completing) ---------------
    def initial_leader_isr(self, ctx: ControllerContext, tp: TopicPartition) -> LeaderIsr | None:
        """A new partition's first state: leader = first live assigned replica, ISR = the live
        assigned replicas, leader epoch 0. None (logged) when no replica is alive. Brokers in
        controlled shutdown count as not alive."""
        candidates = ctx.candidates_for(tp)
        live = tuple(r for r in ctx.replicas(tp) if r in candidates)
        if not live:
            self.fail_online(
                ctx,
                tp,
                f"no assigned replica of {list(ctx.replicas(tp))} is alive; live brokers are "
                f"{sorted(candidates)}",
            )
            return None
        return LeaderIsr(live[0], 0, live, ctx.epoch, -1)

    def elect(
        self,
        ctx: ControllerContext,
        tp: TopicPartition,
        current: LeaderIsr,
        *,
        unclean_allowed: bool = False,
        strategy: ElectionStrategy = ElectionStrategy.OFFLINE,
    ) -> ElectionOutcome:
        """An election for a partition in the Offline (or Online) state with `strategy`; the
        new state has the next leader epoch. No write when no replica is eligible."""
        assigned = ctx.replicas(tp)
        live = ctx.candidates_for(tp)
        e: Election
        if strategy in (ElectionStrategy.OFFLINE, ElectionStrategy.UNCLEAN):
            unclean_allowed = unclean_allowed or strategy is ElectionStrategy.UNCLEAN
            e = offline_partition_election(
                assigned, current.isr, live, unclean_allowed=unclean_allowed
            )
        elif strategy is ElectionStrategy.REASSIGN:
            e = reassign_partition_election(ctx.reassignment(tp).target, current.isr, live)
        elif strategy is ElectionStrategy.PREFERRED:
            e = preferred_replica_election(assigned, current.isr, live)
        else:
            e = controlled_shutdown_election(assigned, current.isr, live, ctx.shutting_down)
        if e.leader is None:
            return ElectionOutcome(
                None, error=self._no_leader_reason(ctx, tp, current, strategy, unclean_allowed)
            )
        return ElectionOutcome(
            LeaderIsr(e.leader, current.leader_epoch + 1, e.isr, ctx.epoch, current.zk_version),
            unclean=e.unclean,
        )

    @staticmethod
    def _no_leader_reason(
        ctx: ControllerContext,
        tp: TopicPartition,
        current: LeaderIsr,
        strategy: ElectionStrategy,
        unclean_allowed: bool,
    ) -> str:
        assigned = ctx.replicas(tp)
        live = sorted(ctx.candidates_for(tp))
        if strategy is ElectionStrategy.PREFERRED:
            why = (
                f"preferred replica {assigned[0] if assigned else None} is not alive or not in "
                f"ISR {list(current.isr)}"
            )
        elif strategy is ElectionStrategy.REASSIGN:
            why = (
                f"no target replica of {list(ctx.reassignment(tp).target)} is alive and in ISR "
                f"{list(current.isr)}"
            )
        elif strategy is ElectionStrategy.CONTROLLED_SHUTDOWN:
            why = f"no other replica of {list(assigned)} is alive and in ISR {list(current.isr)}"
        elif assigned and not [r for r in assigned if r in live]:
            why = f"no assigned replica of {list(assigned)} is alive"
        elif not unclean_allowed:
            why = (
                f"no replica in ISR {list(current.isr)} is alive and unclean leader "
                "election is disabled"
            )
        else:
            why = "no eligible replica"
        offline = sorted(b for b in assigned if not ctx.is_replica_online(b, tp) and ctx.is_live(b))
        if offline:  # live brokers whose replica is in a failed log dir
            why += f"; the replicas on {offline} are in an offline log dir"
        return f"{why}; live brokers are {sorted(ctx.leader_candidates())}"

    def needs_unclean_config(self, ctx: ControllerContext, tp: TopicPartition) -> bool:
        """True when an election of `tp` now would depend on the unclean-election setting."""
        st = ctx.states.get(tp)
        return st is not None and not live_isr(ctx.replicas(tp), st.isr, ctx.candidates_for(tp))

    def complete_online(
        self,
        ctx: ControllerContext,
        tp: TopicPartition,
        batch: RequestBatch,
        *,
        is_new: bool = False,
        unclean: bool = False,
    ) -> None:
        """The new state is written and in `ctx.states`: the partition is online; its live
        replicas get a LeaderAndIsr, every live broker an UpdateMetadata."""
        st = ctx.states[tp]
        if unclean:
            log.warning(
                "%s UNCLEAN leader election for partition %s: replica %d becomes leader "
                "though it was not in the ISR; committed data may be lost",
                controller_prefix(self.controller_id, ctx.epoch),
                tp,
                st.leader,
            )
        self._set(
            ctx,
            tp,
            PartitionState.ONLINE,
            level=logging.WARNING if unclean else logging.INFO,
            unclean=unclean,
        )
        add_leader_and_isr(batch, ctx, ctx.live_replicas(tp), tp, is_new=is_new)

    def fail_online(self, ctx: ControllerContext, tp: TopicPartition, reason: str) -> None:
        state_change_logger.error(
            "%s Failed to change state of partition %s from %s to %s: %s",
            controller_prefix(self.controller_id, ctx.epoch),
            tp,
            self.state(tp),
            PartitionState.ONLINE,
            reason,
        )
