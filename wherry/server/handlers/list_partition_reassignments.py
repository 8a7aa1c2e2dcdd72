"""ListPartitionReassignments (key 46, v0): the reassignments in progress (KIP-455).

``topics`` null lists every ongoing reassignment; otherwise the named partitions that have one
(others are left out). Each shows the full replica set during the move and the replicas being
added and removed (`Controller.list_partition_reassignments`). A broker whose controller
instance is not active answers NOT_CONTROLLER at the top level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster, cluster_denied_message
from wherry.server.handlers.alter_partition_reassignments import NOT_CONTROLLER_MESSAGE

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    topics = req.body.topics
    asked: list[TopicPartition] | None = None
    if topics is not None:
        asked = list(
            dict.fromkeys(
                TopicPartition(t.name, int(p)) for t in topics for p in t.partition_indexes
            )
        )
    if not authorize_cluster(broker, AclOperation.DESCRIBE):
        # Kafka (authorizeClusterOperation): DESCRIBE on the cluster, else the request's
        # error response, which lists the partitions asked with no replicas.
        asked_by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in asked or ():
            asked_by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "replicas": [],
                    "adding_replicas": [],
                    "removing_replicas": [],
                }
            )
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": cluster_denied_message(req),
            "topics": [{"name": n, "partitions": ps} for n, ps in asked_by_topic.items()],
        }
    controller = getattr(broker, "controller", None)
    ongoing = None
    if controller is not None and controller.active:
        ongoing = await controller.list_partition_reassignments(asked)
    if ongoing is None:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.not_controller,
            "error_message": NOT_CONTROLLER_MESSAGE,
            "topics": [],
        }
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in sorted(ongoing):
        r = ongoing[tp]
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "replicas": list(r.replicas),
                "adding_replicas": list(r.adding),
                "removing_replicas": list(r.removing),
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
