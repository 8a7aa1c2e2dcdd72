"""AlterPartition (key 56, v2–v3): a partition leader proposes an ISR change.

Only the broker whose controller instance is active answers; it hands the request to its
controller's event queue (`Controller.alter_partition`). Any other broker answers
NOT_CONTROLLER, and the leader's AlterPartitionManager retries once its metadata names the
new controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.controller.alter_partition import error_response
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    if not authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        # Kafka: CLUSTER_ACTION on the cluster, before the controller-active check.
        return error_response(ErrorCode.cluster_authorization_failed)
    controller = getattr(broker, "controller", None)
    if controller is None or not controller.active:
        return error_response(ErrorCode.not_controller)
    return await controller.alter_partition(req.body)
