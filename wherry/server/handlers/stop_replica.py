"""StopReplica (key 5, v0–v4): the controller tells this broker to stop (and maybe delete)
replicas. The rules live in the replica node (`replication/node.py`), shared with the in-process
channel and the simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from wherry.protocol.interbroker import StopReplicaRequest, StopReplicaResponse
from wherry.replication.controller_requests import stop_replica_error_response
from wherry.server.handlers.controller_common import controller_request

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> StopReplicaResponse:
    body, allowed = controller_request(broker, req, StopReplicaRequest)
    if not allowed:
        return stop_replica_error_response(ErrorCode.cluster_authorization_failed, body.partitions)
    return await broker.node.handle_stop_replica(body)
