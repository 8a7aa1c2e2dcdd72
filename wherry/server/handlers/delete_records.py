"""DeleteRecords (key 21): move a partition's log start offset up (kafka-delete-records).

Served by the partition's leader. ``offset = -1`` means "up to the high watermark"; an offset
beyond the high watermark is OFFSET_OUT_OF_RANGE; compacted topics refuse it with
POLICY_VIOLATION, as Kafka does. Whole segments below the new start go with the next
retention pass; reads below it get OFFSET_OUT_OF_RANGE at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log import OffsetOutOfRangeError
from wherry.replication.partition import PartitionError
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

HIGH_WATERMARK = -1


def _delete(broker: BrokerServices, tp: TopicPartition, offset: int) -> tuple[ErrorCode, int]:
    try:
        part = broker.replica_manager.leader_partition(tp)
    except PartitionError as e:
        return e.error_code, -1
    plog = part.log
    if "delete" not in plog.config.cleanup_policy:
        return ErrorCode.policy_violation, -1
    target = part.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        return ErrorCode.offset_out_of_range, -1
    try:
        plog.maybe_increment_log_start_offset(target, "DeleteRecords")
    except OffsetOutOfRangeError:
        return ErrorCode.offset_out_of_range, -1
    return ErrorCode.none, plog.log_start_offset


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    # Kafka: DELETE on each topic, before its existence is checked.
    allowed = authorized_names(
        broker, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.body.topics)
    )
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            if t.name in allowed:
                code, low = _delete(broker, TopicPartition(t.name, p.partition_index), p.offset)
            else:
                code, low = ErrorCode.topic_authorization_failed, -1
            parts.append(
                {"partition_index": p.partition_index, "low_watermark": low, "error_code": code}
            )
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
