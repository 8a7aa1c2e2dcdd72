"""What the controller's procedures need of the controller (a Protocol, so the modules that
run them -- `reassign_procedure`, `leadership` -- do not import `controller.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from wherry.common.topic_partition import TopicPartition
from wherry.controller.alter_partition import DecideLeaderIsr
from wherry.controller.context import ControllerContext, LeaderIsr
from wherry.controller.election import ElectionStrategy
from wherry.controller.partition_state import ElectionOutcome, PartitionStateMachine
from wherry.controller.replica_state import PartitionReplica, ReplicaStateMachine
from wherry.controller.request_batch import RequestBatch
from wherry.controller.store_client import ControllerStoreClient
from wherry.controller.topic_deletion import TopicDeletionManager


class ControllerCore(Protocol):
    """The acting controller's state and its primitive steps, for one event at a time."""

    ctx: ControllerContext
    partition_sm: PartitionStateMachine
    replica_sm: ReplicaStateMachine
    deletion: TopicDeletionManager

    @property
    def zk(self) -> ControllerStoreClient: ...

    @property
    def prefix(self) -> str: ...

    async def update_leader_isr(
        self, tps: Iterable[TopicPartition], decide: DecideLeaderIsr
    ) -> dict[TopicPartition, LeaderIsr]:
        """Decide, write conditionally (re-deciding on conflict); what was written."""
        ...

    async def replicas_offline(
        self, replicas: list[PartitionReplica], batch: RequestBatch, *, stop_replica: bool
    ) -> None:
        """The replicas leave their ISRs (written) and are told; optionally stopped."""
        ...

    async def elect_with(
        self, tps: list[TopicPartition], strategy: ElectionStrategy, batch: RequestBatch
    ) -> dict[TopicPartition, ElectionOutcome]:
        """Elect leaders with `strategy`, write them and add the requests to `batch`; every
        partition's outcome (`written` tells which were written)."""
        ...
