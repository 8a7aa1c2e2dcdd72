"""ListOffsets (key 2): earliest, latest, max-timestamp and by-timestamp lookups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.replication.partition import PartitionError
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1

_DENIED = {
    "error_code": ErrorCode.topic_authorization_failed,
    "timestamp": -1,
    "offset": -1,
    "leader_epoch": -1,
}


def _lookup(
    broker: BrokerServices,
    tp: TopicPartition,
    timestamp: int,
    current_leader_epoch: int,
    replica_id: int,
    isolation_level: int = 0,
) -> dict[str, Any]:
    try:
        part = broker.replica_manager.leader_partition(tp, current_leader_epoch)
    except PartitionError as e:
        code = e.error_code
        if code == ErrorCode.unknown_topic_or_partition and broker.cache.partition(*tp) is not None:
            # The partition exists but has no replica here: the client's metadata is stale
            # (Kafka's ReplicaManager.getPartitionOrError).
            code = ErrorCode.not_leader_or_follower
        return {"error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    plog = part.log
    # Consumers see data below the HW (read_committed: below the LSO); a replica or the
    # debugging consumer sees the log end (Kafka's Partition.fetchOffsetForTimestamp).
    if replica_id >= 0:
        upper = plog.log_end_offset
    elif isolation_level == READ_COMMITTED:
        upper = part.last_stable_offset
    else:
        upper = part.high_watermark
    ok = {"error_code": ErrorCode.none, "timestamp": -1, "leader_epoch": part.leader_epoch}
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = plog.log_start_offset
        return {**ok, "offset": start, "leader_epoch": _epoch(plog.epoch_for_offset(start))}
    if timestamp == LATEST:
        return {**ok, "offset": upper}
    if timestamp == LATEST_TIERED:  # no tiered storage: nothing is tiered
        return {**ok, "offset": -1, "leader_epoch": -1}
    if timestamp < 0 and timestamp != MAX_TIMESTAMP:
        return {
            "error_code": ErrorCode.invalid_request,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }
    found = plog.offset_for_timestamp(timestamp)
    if found is None or found.offset >= upper:
        return {**ok, "offset": -1, "leader_epoch": -1}
    return {
        **ok,
        "timestamp": found.timestamp,
        "offset": found.offset,
        "leader_epoch": _epoch(plog.epoch_for_offset(found.offset)),
    }


def _epoch(epoch: int | None) -> int:
    return -1 if epoch is None else epoch


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    # Kafka: DESCRIBE on each topic, replicas included.
    allowed = authorized_names(
        broker, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in body.topics)
    )
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            if t.name not in allowed:
                parts.append({"partition_index": p.partition_index, **_DENIED})
                continue
            tp = TopicPartition(t.name, p.partition_index)
            res = _lookup(
                broker,
                tp,
                p.timestamp,
                getattr(p, "current_leader_epoch", -1),
                body.replica_id,
                getattr(body, "isolation_level", 0),
            )
            parts.append({"partition_index": p.partition_index, **res})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
