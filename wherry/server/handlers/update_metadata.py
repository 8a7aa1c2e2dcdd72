"""UpdateMetadata (key 6, v0–v8): the controller's view of the cluster for the metadata cache
(SPEC M1). The rules live in the replica node (`replication/node.py`), shared with the
in-process channel and the simulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.protocol.interbroker import UpdateMetadataRequest, UpdateMetadataResponse
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> UpdateMetadataResponse:
    body = req.body
    if not isinstance(body, UpdateMetadataRequest):
        raise CloseConnection(f"API key 6 decoded as {type(body).__name__}")
    return UpdateMetadataResponse(await broker.node.handle_update_metadata(body))
