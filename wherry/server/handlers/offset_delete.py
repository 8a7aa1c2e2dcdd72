"""OffsetDelete (key 47): delete a group's offsets of topics it no longer consumes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    cache = broker.cache
    # Kafka: DELETE on the group (else the request fails), READ on each topic.
    if not authorize(broker, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
        denied = ErrorCode.group_authorization_failed
        return {"error_code": denied, "throttle_time": 0, "topics": []}
    readable = authorized_names(
        broker, AclOperation.READ, ResourceType.TOPIC, (t.name for t in body.topics)
    )
    errors: dict[TopicPartition, ErrorCode] = {}
    known: list[TopicPartition] = []
    for t in body.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if t.name not in readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif cache.contains_topic(t.name):
                known.append(tp)
            else:
                errors[tp] = ErrorCode.unknown_topic_or_partition
    group_err, deleted = broker.groups.coordinator.handle_delete_offsets(
        body.group_id, known, broker.clock.now_ms()
    )
    if group_err != ErrorCode.none:
        return {"error_code": group_err, "throttle_time": 0, "topics": []}
    errors.update(deleted)
    topics: dict[str, list[dict[str, Any]]] = {}
    for t in body.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            topics.setdefault(t.name, []).append(
                {"partition_index": p.partition_index, "error_code": errors.get(tp, ErrorCode.none)}
            )
    return {
        "error_code": ErrorCode.none,
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
