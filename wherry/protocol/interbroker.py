"""Controller ↔ broker requests kio lacks (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6,
ControlledShutdown 7).

Field names follow Apache Kafka 3.9's message schemas (LeaderAndIsrRequest.json,
StopReplicaRequest.json, UpdateMetadataRequest.json, ControlledShutdownRequest.json). In a
single process these values are handed over directly; between processes
`wherry.protocol.interbroker_codec` puts keys 4–6 on the wire (every version a Kafka 3.9
ZooKeeper-mode controller sends) and `wherry.protocol.controlled_shutdown_codec` key 7.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from wherry.protocol.security_protocols import LEADER_DURING_DELETE as LEADER_DURING_DELETE
from wherry.protocol.security_protocols import SECURITY_PROTOCOL_IDS as SECURITY_PROTOCOL_IDS

LEADER_AND_ISR_KEY = 4
STOP_REPLICA_KEY = 5
UPDATE_METADATA_KEY = 6
CONTROLLED_SHUTDOWN_KEY = 7

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ControllerRequest:
    """The fields every controller request starts with."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    """What LeaderAndIsr and UpdateMetadata both say of a partition: leader and ISR."""

    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState(PartitionLeadership):
    partition_epoch: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    listener: str = "PLAINTEXT"
    security_protocol: int = 0  # PLAINTEXT
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class LeaderAndIsrRequest(ControllerRequest):
    partition_states: tuple[LeaderAndIsrPartitionState, ...]
    topic_ids: dict[str, uuid.UUID]
    live_leaders: tuple[BrokerEndpoint, ...]
    is_full: bool = False  # wire field Type (v5+): 2 = FULL, otherwise 0 (UNKNOWN) is sent
    is_kraft_controller: bool = False  # v7+ (KIP-866 migration); always False for us


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionError:
    """One partition's error in a LeaderAndIsr or StopReplica response.

    LeaderAndIsr responses v5+ name topics by id only: decoded errors then carry
    `topic_id` and an empty `topic_name`, and encoding v5+ needs `topic_id` (a missing one is
    sent as the zero UUID; `interbroker_codec.with_topic_ids` fills them from the request).
    """

    topic_name: str
    partition_index: int
    error_code: int
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class PartitionErrorsResponse:
    """A LeaderAndIsr or StopReplica response: an error code and per-partition errors."""

    error_code: int
    partition_errors: tuple[LeaderAndIsrPartitionError, ...] = ()


class _Partition(Protocol):
    @property
    def topic_name(self) -> str: ...

    @property
    def partition_index(self) -> int: ...


def partition_errors(
    partitions: Iterable[_Partition], error_code: int
) -> tuple[LeaderAndIsrPartitionError, ...]:
    """The same error for every partition of a LeaderAndIsr or StopReplica request."""
    return tuple(
        LeaderAndIsrPartitionError(p.topic_name, p.partition_index, error_code) for p in partitions
    )


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponse(PartitionErrorsResponse):
    pass


@dataclass(frozen=True, slots=True)
class UpdateMetadataPartitionState(PartitionLeadership):
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateMetadataRequest(ControllerRequest):
    partition_states: tuple[UpdateMetadataPartitionState, ...]
    live_brokers: tuple[BrokerEndpoint, ...]
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    is_full: bool = False  # tagged field Type (v8+): 2 = FULL, omitted otherwise
    is_kraft_controller: bool = False  # v8+ (KIP-866 migration); always False for us


@dataclass(frozen=True, slots=True)
class UpdateMetadataResponse:
    error_code: int


@dataclass(frozen=True, slots=True)
class StopReplicaPartition:
    topic_name: str
    partition_index: int
    leader_epoch: int
    delete_partition: bool


@dataclass(frozen=True, slots=True)
class StopReplicaRequest(ControllerRequest):
    partitions: tuple[StopReplicaPartition, ...]
    is_kraft_controller: bool = False  # v4+ (KIP-866 migration); always False for us


@dataclass(frozen=True, slots=True)
class StopReplicaResponse(PartitionErrorsResponse):
    pass


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    """A broker asks the controller to move its leaderships away before it stops (key 7)."""

    broker_id: int
    broker_epoch: int = -1  # v2+; older versions carry none (Kafka's UNKNOWN_BROKER_EPOCH)


@dataclass(frozen=True, slots=True)
class RemainingPartition:
    topic_name: str
    partition_index: int


@dataclass(frozen=True, slots=True)
class ControlledShutdownResponse:
    """The controller's answer: an error, and the partitions the broker still leads."""

    error_code: int
    remaining_partitions: tuple[RemainingPartition, ...] = ()
