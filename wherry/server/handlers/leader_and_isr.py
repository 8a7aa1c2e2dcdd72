"""LeaderAndIsr (key 4, v0–v7): the controller tells this broker whom each partition follows.

The rules (broker epoch, controller epoch, per-partition leader epoch and replica list) live in
the replica node (`replication/node.py`), shared with the in-process channel and the
simulator; this module only adapts the wire request. Responses v5+ name topics by id, taken
from the request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from wherry.protocol.interbroker import LeaderAndIsrRequest, LeaderAndIsrResponse
from wherry.protocol.interbroker_codec import with_topic_ids
from wherry.replication.controller_requests import leader_and_isr_error_response
from wherry.server.handlers.controller_common import controller_request

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> LeaderAndIsrResponse:
    body, allowed = controller_request(broker, req, LeaderAndIsrRequest)
    if not allowed:
        # The error at the top and for every partition of the request.
        resp = leader_and_isr_error_response(body, ErrorCode.cluster_authorization_failed)
        return with_topic_ids(resp, body.topic_ids)
    resp = await broker.node.handle_leader_and_isr(body)
    return with_topic_ids(resp, body.topic_ids)
