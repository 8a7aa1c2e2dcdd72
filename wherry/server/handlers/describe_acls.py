"""DescribeAcls (key 29): the ACLs a filter matches, from this broker's ACL cache, grouped by
resource pattern. Needs DESCRIBE on the cluster; SECURITY_DISABLED without an authorizer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AccessControlEntry, AclOperation, ResourcePattern
from wherry.security.acl_rules import filter_error
from wherry.server.handlers.acl_common import acl_authorizer, wire_entry, wire_filter

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _error(error: ErrorCode, message: str | None) -> Mapping[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "resources": []}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    authorizer = acl_authorizer(broker, AclOperation.DESCRIBE)
    if isinstance(authorizer, tuple):
        return _error(*authorizer)
    f = wire_filter(req.body)
    message = filter_error(f)
    if message is not None:
        return _error(ErrorCode.invalid_request, message)
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in authorizer.describe_acls(f):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    resources = [
        {
            "resource_type": int(p.resource_type),
            "resource_name": p.name,
            "pattern_type": int(p.pattern_type),
            "acls": [wire_entry(e) for e in entries],
        }
        for p, entries in grouped.items()
    ]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "resources": resources}
