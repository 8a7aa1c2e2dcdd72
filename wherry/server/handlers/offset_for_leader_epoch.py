"""OffsetForLeaderEpoch (key 23, KIP-101/KIP-279/KIP-320): where an epoch ends on the leader.

Followers ask it before fetching to find where their log diverges from the leader's;
consumers ask it (replica id -1) to detect log truncation after a leader change. Answered from
the leader's leader-epoch cache (Kafka's `Partition.lastOffsetForLeaderEpoch`): the largest
epoch <= the requested one and the offset where it ends (the log end offset for the current
epoch), or -1/-1 when unknown. Only the leader answers, except for the debugging replica id
(-2); `current_leader_epoch` fences stale callers (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.replication.partition import Partition
    from wherry.server.broker import Broker

DEBUGGING_REPLICA_ID = -2


def epoch_end_offset(
    part: Partition | None,
    *,
    current_leader_epoch: int,
    leader_epoch: int,
    replica_id: int,
    known_partition: bool = False,
) -> tuple[ErrorCode, int, int]:
    """(error, epoch, end offset) for one partition; `known_partition` says the cluster has
    the partition even though this broker does not host it (stale metadata)."""
    if part is None:
        code = (
            ErrorCode.not_leader_or_follower
            if known_partition
            else ErrorCode.unknown_topic_or_partition
        )
        return code, -1, -1
    err = part.check_leader_epoch(current_leader_epoch)
    if err is not ErrorCode.none:
        return err, -1, -1
    if replica_id != DEBUGGING_REPLICA_ID and not part.is_leader:
        return ErrorCode.not_leader_or_follower, -1, -1
    epoch, end = part.log.end_offset_for_epoch(leader_epoch)
    return ErrorCode.none, epoch, end


async def handle(broker: Broker, req: Request) -> Mapping[str, Any]:
    body = req.body
    replica_id = int(getattr(body, "replica_id", -1))
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.topic, p.partition)
            err, epoch, end = epoch_end_offset(
                broker.replica_manager.get_partition(tp),
                current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                leader_epoch=int(p.leader_epoch),
                replica_id=replica_id,
                known_partition=broker.cache.partition(t.topic, p.partition) is not None,
            )
            parts.append(
                {
                    "partition": p.partition,
                    "error_code": err,
                    "leader_epoch": epoch,
                    "end_offset": end,
                }
            )
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
