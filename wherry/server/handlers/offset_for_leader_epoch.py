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
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize_cluster, authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    replica_id = int(getattr(body, "replica_id", -1))
    # Kafka (KIP-320): CLUSTER_ACTION on the cluster answers every topic, whoever asks (replica
    # id or not); otherwise DESCRIBE on each topic.
    names = [t.topic for t in body.topics]
    if authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        allowed = set(names)
    else:
        allowed = authorized_names(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            if t.topic not in allowed:
                parts.append(
                    {
                        "partition": p.partition,
                        "error_code": ErrorCode.topic_authorization_failed,
                        "leader_epoch": -1,
                        "end_offset": -1,
                    }
                )
                continue
            tp = TopicPartition(t.topic, p.partition)
            err, epoch, end = broker.replica_manager.last_offset_for_leader_epoch(
                tp,
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
