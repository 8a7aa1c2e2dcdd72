"""ListGroups (key 16): the groups this coordinator serves (state filter v4+, type v5+)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    err, groups = broker.groups.coordinator.handle_list_groups(
        getattr(body, "states_filter", ()) or (), getattr(body, "types_filter", ()) or ()
    )
    if not authorize_cluster(broker, AclOperation.DESCRIBE):
        # Kafka: DESCRIBE on the cluster lists every group, else those with DESCRIBE.
        groups = [
            g
            for g in groups
            if authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    return {
        "throttle_time": 0,
        "error_code": err,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in groups
        ],
    }
