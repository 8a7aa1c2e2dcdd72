"""CreateAcls (key 30): add ACL bindings through the broker's `AclAuthorizer`. Needs ALTER
on the cluster; SECURITY_DISABLED without an authorizer; INVALID_REQUEST with Kafka's
message for a binding it refuses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from wherry.server.handlers.acl_common import acl_authorizer, code

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            code(ResourceType, c.resource_type),
            c.resource_name,
            code(PatternType, c.resource_pattern_type),
        ),
        AccessControlEntry(
            c.principal,
            c.host,
            code(AclOperation, c.operation),
            code(AclPermissionType, c.permission_type),
        ),
    )


def _all(n: int, error: ErrorCode, message: str | None) -> Mapping[str, Any]:
    return {
        "throttle_time": 0,
        "results": [{"error_code": error, "error_message": message} for _ in range(n)],
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    creations = list(req.body.creations)
    authorizer = acl_authorizer(broker, AclOperation.ALTER)
    if isinstance(authorizer, tuple):
        return _all(len(creations), *authorizer)
    errors = await authorizer.create_acls([_binding(c) for c in creations])
    return {
        "throttle_time": 0,
        "results": [
            {"error_code": ErrorCode.none, "error_message": None}
            if e is None
            else {"error_code": ErrorCode(e.code), "error_message": e.message}
            for e in errors
        ],
    }
