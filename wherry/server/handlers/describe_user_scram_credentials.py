"""DescribeUserScramCredentials (key 50): each user's SCRAM mechanisms and iterations, read
from the metadata store (Kafka's ZkAdminManager). Needs DESCRIBE on the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation
from wherry.security.scram_store import describe_scram_credentials
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    users = req.body.users
    # Null or empty: every user (Kafka's ZkAdminManager; librdkafka sends an empty array).
    names = [u.name for u in users] if users else None
    if not authorize_cluster(broker, AclOperation.DESCRIBE):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": CLUSTER_AUTHORIZATION_FAILED,
            "results": [
                {"user": n, "error_code": ErrorCode.cluster_authorization_failed,
                 "error_message": CLUSTER_AUTHORIZATION_FAILED, "credential_infos": []}
                for n in dict.fromkeys(names or [])
            ],
        }
    results = await describe_scram_credentials(broker.admin.store, names)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": [
            {
                "user": r.user,
                "error_code": r.error_code,
                "error_message": r.error_message,
                "credential_infos": [
                    {"mechanism": c.mechanism_code, "iterations": c.iterations}
                    for c in r.credentials
                ],
            }
            for r in results
        ],
    }
