"""How the controller reaches brokers: LeaderAndIsr, UpdateMetadata and StopReplica.

`InProcessChannel` hands requests to brokers living in the same process (the single-broker
server and, later, `wherry dev`). The multi-process cluster adds a network channel manager
with the same interface (batched, retried until the broker answers or dies).
"""

from __future__ import annotations

from typing import Protocol

from wherry.protocol.interbroker import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)


class ControllerRequestHandler(Protocol):
    """The broker side of the controller's requests."""

    async def handle_leader_and_isr(self, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse: ...

    async def handle_update_metadata(self, req: UpdateMetadataRequest) -> int: ...

    async def handle_stop_replica(self, req: StopReplicaRequest) -> StopReplicaResponse: ...


class ControllerChannel(Protocol):
    async def leader_and_isr(
        self, broker_id: int, req: LeaderAndIsrRequest
    ) -> LeaderAndIsrResponse | None: ...

    async def update_metadata(self, broker_id: int, req: UpdateMetadataRequest) -> int | None: ...

    async def stop_replica(
        self, broker_id: int, req: StopReplicaRequest
    ) -> StopReplicaResponse | None: ...


class InProcessChannel:
    """Brokers registered in this process; a request to an unknown broker returns None."""

    def __init__(self) -> None:
        self._brokers: dict[int, ControllerRequestHandler] = {}

    def register(self, broker_id: int, handler: ControllerRequestHandler) -> None:
        self._brokers[broker_id] = handler

    def unregister(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)

    async def leader_and_isr(
        self, broker_id: int, req: LeaderAndIsrRequest
    ) -> LeaderAndIsrResponse | None:
        b = self._brokers.get(broker_id)
        return None if b is None else await b.handle_leader_and_isr(req)

    async def update_metadata(self, broker_id: int, req: UpdateMetadataRequest) -> int | None:
        b = self._brokers.get(broker_id)
        return None if b is None else await b.handle_update_metadata(req)

    async def stop_replica(
        self, broker_id: int, req: StopReplicaRequest
    ) -> StopReplicaResponse | None:
        b = self._brokers.get(broker_id)
        return None if b is None else await b.handle_stop_replica(req)
