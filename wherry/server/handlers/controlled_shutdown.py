"""ControlledShutdown (key 7, v0–v3): a broker about to stop asks the controller to move its
leaderships away first.

Only the broker whose controller instance is active answers, with what
`Controller.controlled_shutdown` says: an error (STALE_BROKER_EPOCH, BROKER_NOT_AVAILABLE, ...)
or NONE and the partitions the broker still leads. Any other broker answers NOT_CONTROLLER
and the shutting-down broker tries again once its metadata names the new controller. v0–v1
carry no broker epoch: the controller gets -1 (Kafka's UNKNOWN_BROKER_EPOCH, not checked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from wherry.protocol.interbroker import ControlledShutdownResponse, RemainingPartition
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> ControlledShutdownResponse:
    if not authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        # Kafka: CLUSTER_ACTION on the cluster, before the controller is asked anything.
        return ControlledShutdownResponse(int(ErrorCode.cluster_authorization_failed))
    controller = getattr(broker, "controller", None)
    if controller is None or not controller.active:
        return ControlledShutdownResponse(int(ErrorCode.not_controller))
    body = req.body
    error, remaining = await controller.controlled_shutdown(body.broker_id, body.broker_epoch)
    return ControlledShutdownResponse(
        int(error), tuple(RemainingPartition(tp.topic, tp.partition) for tp in remaining)
    )
