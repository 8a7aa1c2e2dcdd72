"""DescribeClientQuotas (key 48): the quotas of the entities a filter matches, read from the
metadata store (Kafka's ZkAdminManager). Needs DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.quotas.store import (
    FilterComponent,
    QuotaRequestError,
    describe_client_quotas,
    entity_components,
)
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."


def _error(code: ErrorCode, message: str) -> Mapping[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    if not authorize_cluster(broker, AclOperation.DESCRIBE_CONFIGS):
        return _error(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    components = [
        FilterComponent(c.entity_type, int(c.match_type), c.match)
        for c in req.body.components
    ]
    try:
        found = await describe_client_quotas(broker.admin.store, components,
                                             bool(req.body.strict))
    except QuotaRequestError as e:
        return _error(e.code, e.message)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n}
                           for t, n in entity_components(entity)],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
            }
            for entity, values in found.items()
        ],
    }
