"""StopReplica (key 5, v0–v4): the controller tells this broker to stop (and maybe delete)
replicas. The rules live in `Broker.handle_stop_replica`, shared with the in-process channel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.protocol.interbroker import StopReplicaRequest, StopReplicaResponse
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.broker import Broker


async def handle(broker: Broker, req: Request) -> StopReplicaResponse:
    body = req.body
    if not isinstance(body, StopReplicaRequest):
        raise CloseConnection(f"API key 5 decoded as {type(body).__name__}")
    return await broker.handle_stop_replica(body)
