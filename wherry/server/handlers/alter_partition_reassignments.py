"""AlterPartitionReassignments (key 45, v0): start or cancel partition reassignments (KIP-455).

Each partition names its target replicas, or null to cancel the reassignment in progress. The
controller validates and starts them (`Controller.alter_partition_reassignments`) and answers
per partition (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
NO_REASSIGNMENT_IN_PROGRESS, ...); the answer comes once the reassignment is under way, not
when it is complete (ListPartitionReassignments follows it). A broker whose controller instance
is not active answers NOT_CONTROLLER at the top level with no partitions, as Kafka's does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster, cluster_denied_message

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."


def top_level_error(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "responses": []}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    targets: dict[TopicPartition, tuple[int, ...] | None] = {}
    for t in req.body.topics:
        for p in t.partitions:
            replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
            targets[TopicPartition(t.name, int(p.partition_index))] = replicas
    if not authorize_cluster(broker, AclOperation.ALTER):
        # Kafka (authorizeClusterOperation): ALTER on the cluster, else the request's error
        # response, the error and its message at the top and for every partition.
        denied, message = ErrorCode.cluster_authorization_failed, cluster_denied_message(req)
        return {
            **top_level_error(denied, message),
            "responses": _per_partition(
                {tp: (denied, message) for tp in targets}, targets
            ),
        }
    controller = getattr(broker, "controller", None)
    results = None
    if controller is not None and controller.active:
        results = await controller.alter_partition_reassignments(targets)
    if results is None:
        return top_level_error(ErrorCode.not_controller, NOT_CONTROLLER_MESSAGE)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": _per_partition(results, targets),
    }


def _per_partition(
    results: Mapping[TopicPartition, tuple[ErrorCode, str | None]],
    targets: Iterable[TopicPartition],
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in targets:
        code, message = results.get(
            tp, (ErrorCode.unknown_server_error, "the controller gave no result")
        )
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": code, "error_message": message}
        )
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
