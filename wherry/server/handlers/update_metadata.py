"""UpdateMetadata (key 6, v0–v8): the controller's view of the cluster for the metadata cache.
The rules live in the replica node (`replication/node.py`), shared with the
in-process channel and the simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from wherry.protocol.interbroker import UpdateMetadataRequest, UpdateMetadataResponse
from wherry.server.handlers.controller_common import controller_request

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> UpdateMetadataResponse:
    body, allowed = controller_request(broker, req, UpdateMetadataRequest)
    if not allowed:
        return UpdateMetadataResponse(int(ErrorCode.cluster_authorization_failed))
    return UpdateMetadataResponse(await broker.node.handle_update_metadata(body))
