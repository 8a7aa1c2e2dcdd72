"""InitProducerId (key 22) for idempotent producers.

Every call without a transactional id gets a fresh producer id with epoch 0, as Kafka's
transaction coordinator does for idempotent producers. Transactions are not implemented:
a transactional id is answered with COORDINATOR_NOT_AVAILABLE (clients never get here: they
find the transaction coordinator first, and FindCoordinator refuses transactional ids with a
message saying transactions are not supported; see find_coordinator.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorize_by_resource_type, authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _error(code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    tid = req.body.transactional_id
    # Kafka: WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or
    # WRITE on any topic (KIP-679).
    if tid is not None:
        if not authorize(broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return _error(ErrorCode.transactional_id_authorization_failed)
        return _error(ErrorCode.coordinator_not_available)
    if not (
        authorize_cluster(broker, AclOperation.IDEMPOTENT_WRITE)
        or authorize_by_resource_type(broker, AclOperation.WRITE, ResourceType.TOPIC)
    ):
        return _error(ErrorCode.cluster_authorization_failed)
    pid = await broker.producer_ids.next_id()
    return {
        "error_code": ErrorCode.none,
        "producer_id": pid,
        "producer_epoch": 0,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    }
