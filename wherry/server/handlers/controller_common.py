"""What the handlers of the controller's requests to a broker (LeaderAndIsr, StopReplica,
UpdateMetadata) share: the request decoded as its inter-broker class (anything else closes
the connection) and Kafka's CLUSTER_ACTION check, made before anything is touched."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

__all__ = ["controller_request"]

B = TypeVar("B")


def controller_request(broker: BrokerServices, req: Request, cls: type[B]) -> tuple[B, bool]:
    """The request's body, and whether its sender may perform CLUSTER_ACTION on the cluster."""
    body = req.body
    if not isinstance(body, cls):
        raise CloseConnection(f"API key {req.api_key} decoded as {type(body).__name__}")
    return body, authorize_cluster(broker, AclOperation.CLUSTER_ACTION)
