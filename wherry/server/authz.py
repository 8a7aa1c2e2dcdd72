"""Authorization as request handlers use it: who sent the request being handled (a context
variable the broker sets per request) and what the broker's authorizer says of it.

A broker without an authorizer (`authorizer.class.name` unset, Kafka's default) allows
everything; `authorized_operations` then reports every operation the resource type supports,
as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode

from wherry.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from wherry.server.request_session import REQUEST_SESSION, current_session

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

__all__ = ["REQUEST_SESSION", "current_session"]  # where handlers find them, with the rules

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
    if broker.authorizer is None:  # every one, without asking per name
        return set(names)
    return {n for n in names if authorize(broker, operation, resource_type, n)}


def authorized_operations(broker: BrokerServices, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bit field (bit `op.value` set for each allowed op)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        if authorize(broker, op, resource_type, name):
            bits |= 1 << op.value
    return bits


# === Handler helpers (KafkaApis' AuthHelper as the request handlers use it) ===================
# Everything below is what several handlers share: Kafka's error messages for authorization
# failures, splitting a request's entries into authorized and denied ones by resource name,
# the authorized-operations fields, config resources and cluster operations.

_T = TypeVar("_T")

# Kafka's `Errors` default messages, for the responses that carry `error.message`.
AUTHORIZATION_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}

# The `authorized_operations` value of a response that was not asked for it (schema default).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def authorized_names(
    broker: BrokerServices,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """Kafka's filterByAuthorized: each distinct name asked once."""
    return filter_authorized(broker, operation, resource_type, set(names))


def partition_by_authorized(
    broker: BrokerServices,
    operation: AclOperation,
    resource_type: ResourceType,
    items: Iterable[_T],
    name_of: Callable[[_T], str],
) -> tuple[list[_T], list[_T]]:
    """Kafka's partitionSeqByAuthorized: `items` split into (authorized, denied), request
    order kept, each distinct name asked once."""
    listed = list(items)
    allowed = authorized_names(broker, operation, resource_type, (name_of(i) for i in listed))
    return (
        [i for i in listed if name_of(i) in allowed],
        [i for i in listed if name_of(i) not in allowed],
    )


def authorized_operations_field(
    broker: BrokerServices,
    include: bool,
    resource_type: ResourceType,
    name: str,
    *,
    requires: AclOperation | None = None,
) -> int:
    """An `authorized_operations` response field: the omitted marker unless the request asked
    for it (`include`); with `requires` (Kafka asks DESCRIBE on the cluster before reporting
    the cluster's operations), 0 when that operation is denied."""
    if not include:
        return AUTHORIZED_OPERATIONS_OMITTED
    if requires is not None and not authorize(broker, requires, resource_type, name):
        return 0
    return authorized_operations(broker, resource_type, name)


# ConfigResource.Type codes (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs).
CONFIG_TOPIC = 2
CONFIG_BROKER = 4
CONFIG_BROKER_LOGGER = 8
CONFIG_GROUP = 32


def config_resource_denied(
    broker: BrokerServices, operation: AclOperation, config_type: int, name: str
) -> ErrorCode | None:
    """The error for a config resource the session may not DESCRIBE_CONFIGS / ALTER_CONFIGS:
    a topic needs the operation on the topic, a broker or broker logger on the cluster. None
    when allowed, or for a resource type with no such rule (the handler answers those)."""
    if config_type == CONFIG_TOPIC:
        if authorize(broker, operation, ResourceType.TOPIC, name):
            return None
        return ErrorCode.topic_authorization_failed
    if config_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
        if authorize_cluster(broker, operation):
            return None
        return ErrorCode.cluster_authorization_failed
    if config_type == CONFIG_GROUP:  # Kafka: the operation on the group
        if authorize(broker, operation, ResourceType.GROUP, name):
            return None
        return ErrorCode.group_authorization_failed
    return None


def cluster_denied_message(req: Request) -> str:
    """The message of Kafka's authorizeClusterOperation failure, "Request ... is not
    authorized." (Kafka prints its request object; this names the same facts)."""
    s = current_session()
    return (
        f"Request(apiKey={req.api_key}, apiVersion={req.api_version}, "
        f"clientId={req.client_id}, correlationId={req.correlation_id}, "
        f"principal={s.principal}, listenerName={s.listener}, "
        f"securityProtocol={s.security_protocol}) is not authorized."
    )
