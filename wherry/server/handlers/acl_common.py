"""What the ACL handlers (Describe/Create/DeleteAcls) share: the broker's `AclAuthorizer`
behind the request's cluster permission, wire codes to Kafka's ACL vocabulary (an unknown
code is UNKNOWN), and entries back to the wire."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from wherry.security.acl import (
    AccessControlEntry,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from wherry.security.acl_authorizer import AclAuthorizer
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.server.services import BrokerServices

NO_AUTHORIZER = "No Authorizer is configured."
E = TypeVar("E", bound=IntEnum)


def acl_authorizer(
    broker: BrokerServices, operation: AclOperation
) -> AclAuthorizer | tuple[ErrorCode, str | None]:
    """The broker's ACL authorizer for a request that needs `operation` on the cluster, or
    the error and message that answer it: CLUSTER_AUTHORIZATION_FAILED without that
    permission, SECURITY_DISABLED without an ACL authorizer."""
    if not authorize_cluster(broker, operation):
        return ErrorCode.cluster_authorization_failed, None
    authorizer = broker.authorizer
    if not isinstance(authorizer, AclAuthorizer):
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return authorizer


def code(enum: type[E], value: int) -> E:
    """`enum(value)`, or its UNKNOWN (0) for a code Kafka's enum does not know."""
    try:
        return enum(value)
    except ValueError:
        return enum(0)


def wire_filter(body: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as an `AclBindingFilter`."""
    return AclBindingFilter(
        resource_type=code(ResourceType, body.resource_type_filter),
        name=body.resource_name_filter,
        pattern_type=code(PatternType, body.pattern_type_filter),
        principal=body.principal_filter,
        host=body.host_filter,
        operation=code(AclOperation, body.operation),
        permission_type=code(AclPermissionType, body.permission_type),
    )


def wire_entry(entry: AccessControlEntry) -> dict[str, Any]:
    return {
        "principal": entry.principal,
        "host": entry.host,
        "operation": int(entry.operation),
        "permission_type": int(entry.permission_type),
    }
