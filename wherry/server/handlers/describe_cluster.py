"""DescribeCluster (key 60)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from wherry.server.authz import authorized_operations_field, current_session

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    endpoint_type = getattr(body, "endpoint_type", 1)
    if endpoint_type != 1:
        return {
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": f"Unsupported endpoint type {endpoint_type}",
            "endpoint_type": endpoint_type,
            "cluster_id": broker.cluster_id,
            "controller_id": -1,
        }
    cache = broker.cache
    return {
        "error_code": ErrorCode.none,
        "endpoint_type": 1,
        "cluster_id": broker.cluster_id,
        "controller_id": cache.controller_id if cache.controller_id is not None else -1,
        "brokers": [
            {
                "broker_id": b.broker_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "is_fenced": False,
            }
            for b in cache.alive_brokers(current_session().listener)
        ],
        # Kafka: DESCRIBE on the cluster, else 0; every client may describe the cluster.
        "cluster_authorized_operations": authorized_operations_field(
            broker,
            getattr(body, "include_cluster_authorized_operations", False),
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            requires=AclOperation.DESCRIBE,
        ),
    }
