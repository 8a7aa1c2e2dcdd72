"""ListGroups (key 16): the groups this coordinator serves (state filter v4+, type v5+)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    err, groups = broker.groups.coordinator.handle_list_groups(
        getattr(body, "states_filter", ()) or (), getattr(body, "types_filter", ()) or (),
        broker.clock.now_ms(),
    )
    if not authorize_cluster(broker, AclOperation.DESCRIBE):
        # Kafka: DESCRIBE on the cluster lists every group, else those with DESCRIBE.
        groups = [
            g
            for g in groups
            if authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    listed = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type,
            "group_state": g.state,
            "group_type": g.group_type,
        }
        for g in groups
    ]
    listed += share_groups(broker, body)
    return {"throttle_time": 0, "error_code": err, "groups": listed}


def share_groups(broker: BrokerServices, body: Any) -> list[dict[str, Any]]:
    """The share groups (KIP-932) this broker coordinates, type "share", under the filters."""
    states = {s.lower() for s in getattr(body, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
    if types and "share" not in types:
        return []
    out = []
    for g in list(broker.shares.groups.groups.values()):
        if broker.shares.coordinator_error(g.group_id) != ErrorCode.none:
            continue
        if states and g.state.lower() not in states:
            continue
        if not authorize_cluster(broker, AclOperation.DESCRIBE) and not authorize(
            broker, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id
        ):
            continue
        out.append(
            {"group_id": g.group_id, "protocol_type": "share", "group_state": g.state,
             "group_type": "share"}
        )
    return out
