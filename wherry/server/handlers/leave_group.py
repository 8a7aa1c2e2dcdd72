"""LeaveGroup (key 13): members leave (a batch from v3, static members by instance id)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.group.coordinator import MemberIdentity
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize
from wherry.server.handlers.group_common import topics_image

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    v = req.api_version
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    if v >= 3:
        members = [
            MemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in body.members
        ]
    else:
        members = [MemberIdentity(body.member_id)]
    r = broker.groups.coordinator.handle_leave_group(
        body.group_id, members, broker.clock.now_ms(), topics_image(broker.cache)
    )
    if v >= 3:
        error = r.error
    else:
        # One member, one error code: the member's error when the request itself was fine.
        error = r.error
        if error == ErrorCode.none:
            error = next((m.error for m in r.members if m.error != ErrorCode.none), error)
    return {
        "throttle_time": 0,
        "error_code": error,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": m.error,
            }
            for m in r.members
        ],
    }
