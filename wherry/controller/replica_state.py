"""The replica state machine (Kafka's ZooKeeper-mode ReplicaStateMachine), pure.

States and the states each may be entered from::

    NewReplica                 <- NonExistentReplica
    OnlineReplica              <- NewReplica, OnlineReplica, OfflineReplica,
                                  ReplicaDeletionIneligible
    OfflineReplica             <- NewReplica, OnlineReplica, OfflineReplica,
                                  ReplicaDeletionIneligible
    ReplicaDeletionStarted     <- OfflineReplica
    ReplicaDeletionSuccessful  <- ReplicaDeletionStarted
    ReplicaDeletionIneligible  <- OfflineReplica, ReplicaDeletionStarted
    NonExistentReplica         <- ReplicaDeletionSuccessful

An invalid transition is logged (state-change log, ERROR) and the replica skipped.

What each transition asks of the brokers (added to the event's `RequestBatch`):

* NewReplica: a LeaderAndIsr (is_new) to the replica if the partition has a leader state
  (a replica that is the partition's leader cannot become new).
* OnlineReplica: a LeaderAndIsr with the current state to the replica (not for a topic queued
  for deletion: it is being stopped), except from NewReplica.
* OfflineReplica: optionally a StopReplica (no delete) to the replica; the replica leaves the
  partition's ISR and, if it led, the leadership (`remove_replicas_from_isr`, written by the
  controller in between: `offline_isr_changes` decides, `complete_offline` sends the new state
  to the remaining replicas). Partitions of topics queued for deletion are not rewritten.
* ReplicaDeletionStarted: a StopReplica with delete to the replica.
* the other deletion states and NonExistentReplica only record the state.

Every UpdateMetadata goes to all live brokers (see `request_states`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from wherry.common.state_enum import StateEnum
from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.request_batch import RequestBatch
from wherry.controller.request_states import (
    add_leader_and_isr,
    add_stop_replica,
    add_update_metadata,
)
from wherry.controller.state_machine import ControllerStates
from wherry.protocol.interbroker import NO_LEADER
from wherry.runtime.state_change_log import (
    batched_lines,
    controller_prefix,
    log_controller_replica_change,
    state_change_logger,
)


class ReplicaState(StateEnum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


_R = ReplicaState

VALID_PREVIOUS_STATES: Final[Mapping[ReplicaState, frozenset[ReplicaState]]] = MappingProxyType(
    {
        _R.NEW: frozenset({_R.NON_EXISTENT}),
        _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
        _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
        _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
        _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
        _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
        _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
    }
)


def is_valid_transition(current: ReplicaState, target: ReplicaState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


@dataclass(frozen=True, order=True, slots=True)
class PartitionReplica:
    tp: TopicPartition
    replica: int

    def __str__(self) -> str:
        return f"{self.tp} replica {self.replica}"


def replicas_of(ctx: ControllerContext, tps: Iterable[TopicPartition]) -> list[PartitionReplica]:
    return [PartitionReplica(tp, r) for tp in tps for r in ctx.replicas(tp)]


def replicas_on(ctx: ControllerContext, brokers: Collection[int]) -> list[PartitionReplica]:
    return [
        PartitionReplica(tp, r)
        for tp in ctx.all_partitions()
        for r in ctx.replicas(tp)
        if r in brokers
    ]


def dead_isr_members(ctx: ControllerContext) -> list[PartitionReplica]:
    """At failover: ISR members on brokers that died while no controller watched, of
    partitions that have a live leader (they leave the ISR as if their failure had been seen;
    Kafka leaves this to the leaders' ISR shrink). Partitions without a live leader keep their
    ISR, so any of its members may come back as a clean leader."""
    return [
        r
        for r in replicas_of(ctx, ctx.all_partitions())
        if not ctx.is_live(r.replica)
        and not ctx.is_queued_for_deletion(r.tp.topic)
        and (st := ctx.states.get(r.tp)) is not None
        and ctx.is_live(st.leader)
        and r.replica in st.isr
    ]


def remove_replicas_from_isr(
    current: LeaderIsr, removed: Collection[int], controller_epoch: int
) -> LeaderIsr | None:
    """Kafka's removeReplicasFromIsr: the removed replicas leave the ISR, a removed leader
    leaves the leadership (leader -1) and the leader epoch goes up. The ISR never becomes
    empty: when every member is removed one stays -- the leader if it was in the ISR, else the
    first member -- so that it can be elected cleanly when it comes back. None when nothing
    changes."""
    leader = NO_LEADER if current.leader in removed else current.leader
    isr = tuple(r for r in current.isr if r not in removed)
    if not isr and current.isr:
        isr = (current.leader,) if current.leader in current.isr else current.isr[:1]
    if leader == current.leader and isr == current.isr:
        return None
    return LeaderIsr(leader, current.leader_epoch + 1, isr, controller_epoch, current.zk_version)


class ReplicaStateMachine(ControllerStates[PartitionReplica, ReplicaState]):
    def __init__(self, controller_id: int) -> None:
        super().__init__(
            controller_id,
            absent=ReplicaState.NON_EXISTENT,
            valid_previous=VALID_PREVIOUS_STATES,
            describe=lambda r: f"replica {r.replica} of partition {r.tp}",
        )

    # --- queries -----------------------------------------------------------------------------
    def replicas_in(self, topic: str, *states: ReplicaState) -> list[PartitionReplica]:
        return sorted(r for r, s in self._states.items() if r.tp.topic == topic and s in states)

    def replicas_of_topic(self, topic: str) -> list[PartitionReplica]:
        return sorted(r for r in self._states if r.tp.topic == topic)

    # --- startup -----------------------------------------------------------------------------
    def initialize(self, ctx: ControllerContext) -> None:
        """Kafka's initializeReplicaState: replicas on live brokers are online, the others
        ineligible for deletion."""
        self._states.clear()
        for r in replicas_of(ctx, ctx.all_partitions()):
            self._states[r] = (
                ReplicaState.ONLINE if ctx.is_live(r.replica) else ReplicaState.DELETION_INELIGIBLE
            )

    # --- transitions -------------------------------------------------------------------------
    def _set(self, ctx: ControllerContext, r: PartitionReplica, target: ReplicaState) -> None:
        old = self.state(r)
        if old is target:
            # Not a change (a replica announced again, e.g. every online replica at controller
            # failover: 20,000 lines for 10,000 partitions RF 3); Kafka logs these at TRACE.
            self._record(r, target)
            return
        st = ctx.states.get(r.tp)
        log_controller_replica_change(
            self.controller_id,
            ctx.epoch,
            r.tp.topic,
            r.tp.partition,
            r.replica,
            str(old),
            str(target),
            leader=None if st is None else st.leader,
            leader_epoch=None if st is None else st.leader_epoch,
            isr=None if st is None else st.isr,
        )
        self._record(r, target)

    def to_new(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica], batch: RequestBatch
    ) -> list[PartitionReplica]:
        done: list[PartitionReplica] = []
        for r in self.valid(ctx, replicas, ReplicaState.NEW):
            st = ctx.states.get(r.tp)
            if st is not None:
                if st.leader == r.replica:
                    state_change_logger.error(
                        "%s Replica %d of partition %s cannot move to %s: it is the leader",
                        controller_prefix(self.controller_id, ctx.epoch),
                        r.replica,
                        r.tp,
                        ReplicaState.NEW,
                    )
                    continue
                add_leader_and_isr(batch, ctx, [r.replica], r.tp, is_new=True)
            self._set(ctx, r, ReplicaState.NEW)
            done.append(r)
        return done

    def to_online(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica], batch: RequestBatch
    ) -> list[PartitionReplica]:
        done = self.valid(ctx, replicas, ReplicaState.ONLINE)
        told: dict[TopicPartition, list[int]] = {}  # partition -> replicas to get its state
        with batched_lines():
            for r in done:
                if (
                    self.state(r) is not ReplicaState.NEW
                    and r.tp in ctx.states
                    and not ctx.is_queued_for_deletion(r.tp.topic)
                ):
                    told.setdefault(r.tp, []).append(r.replica)
                self._set(ctx, r, ReplicaState.ONLINE)
        for tp, brokers in told.items():  # one state (and metadata) per partition, not replica
            add_leader_and_isr(batch, ctx, brokers, tp)
        return done

    def offline_isr_changes(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica]
    ) -> dict[TopicPartition, frozenset[int]]:
        """First half of OfflineReplica: per partition (with a stored state, of a topic not
        queued for deletion), the replicas that must leave its ISR/leadership."""
        out: dict[TopicPartition, set[int]] = {}
        for r in replicas:
            if not is_valid_transition(self.state(r), ReplicaState.OFFLINE):
                continue  # `complete_offline` logs it
            if r.tp in ctx.states and not ctx.is_queued_for_deletion(r.tp.topic):
                out.setdefault(r.tp, set()).add(r.replica)
        return {tp: frozenset(rs) for tp, rs in out.items()}

    def complete_offline(
        self,
        ctx: ControllerContext,
        replicas: Iterable[PartitionReplica],
        updated: Mapping[TopicPartition, LeaderIsr],
        batch: RequestBatch,
        *,
        stop_replica: bool,
    ) -> list[PartitionReplica]:
        """Second half of OfflineReplica, after the controller wrote `updated` (already in
        `ctx.states`): the remaining replicas of each updated partition get its new state,
        every live broker the metadata; with `stop_replica` each replica gets a StopReplica
        (no delete)."""
        done = self.valid(ctx, replicas, ReplicaState.OFFLINE)
        removed: dict[TopicPartition, set[int]] = {}
        for r in done:
            removed.setdefault(r.tp, set()).add(r.replica)
            if stop_replica:
                add_stop_replica(batch, ctx, r.replica, r.tp, delete=False)
        for tp, gone in sorted(removed.items()):
            if tp in updated:
                rest = [b for b in ctx.replicas(tp) if b not in gone]
                add_leader_and_isr(batch, ctx, rest, tp)
            else:
                add_update_metadata(batch, ctx, ctx.live_brokers, [tp])
        with batched_lines():
            for r in done:
                self._set(ctx, r, ReplicaState.OFFLINE)
        return done

    def to_deletion_started(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica], batch: RequestBatch
    ) -> list[PartitionReplica]:
        done = self.valid(ctx, replicas, ReplicaState.DELETION_STARTED)
        for r in done:
            add_stop_replica(batch, ctx, r.replica, r.tp, delete=True)
            self._set(ctx, r, ReplicaState.DELETION_STARTED)
        return done

    def _state_only(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica], target: ReplicaState
    ) -> list[PartitionReplica]:
        done = self.valid(ctx, replicas, target)
        with batched_lines():
            for r in done:
                self._set(ctx, r, target)
        return done

    def to_deletion_successful(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica]
    ) -> list[PartitionReplica]:
        return self._state_only(ctx, replicas, ReplicaState.DELETION_SUCCESSFUL)

    def to_deletion_ineligible(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica]
    ) -> list[PartitionReplica]:
        return self._state_only(ctx, replicas, ReplicaState.DELETION_INELIGIBLE)

    def to_non_existent(
        self, ctx: ControllerContext, replicas: Iterable[PartitionReplica]
    ) -> list[PartitionReplica]:
        return self._state_only(ctx, replicas, ReplicaState.NON_EXISTENT)
