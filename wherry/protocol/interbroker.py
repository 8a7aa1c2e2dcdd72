"""Controller → broker requests kio lacks (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6).

Field names follow Apache Kafka 3.9's message schemas (LeaderAndIsrRequest.json,
StopReplicaRequest.json, UpdateMetadataRequest.json). In a single process these values are
handed over directly; the wire codec for them arrives with the multi-broker cluster.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

LEADER_AND_ISR_KEY = 4
STOP_REPLICA_KEY = 5
UPDATE_METADATA_KEY = 6

NO_LEADER = -1
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState:
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
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
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[LeaderAndIsrPartitionState, ...]
    topic_ids: dict[str, uuid.UUID]
    live_leaders: tuple[BrokerEndpoint, ...]
    is_full: bool = False


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionError:
    topic_name: str
    partition_index: int
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponse:
    error_code: int
    partition_errors: tuple[LeaderAndIsrPartitionError, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateMetadataPartitionState:
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[UpdateMetadataPartitionState, ...]
    live_brokers: tuple[BrokerEndpoint, ...]
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StopReplicaPartition:
    topic_name: str
    partition_index: int
    leader_epoch: int
    delete_partition: bool


@dataclass(frozen=True, slots=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: tuple[StopReplicaPartition, ...]


@dataclass(frozen=True, slots=True)
class StopReplicaResponse:
    error_code: int
    partition_errors: tuple[LeaderAndIsrPartitionError, ...] = ()
