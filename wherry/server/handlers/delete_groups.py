"""DeleteGroups (key 42): delete empty groups and their offsets (tombstones in the log)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    names = list(dict.fromkeys(req.body.groups_names))
    # Kafka: DELETE on each group; the others are not passed on.
    allowed = authorized_names(broker, AclOperation.DELETE, ResourceType.GROUP, names)
    errors = dict.fromkeys(names, ErrorCode.group_authorization_failed)
    shares = broker.shares.groups.groups  # share groups (KIP-932) held here
    if allowed:
        errors.update(
            broker.groups.coordinator.handle_delete_groups(
                [g for g in names if g in allowed and g not in shares], broker.clock.now_ms()
            )
        )
    for g in names:
        if g in allowed and g in shares:
            errors[g] = await broker.shares.delete_group(g)
    return {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": errors[g]} for g in names],
    }
