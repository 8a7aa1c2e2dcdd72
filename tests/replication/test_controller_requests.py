"""The broker's rules for controller requests (`replication/controller_requests.py`)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.interbroker import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartition,
)
from wherry.replication.controller_requests import (
    ControllerFence,
    PartitionAction,
    PartitionVerdict,
    leader_and_isr_error_response,
    leader_and_isr_verdict,
    request_topic_id,
    stop_replica_error,
    stray_partitions,
)

A, B = uuid.uuid4(), uuid.uuid4()


def state(leader: int = 1, leader_epoch: int = 5, replicas: tuple[int, ...] = (1, 2)
          ) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState("t", 0, 3, leader, leader_epoch, replicas, 0, replicas)


def test_fence_checks_broker_epoch_first_and_records_only_admitted_epochs() -> None:
    f = ControllerFence(broker_epoch=100, controller_epoch=-1)
    assert f.admit(5, 100) == ErrorCode.none and f.controller_epoch == 5
    # stale broker epoch wins over a stale controller epoch, and records nothing
    assert f.admit(4, 99) == ErrorCode.stale_broker_epoch
    assert f.admit(9, 99) == ErrorCode.stale_broker_epoch and f.controller_epoch == 5
    assert f.admit(4, 100) == ErrorCode.stale_controller_epoch and f.controller_epoch == 5
    # unknown (-1) and newer broker epochs pass; the same controller epoch again is fine
    assert f.admit(5, -1) == ErrorCode.none
    assert f.admit(6, 101) == ErrorCode.none and f.controller_epoch == 6


@pytest.mark.parametrize(
    ("st", "current", "req_id", "local_id", "expected"),
    [
        # a partition not hosted here counts as leader epoch -1
        (state(leader_epoch=0), None, A, None, (PartitionAction.APPLY, ErrorCode.none)),
        (state(leader_epoch=-1), None, A, None,
         (PartitionAction.IGNORE, ErrorCode.stale_controller_epoch)),
        (state(replicas=(2, 3)), None, A, None,
         (PartitionAction.IGNORE, ErrorCode.unknown_topic_or_partition)),
        # newer leader epoch: applied (as leader or follower alike)
        (state(leader=2, leader_epoch=6), 5, A, A, (PartitionAction.APPLY, ErrorCode.none)),
        (state(leader_epoch=6, replicas=(2, 3)), 5, A, A,
         (PartitionAction.IGNORE, ErrorCode.unknown_topic_or_partition)),
        # older: stale, even when this broker is not among the replicas (Kafka's order)
        (state(leader_epoch=4, replicas=(2, 3)), 5, A, A,
         (PartitionAction.IGNORE, ErrorCode.stale_controller_epoch)),
        # the same: stale, except for topic-id upgrades and downgrades
        (state(leader_epoch=5), 5, A, A,
         (PartitionAction.IGNORE, ErrorCode.stale_controller_epoch)),
        (state(leader_epoch=5), 5, A, None, (PartitionAction.ADOPT_TOPIC_ID, ErrorCode.none)),
        (state(leader=2, leader_epoch=5), 5, None, A, (PartitionAction.IGNORE, ErrorCode.none)),
        (state(leader=1, leader_epoch=5), 5, None, A,
         (PartitionAction.IGNORE, ErrorCode.stale_controller_epoch)),
        # a different topic id beats everything
        (state(leader_epoch=9), 5, B, A,
         (PartitionAction.IGNORE, ErrorCode.inconsistent_topic_id)),
        (state(leader_epoch=9), 5, None, A, (PartitionAction.APPLY, ErrorCode.none)),
    ],
)
def test_leader_and_isr_verdicts(
    st: LeaderAndIsrPartitionState,
    current: int | None,
    req_id: uuid.UUID | None,
    local_id: uuid.UUID | None,
    expected: tuple[PartitionAction, ErrorCode],
) -> None:
    assert leader_and_isr_verdict(1, st, current, req_id, local_id) == PartitionVerdict(*expected)


def test_request_topic_id_ignores_zero_uuid() -> None:
    req = LeaderAndIsrRequest(0, 1, -1, (), {"t": uuid.UUID(int=0), "u": A}, ())
    assert request_topic_id(req, "t") is None
    assert request_topic_id(req, "u") == A
    assert request_topic_id(req, "v") is None


@pytest.mark.parametrize(
    ("epoch", "current", "expected"),
    [
        (3, None, ErrorCode.none),  # not hosted: nothing to fence
        (5, 5, ErrorCode.none),
        (6, 5, ErrorCode.none),
        (4, 5, ErrorCode.fenced_leader_epoch),
        (-1, 5, ErrorCode.none),  # v0-v2: no epoch
        (-2, 5, ErrorCode.none),  # deletion sentinel
    ],
)
def test_stop_replica_errors(epoch: int, current: int | None, expected: ErrorCode) -> None:
    assert stop_replica_error(StopReplicaPartition("t", 0, epoch, True), current) == expected


def test_whole_request_error_repeats_for_every_partition() -> None:
    req = LeaderAndIsrRequest(0, 1, -1, (state(), state(leader_epoch=1)), {}, ())
    resp = leader_and_isr_error_response(req, ErrorCode.stale_broker_epoch)
    assert resp.error_code == ErrorCode.stale_broker_epoch
    assert [e.error_code for e in resp.partition_errors] == [ErrorCode.stale_broker_epoch] * 2


def test_stray_partitions_of_a_full_leader_and_isr() -> None:
    def named(topic: str, p: int, replicas: tuple[int, ...]) -> LeaderAndIsrPartitionState:
        return LeaderAndIsrPartitionState(topic, p, 3, replicas[0], 5, replicas, 0, replicas)

    req = LeaderAndIsrRequest(
        0, 3, 10,
        (named("t", 0, (1, 2)), named("t", 1, (2, 3)), named("u", 0, (1,))),
        {"t": A, "u": B},
        (),
        is_full=True,
    )
    held = {
        TopicPartition("t", 0): A,  # named, a replica, same id: kept
        TopicPartition("t", 1): A,  # named, but with other replicas: moved away
        TopicPartition("t", 2): None,  # a log on disk the request does not name
        TopicPartition("u", 0): A,  # named with another topic id: deleted and made again
        TopicPartition("v", 0): None,
    }
    assert stray_partitions(1, req, held) == [
        TopicPartition("t", 1),
        TopicPartition("t", 2),
        TopicPartition("u", 0),
        TopicPartition("v", 0),
    ]
    # A log on disk (topic id unknown) of a named partition is kept.
    assert stray_partitions(1, req, {TopicPartition("u", 0): None}) == []
