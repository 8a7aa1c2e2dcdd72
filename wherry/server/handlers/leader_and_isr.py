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
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> LeaderAndIsrResponse:
    body = req.body
    if not isinstance(body, LeaderAndIsrRequest):
        raise CloseConnection(f"API key 4 decoded as {type(body).__name__}")
    if not authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        # Kafka: CLUSTER_ACTION on the cluster, checked before anything is touched; the
        # error at the top and for every partition of the request.
        resp = leader_and_isr_error_response(body, ErrorCode.cluster_authorization_failed)
        return with_topic_ids(resp, body.topic_ids)
    resp = await broker.node.handle_leader_and_isr(body)
    return with_topic_ids(resp, body.topic_ids)
