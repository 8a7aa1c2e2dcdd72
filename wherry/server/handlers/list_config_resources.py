"""ListConfigResources (key 74; v0 was KIP-714's ListClientMetricsResources, v1 KIP-1142).

As Kafka 4.1's `KafkaApis.handleListConfigResources`: DESCRIBE_CONFIGS on the cluster (else
CLUSTER_AUTHORIZATION_FAILED and nothing listed). v0 lists client-metrics resources only;
v1 lists the requested types, an empty list meaning every supported one (topic 2, broker 4,
broker logger 8, client metrics 16, group 32). A type outside those fails the whole request
with UNSUPPORTED_VERSION. Resources come in Kafka's order: groups, client metrics, broker
loggers, brokers (one per live broker with an endpoint on this listener), topics.

wherry has no client-metrics subscriptions (KIP-714 telemetry is not served), so that type
lists nothing. Kafka lists the groups that have dynamic group configs; wherry lists the groups
its group coordinator holds (whatever kinds it serves), so the tools find the groups they can
describe and configure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster, current_session

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32

SUPPORTED_TYPES: dict[int, frozenset[int]] = {
    0: frozenset({CLIENT_METRICS}),
    1: frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP}),
}


def _answer(error: ErrorCode, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "config_resources": resources}


def _group_ids(broker: BrokerServices) -> list[str]:
    # Groups still loading are listed as far as they are known (as ListGroups does).
    _, groups = broker.groups.coordinator.handle_list_groups((), ())
    shares = broker.shares  # share groups (KIP-932) this broker coordinates
    held = [g for g in shares.groups.groups if shares.coordinator_error(g) == ErrorCode.none]
    return sorted({g.group_id for g in groups} | set(held))


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    if not authorize_cluster(broker, AclOperation.DESCRIBE_CONFIGS):
        return _answer(ErrorCode.cluster_authorization_failed, [])
    supported = SUPPORTED_TYPES[min(req.api_version, 1)]
    asked = {int(t) for t in getattr(req.body, "resource_types", ())}
    if not asked:
        asked = set(supported)
    if not asked <= supported:
        return _answer(ErrorCode.unsupported_version, [])
    resources: list[dict[str, Any]] = []

    def add(rtype: int, names: list[str]) -> None:
        resources.extend({"resource_name": n, "resource_type": rtype} for n in names)

    cache = broker.cache
    brokers = [str(b.broker_id) for b in cache.alive_brokers(current_session().listener)]
    if GROUP in asked:
        add(GROUP, _group_ids(broker))
    # CLIENT_METRICS: no subscriptions exist on wherry.
    if BROKER_LOGGER in asked:
        add(BROKER_LOGGER, brokers)
    if BROKER in asked:
        add(BROKER, brokers)
    if TOPIC in asked:
        add(TOPIC, sorted(cache.topics()))
    return _answer(ErrorCode.none, resources)
