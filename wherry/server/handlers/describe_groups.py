"""DescribeGroups (key 15): state, protocol and members of groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import (
    AUTHORIZATION_MESSAGES,
    AUTHORIZED_OPERATIONS_OMITTED,
    authorize,
    authorized_operations_field,
)

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    coord = broker.groups.coordinator
    include_ops = getattr(req.body, "include_authorized_operations", False)
    groups = []
    for group_id in req.body.groups:
        if not authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            # Kafka's DescribeGroupsResponse.groupError: no state, protocol or members.
            denied = ErrorCode.group_authorization_failed
            groups.append(
                {
                    "error_code": denied,
                    "error_message": AUTHORIZATION_MESSAGES[denied],
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
            continue
        err, message, s = coord.handle_describe_group(
            group_id, req.api_version, broker.clock.now_ms()
        )
        if group_id in broker.shares.groups.groups and s.state == "Dead":  # KIP-932, as Kafka
            err, message = ErrorCode.group_id_not_found, f"Group {group_id} is not a classic group."
        groups.append(
            {
                "error_code": err,
                "error_message": message,
                "group_id": group_id,
                "group_state": s.state,
                "protocol_type": s.protocol_type,
                "protocol_data": s.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in s.members
                ],
                "authorized_operations": authorized_operations_field(
                    broker, include_ops and err == ErrorCode.none, ResourceType.GROUP, group_id
                ),
            }
        )
    return {"throttle_time": 0, "groups": groups}
