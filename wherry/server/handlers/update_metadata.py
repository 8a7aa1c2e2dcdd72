"""UpdateMetadata (key 6, v0–v8): the controller's view of the cluster for the metadata cache.
The rules live in the replica node (`replication/node.py`), shared with the
in-process channel and the simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from wherry.protocol.interbroker import UpdateMetadataRequest, UpdateMetadataResponse
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> UpdateMetadataResponse:
    body = req.body
    if not isinstance(body, UpdateMetadataRequest):
        raise CloseConnection(f"API key 6 decoded as {type(body).__name__}")
    if not authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        # Kafka: CLUSTER_ACTION on the cluster, before the metadata cache is touched.
        return UpdateMetadataResponse(int(ErrorCode.cluster_authorization_failed))
    return UpdateMetadataResponse(await broker.node.handle_update_metadata(body))
