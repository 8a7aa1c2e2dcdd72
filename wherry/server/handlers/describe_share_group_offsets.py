"""DescribeShareGroupOffsets (key 90): a share group's start offsets (SPSO) per partition
(KIP-932; `server/share_offsets.py`).

As Kafka's KafkaApis: DESCRIBE on each group (else that group's GROUP_AUTHORIZATION_FAILED),
DESCRIBE on each topic (else its partitions' TOPIC_AUTHORIZATION_FAILED); unknown topics
UNKNOWN_TOPIC_OR_PARTITION. `topics` null: every topic the group has state for (the
authorized ones). A partition without state answers start offset -1. v1 adds the lag."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize
from wherry.server.share_offsets import PartitionOffset, describe_offsets, find_group

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _part(p: PartitionOffset) -> dict[str, Any]:
    return {
        "partition_index": p.partition,
        "start_offset": p.start_offset,
        "leader_epoch": p.leader_epoch,
        "lag": p.lag,
        "error_code": p.error_code,
        "error_message": AUTHORIZATION_MESSAGES.get(p.error_code),
    }


async def _group(broker: BrokerServices, g: Any) -> dict[str, Any]:
    group_id = g.group_id
    if not authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        code = ErrorCode.group_authorization_failed
        return {"group_id": group_id, "topics": [], "error_code": code,
                "error_message": AUTHORIZATION_MESSAGES[code]}
    cache = broker.cache
    # Topics named: the unauthorized ones answer whatever happens to the group (KafkaApis).
    denied: list[dict[str, Any]] = []
    named: list[tuple[str, list[int]]] = []
    for t in g.topics or ():
        if authorize(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name):
            named.append((t.topic_name, list(t.partitions)))
        else:
            code = ErrorCode.topic_authorization_failed
            denied.append({"topic_name": t.topic_name, "topic_id": cache.topic_id(t.topic_name),
                           "partitions": [_part(PartitionOffset(p, error_code=code))
                                          for p in t.partitions]})
    err, group = find_group(broker.shares, group_id)
    if group is None:
        if err == ErrorCode.coordinator_not_available:
            broker.groups.ensure_offsets_topic()
        return {"group_id": group_id, "topics": denied, "error_code": err,
                "error_message": None}
    wanted = named
    if g.topics is None:
        for topic_id, (_n, held) in sorted(group.state_topics.items(), key=lambda x: str(x[0])):
            name = cache.topic_name(topic_id)
            if name is not None and authorize(
                broker, AclOperation.DESCRIBE, ResourceType.TOPIC, name
            ):
                wanted.append((name, sorted(held)))
    topics = list(denied)
    for name, parts in wanted:
        tid = cache.topic_id(name)
        if tid is None:
            answers = [PartitionOffset(p, error_code=ErrorCode.unknown_topic_or_partition)
                       for p in parts]
        else:
            count = len(cache.partitions(name))
            known = [p for p in parts if 0 <= p < count]
            by_p = {a.partition: a for a in await describe_offsets(
                broker.shares, group, name, tid, known)}
            answers = [by_p.get(p) or PartitionOffset(
                p, error_code=ErrorCode.unknown_topic_or_partition) for p in parts]
        topics.append({"topic_name": name, "topic_id": tid,
                       "partitions": [_part(a) for a in answers]})
    return {"group_id": group_id, "topics": topics, "error_code": ErrorCode.none,
            "error_message": None}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    return {"throttle_time": 0, "groups": [await _group(broker, g) for g in req.body.groups]}
