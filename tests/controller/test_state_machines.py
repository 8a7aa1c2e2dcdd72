"""The partition and replica state machines: their transition tables (every pair of states)
and what each transition decides and asks of the brokers, without any I/O."""

from __future__ import annotations

import itertools
import logging
import uuid

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.election import ElectionStrategy
from wherry.controller.partition_state import (
    PartitionState,
    PartitionStateMachine,
)
from wherry.controller.partition_state import (
    is_valid_transition as partition_valid,
)
from wherry.controller.replica_state import (
    PartitionReplica,
    ReplicaState,
    ReplicaStateMachine,
    remove_replicas_from_isr,
)
from wherry.controller.replica_state import (
    is_valid_transition as replica_valid,
)
from wherry.controller.request_batch import RequestBatch
from wherry.controller.topic_deletion import TopicDeletionManager
from wherry.coordination.paths import BrokerRegistration
from wherry.protocol.interbroker import (
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

PS = PartitionState
RS = ReplicaState

# Kafka's tables, written out pair by pair: (from, to).
PARTITION_VALID = {
    (PS.OFFLINE, PS.NON_EXISTENT),
    (PS.NON_EXISTENT, PS.NEW),
    (PS.NEW, PS.ONLINE),
    (PS.ONLINE, PS.ONLINE),
    (PS.OFFLINE, PS.ONLINE),
    (PS.NEW, PS.OFFLINE),
    (PS.ONLINE, PS.OFFLINE),
    (PS.OFFLINE, PS.OFFLINE),
}
REPLICA_VALID = {
    (RS.NON_EXISTENT, RS.NEW),
    *((s, RS.ONLINE) for s in (RS.NEW, RS.ONLINE, RS.OFFLINE, RS.DELETION_INELIGIBLE)),
    *((s, RS.OFFLINE) for s in (RS.NEW, RS.ONLINE, RS.OFFLINE, RS.DELETION_INELIGIBLE)),
    (RS.OFFLINE, RS.DELETION_STARTED),
    (RS.DELETION_STARTED, RS.DELETION_SUCCESSFUL),
    (RS.OFFLINE, RS.DELETION_INELIGIBLE),
    (RS.DELETION_STARTED, RS.DELETION_INELIGIBLE),
    (RS.DELETION_SUCCESSFUL, RS.NON_EXISTENT),
}


@pytest.mark.parametrize("old,new", list(itertools.product(PS, PS)))
def test_partition_transition_table(old: PartitionState, new: PartitionState) -> None:
    assert partition_valid(old, new) == ((old, new) in PARTITION_VALID)


@pytest.mark.parametrize("old,new", list(itertools.product(RS, RS)))
def test_replica_transition_table(old: ReplicaState, new: ReplicaState) -> None:
    assert replica_valid(old, new) == ((old, new) in REPLICA_VALID)


def test_state_names_are_kafkas() -> None:
    assert [str(s) for s in PS] == [
        "NonExistentPartition", "NewPartition", "OnlinePartition", "OfflinePartition"]
    assert str(RS.DELETION_INELIGIBLE) == "ReplicaDeletionIneligible"


# --- a small context -------------------------------------------------------------------------
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
TID = uuid.uuid4()


def context(live: tuple[int, ...] = (1, 2, 3)) -> ControllerContext:
    ctx = ControllerContext(epoch=7, epoch_zk_version=3)
    ctx.live_brokers = {b: BrokerRegistration(b, "h", 9000 + b, epoch=100 + b) for b in live}
    ctx.assignments = {"t": {0: (1, 2, 3), 1: (2, 3, 1)}}
    ctx.topic_ids = {"t": TID}
    return ctx


def build(batch: RequestBatch, ctx: ControllerContext) -> dict[tuple[int, str], object]:
    out = batch.build({b: r.epoch for b, r in ctx.live_brokers.items()}, ())
    return {(r.broker_id, type(r.body).__name__): r.body for r in out}


def test_invalid_partition_transitions_are_logged_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = context()
    psm = PartitionStateMachine(1)
    with caplog.at_level(logging.ERROR, logger="wherry.state_change"):
        assert psm.to_offline(ctx, [T0]) == []  # NonExistent -> Offline
        assert psm.to_non_existent(ctx, [T0]) == []
        assert psm.to_new(ctx, [T0]) == [T0]
        assert psm.to_new(ctx, [T0]) == []  # New -> New
    assert psm.state(T0) is PS.NEW
    invalid = [r.getMessage() for r in caplog.records if "Invalid transition" in r.getMessage()]
    assert len(invalid) == 3 and all("t-0" in m for m in invalid)
    assert "from NonExistentPartition to OfflinePartition" in invalid[0]


def test_partition_initialize_from_context() -> None:
    ctx = context(live=(2, 3))
    ctx.states[T0] = LeaderIsr(1, 4, (1, 2), 6, 9)  # leader dead
    psm = PartitionStateMachine(1)
    psm.initialize(ctx)
    assert psm.state(T0) is PS.OFFLINE and psm.state(T1) is PS.NEW
    ctx.states[T1] = LeaderIsr(2, 0, (2, 3), 6, 0)
    psm.initialize(ctx)
    assert psm.state(T1) is PS.ONLINE


def test_new_partition_first_state_and_requests() -> None:
    ctx = context(live=(2, 3))
    psm = PartitionStateMachine(1)
    psm.to_new(ctx, [T0])
    st = psm.initial_leader_isr(ctx, T0)
    assert st == LeaderIsr(2, 0, (2, 3), 7, -1)  # first live replica; live replicas
    ctx.states[T0] = LeaderIsr(2, 0, (2, 3), 7, 0)
    batch = RequestBatch(1, 7)
    psm.complete_online(ctx, T0, batch, is_new=True)
    assert psm.state(T0) is PS.ONLINE
    reqs = build(batch, ctx)
    assert sorted(reqs) == [(2, "LeaderAndIsrRequest"), (2, "UpdateMetadataRequest"),
                            (3, "LeaderAndIsrRequest"), (3, "UpdateMetadataRequest")]
    lai = reqs[(2, "LeaderAndIsrRequest")]
    assert isinstance(lai, LeaderAndIsrRequest)
    (s,) = lai.partition_states
    assert (s.leader, s.isr, s.replicas, s.is_new, s.partition_epoch) == (
        2, (2, 3), (1, 2, 3), True, 0)
    assert lai.broker_epoch == 102 and lai.topic_ids == {"t": TID}
    um = reqs[(3, "UpdateMetadataRequest")]
    assert isinstance(um, UpdateMetadataRequest)
    assert um.partition_states[0].offline_replicas == (1,)


def test_new_partition_without_a_live_replica_stays_new() -> None:
    ctx = context(live=(5,))
    psm = PartitionStateMachine(1)
    psm.to_new(ctx, [T0])
    assert psm.initial_leader_isr(ctx, T0) is None
    assert psm.state(T0) is PS.NEW


def test_offline_election_decides_next_epoch() -> None:
    ctx = context(live=(2, 3))
    cur = LeaderIsr(1, 4, (1, 3), 6, 9)
    psm = PartitionStateMachine(1)
    o = psm.elect(ctx, T0, cur, unclean_allowed=False)
    assert o.leader_isr == LeaderIsr(3, 5, (3,), 7, 9) and not o.unclean
    ctx.live_brokers.pop(3)
    o = psm.elect(ctx, T0, cur, unclean_allowed=False)
    assert o.leader_isr is None and o.error is not None and "unclean" in o.error
    o = psm.elect(ctx, T0, cur, unclean_allowed=True)
    assert o.leader_isr == LeaderIsr(2, 5, (2,), 7, 9) and o.unclean
    # the unclean strategy (ElectLeaders UNCLEAN) allows it whatever the topic says
    o = psm.elect(ctx, T0, cur, unclean_allowed=False, strategy=ElectionStrategy.UNCLEAN)
    assert o.leader_isr == LeaderIsr(2, 5, (2,), 7, 9) and o.unclean
    ctx.live_brokers.clear()
    o = psm.elect(ctx, T0, cur, unclean_allowed=True)
    assert o.leader_isr is None and o.error is not None and "no assigned replica" in o.error


def test_replica_online_sends_current_state_except_from_new() -> None:
    ctx = context()
    ctx.states[T0] = LeaderIsr(1, 3, (1, 2, 3), 7, 5)
    rsm = ReplicaStateMachine(1)
    batch = RequestBatch(1, 7)
    r1, r2 = PartitionReplica(T0, 1), PartitionReplica(T0, 2)
    assert rsm.to_new(ctx, [r1], batch) == []  # the leader cannot be new
    assert rsm.to_new(ctx, [r2], batch) == [r2]
    assert rsm.to_online(ctx, [r2], batch) == [r2]
    reqs = build(batch, ctx)
    lai = reqs[(2, "LeaderAndIsrRequest")]
    assert isinstance(lai, LeaderAndIsrRequest) and lai.partition_states[0].is_new
    # Offline -> Online sends the state again.
    rsm._states[r1] = RS.OFFLINE
    batch = RequestBatch(1, 7)
    rsm.to_online(ctx, [r1], batch)
    assert (1, "LeaderAndIsrRequest") in build(batch, ctx)
    assert rsm.state(r1) is RS.ONLINE


def test_replica_offline_shrinks_isr_and_tells_the_rest() -> None:
    ctx = context(live=(2, 3))
    ctx.states[T0] = LeaderIsr(2, 3, (2, 1, 3), 7, 5)
    rsm = ReplicaStateMachine(1)
    rsm.initialize(ctx)
    dead = PartitionReplica(T0, 1)
    assert rsm.state(dead) is RS.DELETION_INELIGIBLE
    removals = rsm.offline_isr_changes(ctx, [dead])
    assert removals == {T0: frozenset({1})}
    new = remove_replicas_from_isr(ctx.states[T0], removals[T0], ctx.epoch)
    assert new == LeaderIsr(2, 4, (2, 3), 7, 5)
    ctx.states[T0] = LeaderIsr(2, 4, (2, 3), 7, 6)
    batch = RequestBatch(1, 7)
    rsm.complete_offline(ctx, [dead], {T0: ctx.states[T0]}, batch, stop_replica=True)
    assert rsm.state(dead) is RS.OFFLINE
    reqs = build(batch, ctx)
    assert sorted(k for k in reqs if k[1] == "LeaderAndIsrRequest") == [
        (2, "LeaderAndIsrRequest"), (3, "LeaderAndIsrRequest")]
    assert (1, "StopReplicaRequest") not in reqs  # dead brokers get nothing


def test_remove_replicas_from_isr_keeps_the_last_member() -> None:
    st = LeaderIsr(3, 8, (3,), 7, 2)
    assert remove_replicas_from_isr(st, {3}, 9) == LeaderIsr(-1, 9, (3,), 9, 2)
    assert remove_replicas_from_isr(LeaderIsr(-1, 9, (3,), 9, 3), {3}, 9) is None
    st = LeaderIsr(1, 0, (2, 1, 3), 7, 0)
    assert remove_replicas_from_isr(st, {1, 2, 3}, 7) == LeaderIsr(-1, 1, (1,), 7, 0)
    assert remove_replicas_from_isr(LeaderIsr(4, 0, (2, 3), 7, 0), {2, 3}, 7) == LeaderIsr(
        4, 1, (2,), 7, 0)
    assert remove_replicas_from_isr(st, {5}, 7) is None


def test_deletion_start_and_completion() -> None:
    ctx = context()
    ctx.states[T0] = LeaderIsr(1, 3, (1, 2, 3), 7, 5)
    ctx.states[T1] = LeaderIsr(2, 1, (2, 3, 1), 7, 1)
    psm, rsm, dm = PartitionStateMachine(1), ReplicaStateMachine(1), TopicDeletionManager(1)
    psm.initialize(ctx)
    rsm.initialize(ctx)
    dm.enqueue(ctx, ["t", "unknown"])
    assert ctx.topics_to_delete == {"t"}
    batch = RequestBatch(1, 7)
    assert dm.plan(ctx, psm, rsm, batch) == []
    reqs = build(batch, ctx)
    for b in (1, 2, 3):
        stop = reqs[(b, "StopReplicaRequest")]
        assert isinstance(stop, StopReplicaRequest)
        # Offline (no delete) and DeletionStarted (delete) merged into one request.
        assert set(stop.partitions) == {StopReplicaPartition("t", 0, -2, True),
                                        StopReplicaPartition("t", 1, -2, True)}
        um = reqs[(b, "UpdateMetadataRequest")]
        assert isinstance(um, UpdateMetadataRequest)
        assert {s.leader for s in um.partition_states} == {-2}
    assert not any(k[1] == "LeaderAndIsrRequest" for k in reqs)
    # Answers: broker 3 fails one partition, the others succeed.
    dm.stop_replica_answered(ctx, rsm, 1, {T0: 0, T1: 0})
    dm.stop_replica_answered(ctx, rsm, 2, {T0: 0, T1: 0})
    dm.stop_replica_answered(ctx, rsm, 3, {T0: 0, T1: 56})
    assert rsm.state(PartitionReplica(T1, 3)) is RS.DELETION_INELIGIBLE
    assert "t" in ctx.topics_ineligible_for_deletion
    assert dm.plan(ctx, psm, rsm, RequestBatch(1, 7)) == []  # waits
    # Broker 3 restarted: its replica comes online and the deletion is retried.
    rsm.to_online(ctx, [PartitionReplica(T1, 3)], RequestBatch(1, 7))
    dm.resume_for(ctx, ["t"])
    batch = RequestBatch(1, 7)
    assert dm.plan(ctx, psm, rsm, batch) == []
    reqs = build(batch, ctx)
    assert [k for k in reqs if k[1] == "StopReplicaRequest"] == [(3, "StopReplicaRequest")]
    dm.stop_replica_answered(ctx, rsm, 3, {T1: 0})
    assert dm.plan(ctx, psm, rsm, RequestBatch(1, 7)) == ["t"]
    dm.complete(ctx, psm, rsm, "t")
    assert "t" not in ctx.assignments and not ctx.topics_to_delete
    assert psm.state(T0) is PS.NON_EXISTENT
    assert rsm.replicas_of_topic("t") == []


def test_deletion_with_a_dead_replica_waits() -> None:
    ctx = context(live=(1, 2))
    ctx.states[T0] = LeaderIsr(1, 3, (1, 2), 7, 5)
    ctx.states[T1] = LeaderIsr(2, 1, (2, 1), 7, 1)
    psm, rsm, dm = PartitionStateMachine(1), ReplicaStateMachine(1), TopicDeletionManager(1)
    psm.initialize(ctx)
    rsm.initialize(ctx)
    dm.init(ctx, ["t"])
    assert ctx.topics_ineligible_for_deletion == {"t"}
    batch = RequestBatch(1, 7)
    assert dm.plan(ctx, psm, rsm, batch) == []
    assert batch.is_empty()
