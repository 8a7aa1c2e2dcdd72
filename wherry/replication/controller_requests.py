"""How a broker judges the controller's requests, sans I/O.

The rules are Kafka 3.9's in ZooKeeper mode (KafkaApis, then ReplicaManager):

Whole request, in this order:

* Broker epoch. A request whose broker epoch is known (not -1) and older than this broker's
  current one (the czxid of its `/brokers/ids/<id>` registration) was meant for an earlier
  incarnation of this broker: STALE_BROKER_EPOCH, and nothing is recorded. A newer one is
  accepted (the controller may learn the new registration first).
* Controller epoch. Older than the newest controller epoch this broker has seen, from any of
  LeaderAndIsr, StopReplica and UpdateMetadata: STALE_CONTROLLER_EPOCH, nothing changes.
  Otherwise it becomes the newest seen (one value per broker, as Kafka's
  `ReplicaManager.controllerEpoch`).

Per partition:

* LeaderAndIsr: a topic id that differs from the one the partition has → INCONSISTENT_TOPIC_ID;
  a leader epoch newer than the partition's (a partition this broker does not host counts as
  epoch -1) → applied, unless this broker is not among the replicas → UNKNOWN_TOPIC_OR_PARTITION;
  an older one → STALE_CONTROLLER_EPOCH; the same one → STALE_CONTROLLER_EPOCH, except when the
  request brings a topic id the partition lacks (NONE; the id is adopted) or lacks one the
  partition has while this broker follows (NONE, nothing to do).
* StopReplica: a partition not hosted here → NONE (its log, if any, is deleted when asked); a
  leader epoch older than the partition's → FENCED_LEADER_EPOCH; -1 (no epoch: v0–v2) and -2
  (deletion) skip the check.

A FULL LeaderAndIsr (KIP-516's Type; a controller sends one to every broker when it takes
office and to a broker when it starts) names every partition the broker is a replica of. A
partition the broker holds (hosted, or a log on disk) that it does not name, names with other
replicas, or names with another topic id (the topic was deleted and made again) is a stray: its
StopReplica was lost (sent by a controller that died before the broker answered). The broker
stops it and deletes its log, as that StopReplica would have, before applying the rest.

A request rejected as a whole gets Kafka's error responses: LeaderAndIsr repeats the error for
every partition; StopReplica and UpdateMetadata answer with the top-level error only.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from wherry.protocol.interbroker import (
        LeaderAndIsrPartitionState,
        LeaderAndIsrRequest,
        LeaderAndIsrResponse,
        StopReplicaPartition,
        StopReplicaResponse,
    )

UNKNOWN_BROKER_EPOCH: Final = -1  # AbstractControlRequest.UNKNOWN_BROKER_EPOCH
NO_EPOCH: Final = -1  # StopReplica v0-v2 carry no leader epoch
EPOCH_DURING_DELETE: Final = -2  # LeaderAndIsr.EpochDuringDelete
INITIAL_PARTITION_LEADER_EPOCH: Final = -1  # a partition this broker does not host yet
_ZERO_UUID: Final = uuid.UUID(int=0)


@dataclass(slots=True)
class ControllerFence:
    """The two epochs a broker checks every controller request against."""

    broker_epoch: int = UNKNOWN_BROKER_EPOCH  # the czxid of this broker's registration
    controller_epoch: int = -1  # the newest controller epoch seen

    def admit(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """Check a request's epochs; when it is admitted, record its controller epoch."""
        if broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < self.broker_epoch:
            return ErrorCode.stale_broker_epoch
        if controller_epoch < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        self.controller_epoch = controller_epoch
        return ErrorCode.none


class PartitionAction(enum.Enum):
    APPLY = "apply"  # become leader or follower
    ADOPT_TOPIC_ID = "adopt-topic-id"  # same leader epoch; record the request's topic id
    IGNORE = "ignore"  # nothing changes; answer with the verdict's error


@dataclass(frozen=True, slots=True)
class PartitionVerdict:
    action: PartitionAction
    error: ErrorCode


APPLY: Final = PartitionVerdict(PartitionAction.APPLY, ErrorCode.none)


