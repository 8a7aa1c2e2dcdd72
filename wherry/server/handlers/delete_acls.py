"""DeleteAcls (key 31): remove the ACLs each filter matches through the broker's
`AclAuthorizer` and answer them per filter. Needs ALTER on the cluster; SECURITY_DISABLED
without an authorizer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclBinding, AclOperation
from wherry.security.acl_authorizer import AclDeleteResult, AclError
from wherry.server.handlers.acl_common import acl_authorizer, wire_entry, wire_filter

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _all(n: int, error: ErrorCode, message: str | None) -> Mapping[str, Any]:
    return {
        "throttle_time": 0,
        "filter_results": [
            {"error_code": error, "error_message": message, "matching_acls": []}
            for _ in range(n)
        ],
    }


def _matching(binding: AclBinding, error: AclError | None) -> dict[str, Any]:
    p = binding.pattern
    return {
        "error_code": ErrorCode.none if error is None else ErrorCode(error.code),
        "error_message": None if error is None else error.message,
        "resource_type": int(p.resource_type),
        "resource_name": p.name,
        "pattern_type": int(p.pattern_type),
        **wire_entry(binding.entry),
    }


def _result(r: AclDeleteResult) -> dict[str, Any]:
    if r.error is not None:
        return {"error_code": ErrorCode(r.error.code), "error_message": r.error.message,
                "matching_acls": []}
    return {"error_code": ErrorCode.none, "error_message": None,
            "matching_acls": [_matching(b, e) for b, e in r.deleted]}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    filters = list(req.body.filters)
    authorizer = acl_authorizer(broker, AclOperation.ALTER)
    if isinstance(authorizer, tuple):
        return _all(len(filters), *authorizer)
    results = await authorizer.delete_acls([wire_filter(f) for f in filters])
    return {"throttle_time": 0, "filter_results": [_result(r) for r in results]}
