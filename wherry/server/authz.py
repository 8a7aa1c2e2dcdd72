"""Authorization as request handlers use it: who sent the request being handled (a context
variable the broker sets per request) and what the broker's authorizer says of it.

A broker without an authorizer (`authorizer.class.name` unset, Kafka's default) allows
everything; `authorized_operations` then reports every operation the resource type supports,
as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING

from wherry.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from wherry.security.principal import Session, anonymous_session

if TYPE_CHECKING:
    from wherry.server.services import BrokerServices

# The session of the request being handled; the broker sets it for each request.
_NO_SESSION = anonymous_session()  # outside any request (frozen, so shared safely)
REQUEST_SESSION: ContextVar[Session] = ContextVar("request_session", default=_NO_SESSION)

# Operations Kafka reports in `authorized_operations` fields, per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}


def current_session() -> Session:
    return REQUEST_SESSION.get()


def authorize(
    broker: BrokerServices, operation: AclOperation, resource_type: ResourceType, name: str
) -> bool:
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(current_session(), operation, resource_type, name)


def authorize_cluster(broker: BrokerServices, operation: AclOperation) -> bool:
    return authorize(broker, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorize_by_resource_type(
    broker: BrokerServices, operation: AclOperation, resource_type: ResourceType
) -> bool:
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(current_session(), operation, resource_type)


def filter_authorized(
    broker: BrokerServices,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The names among `names` the session may perform `operation` on."""
    return {n for n in names if authorize(broker, operation, resource_type, n)}


def authorized_operations(broker: BrokerServices, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bit field (bit `op.value` set for each allowed op)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        if authorize(broker, op, resource_type, name):
            bits |= 1 << op.value
    return bits
