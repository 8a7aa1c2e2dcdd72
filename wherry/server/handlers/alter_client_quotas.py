"""AlterClientQuotas (key 49): set and remove users' and client ids' quotas in the metadata
store, with Kafka's checks (`quotas.store.alter_client_quotas`); every broker applies them on
the change notification. Needs ALTER_CONFIGS on the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.quotas.store import AlterEntry, QuotaOp, alter_client_quotas
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster
from wherry.server.handlers.describe_client_quotas import CLUSTER_AUTHORIZATION_FAILED

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _entity(components: tuple[tuple[str, str | None], ...]) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in components]


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    entries = [
        AlterEntry(
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple(QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops),
        )
        for entry in req.body.entries
    ]
    if not authorize_cluster(broker, AclOperation.ALTER_CONFIGS):
        return {
            "throttle_time": 0,
            "entries": [
                {"error_code": ErrorCode.cluster_authorization_failed,
                 "error_message": CLUSTER_AUTHORIZATION_FAILED,
                 "entity": _entity(e.components)}
                for e in entries
            ],
        }
    results = await alter_client_quotas(broker.admin.store, entries,
                                        bool(req.body.validate_only))
    return {
        "throttle_time": 0,
        "entries": [
            {"error_code": r.error_code, "error_message": r.error_message,
             "entity": _entity(r.components)}
            for r in results
        ],
    }
