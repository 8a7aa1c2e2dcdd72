"""AlterUserScramCredentials (key 51): upsert and delete users' SCRAM credentials in the
metadata store, with Kafka's checks (`scram_store.alter_scram_credentials`); the client sends
the salt and salted password, the broker derives the stored and server keys. Every broker
reloads the user on the change notification. Needs ALTER on the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation
from wherry.security.scram_store import ScramDeletion, ScramUpsertion, alter_scram_credentials
from wherry.server.authz import authorize_cluster
from wherry.server.handlers.describe_user_scram_credentials import CLUSTER_AUTHORIZATION_FAILED

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    upsertions = [
        ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                       bytes(u.salted_password))
        for u in body.upsertions
    ]
    deletions = [ScramDeletion(d.name, int(d.mechanism)) for d in body.deletions]
    if not authorize_cluster(broker, AclOperation.ALTER):
        users = dict.fromkeys([u.user for u in upsertions] + [d.user for d in deletions])
        return {
            "throttle_time": 0,
            "results": [
                {"user": u, "error_code": ErrorCode.cluster_authorization_failed,
                 "error_message": CLUSTER_AUTHORIZATION_FAILED}
                for u in users
            ],
        }
    results = await alter_scram_credentials(broker.admin.store, upsertions, deletions)
    return {
        "throttle_time": 0,
        "results": [
            {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
            for r in results
        ],
    }
