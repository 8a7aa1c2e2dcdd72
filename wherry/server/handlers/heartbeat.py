"""Heartbeat (key 12): keeps a member's session; REBALANCE_IN_PROGRESS asks it to rejoin."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    err = broker.groups.coordinator.handle_heartbeat(
        body.group_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        body.generation_id,
        broker.clock.now_ms(),
    )
    return {"throttle_time": 0, "error_code": err}