def request_topic_id(req: LeaderAndIsrRequest, topic: str) -> uuid.UUID | None:
    """The topic id a LeaderAndIsr request gives a topic; None when absent or zero."""
    tid = req.topic_ids.get(topic)
    return None if tid is None or tid == _ZERO_UUID else tid


def leader_and_isr_verdict(
    local_broker_id: int,
    state: LeaderAndIsrPartitionState,
    current_leader_epoch: int | None,
    request_topic_id: uuid.UUID | None,
    local_topic_id: uuid.UUID | None,
) -> PartitionVerdict:
    """What to do with one partition of an admitted LeaderAndIsr request.

    `current_leader_epoch` and `local_topic_id` describe the partition as this broker hosts it;
    None for a partition it does not host.
    """
    current = (
        INITIAL_PARTITION_LEADER_EPOCH if current_leader_epoch is None else current_leader_epoch
    )
    if request_topic_id is not None and local_topic_id not in (None, request_topic_id):
        return PartitionVerdict(PartitionAction.IGNORE, ErrorCode.inconsistent_topic_id)
    if state.leader_epoch > current:
        if local_broker_id in state.replicas:
            return APPLY
        return PartitionVerdict(PartitionAction.IGNORE, ErrorCode.unknown_topic_or_partition)
    if state.leader_epoch < current:
        return PartitionVerdict(PartitionAction.IGNORE, ErrorCode.stale_controller_epoch)
    if current_leader_epoch is not None:
        if request_topic_id is not None and local_topic_id is None:
            return PartitionVerdict(PartitionAction.ADOPT_TOPIC_ID, ErrorCode.none)
        if (
            request_topic_id is None
            and local_topic_id is not None
            and state.leader != local_broker_id
        ):
            return PartitionVerdict(PartitionAction.IGNORE, ErrorCode.none)
    return PartitionVerdict(PartitionAction.IGNORE, ErrorCode.stale_controller_epoch)


def stray_partitions(
    local_broker_id: int,
    req: LeaderAndIsrRequest,
    held: Mapping[TopicPartition, uuid.UUID | None],
) -> list[TopicPartition]:
    """The partitions of `held` (this broker's partitions, hosted or on disk, with the topic id
    each has, None when unknown) that the FULL LeaderAndIsr `req` makes strays."""
    named = {TopicPartition(s.topic_name, s.partition_index): s for s in req.partition_states}
    out: list[TopicPartition] = []
    for tp, local_id in held.items():
        st = named.get(tp)
        if st is None or local_broker_id not in st.replicas:
            out.append(tp)
            continue
        wanted = request_topic_id(req, tp.topic)
        if wanted is not None and local_id is not None and local_id != wanted:
            out.append(tp)
    return sorted(out)


def stop_replica_error(
    partition: StopReplicaPartition, current_leader_epoch: int | None
) -> ErrorCode:
    """NONE when the partition may be stopped; `current_leader_epoch` is None when not hosted."""
    if current_leader_epoch is None:
        return ErrorCode.none
    epoch = partition.leader_epoch
    if epoch in (EPOCH_DURING_DELETE, NO_EPOCH) or epoch >= current_leader_epoch:
        return ErrorCode.none
    return ErrorCode.fenced_leader_epoch


def leader_and_isr_error_response(
    req: LeaderAndIsrRequest, error: ErrorCode
) -> LeaderAndIsrResponse:
    """A whole-request error: the error at the top and for every partition (Kafka's
    `LeaderAndIsrRequest.getErrorResponse`)."""
    from wherry.protocol.interbroker import LeaderAndIsrResponse, partition_errors

    return LeaderAndIsrResponse(int(error), partition_errors(req.partition_states, int(error)))


def stop_replica_error_response(
    error: ErrorCode, partitions: Iterable[StopReplicaPartition] = ()
) -> StopReplicaResponse:
    """A whole-request error at the top, and for every one of `partitions` (Kafka's
    `StopReplicaRequest.getErrorResponse` gives it to all the request's partitions)."""
    from wherry.protocol.interbroker import StopReplicaResponse, partition_errors

    return StopReplicaResponse(int(error), partition_errors(partitions, int(error)))
