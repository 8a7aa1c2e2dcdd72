"""How the controller reaches brokers: LeaderAndIsr, UpdateMetadata and StopReplica.

`InProcessChannel` hands requests to brokers living in the same process (the single-broker
server, `wherry dev`, tests) and returns their answers. `channel_manager.NetworkChannelManager`
is the same interface over the network: it queues (one queue per broker, resent until the
broker answers or is removed), returns None at once and reports answers to its response
listeners (`ResponseListenable`).

`sync_brokers` tells the channel which brokers are live (the controller calls it after loading
the live brokers, on every broker change, and with ``{}`` when it resigns or stops): the
network channel starts and drops its per-broker queues to match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from wherry.protocol.interbroker import (
        LeaderAndIsrRequest,
        LeaderAndIsrResponse,
        StopReplicaRequest,
        StopReplicaResponse,
        UpdateMetadataRequest,
    )
    from wherry.protocol.interbroker_codec import InterbrokerRequestBody, InterbrokerResponseBody


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where a broker listens. `epoch` (its registration's czxid) tells incarnations apart: a
    broker that came back under the same id is a new broker with a new queue."""

    host: str
    port: int
    epoch: int = -1


ResponseCallback = Callable[[int, "InterbrokerRequestBody", "InterbrokerResponseBody"], None]
"""(broker id, request, response), called once the broker answered."""


class ControllerRequestHandler(Protocol):
    """The broker side of the controller's requests."""

    async def handle_leader_and_isr(self, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse: ...

    async def handle_update_metadata(self, req: UpdateMetadataRequest) -> int: ...

    async def handle_stop_replica(self, req: StopReplicaRequest) -> StopReplicaResponse: ...


class ControllerChannel(Protocol):
    """Each method returns the broker's answer when the channel has it at once, else None
    (a queueing channel reports answers to its response listeners instead)."""

    async def leader_and_isr(
        self, broker_id: int, req: LeaderAndIsrRequest
    ) -> LeaderAndIsrResponse | None: ...

    async def update_metadata(self, broker_id: int, req: UpdateMetadataRequest) -> int | None: ...

    async def stop_replica(
        self, broker_id: int, req: StopReplicaRequest
    ) -> StopReplicaResponse | None: ...

    async def sync_brokers(self, brokers: Mapping[int, BrokerAddress]) -> None:
        """The live brokers, as the controller knows them (``{}``: none, it resigned)."""
        ...


@runtime_checkable
class ResponseListenable(Protocol):
    """A channel that answers later: the controller registers to hear the answers."""

    def add_response_listener(self, listener: ResponseCallback) -> None: ...

    def remove_response_listener(self, listener: ResponseCallback) -> None: ...


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

    async def sync_brokers(self, brokers: Mapping[int, BrokerAddress]) -> None:
        """Nothing to do: requests go straight to whoever is registered."""
