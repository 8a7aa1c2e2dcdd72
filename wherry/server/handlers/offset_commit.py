"""OffsetCommit (key 8): store a group's consumed positions in `__consumer_offsets`.

Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID for v10 topic
ids) and are not stored; the rest are checked by the coordinator (member, generation, group
state, metadata size) and answered once the write is acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.group import OffsetAndMetadata, OffsetCommitter
from wherry.protocol.codec import duration_ms
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorized_names
from wherry.server.handlers.topic_keys import TopicKey, topic_responses

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

DEFAULT_RETENTION_TIME = -1


def committed_offset(p: Any, now_ms: int, expire_ms: int | None = None) -> OffsetAndMetadata:
    """What an OffsetCommit or TxnOffsetCommit partition commits at `now_ms`: its offset, its
    leader epoch (-1 in versions without one) and its metadata (null: "")."""
    return OffsetAndMetadata(
        p.committed_offset,
        getattr(p, "committed_leader_epoch", -1),
        p.committed_metadata or "",
        now_ms,
        expire_ms,
    )


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    cache = broker.cache
    now = broker.clock.now_ms()
    retention = duration_ms(getattr(body, "retention_time", DEFAULT_RETENTION_TIME))
    expire = None if retention == DEFAULT_RETENTION_TIME else now + retention
    # (topic key, name or None, partition) in request order
    order: list[tuple[TopicKey, str | None, int]] = []
    errors: dict[tuple[TopicKey, int], ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    resolved: list[tuple[Any, TopicKey, str | None]] = []
    for t in body.topics:
        tid = getattr(t, "topic_id", None)
        if tid is not None:
            resolved.append((t, tid, cache.topic_name(tid)))
        else:
            resolved.append((t, t.name, t.name))
    # Kafka: READ on the group, else every partition fails; then READ on each topic.
    group_ok = authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id)
    readable = authorized_names(
        broker, AclOperation.READ, ResourceType.TOPIC, (n for _, _, n in resolved if n)
    ) if group_ok else set()
    for t, key, name in resolved:
        for p in t.partitions:
            order.append((key, name, p.partition_index))
            if not group_ok:
                errors[(key, p.partition_index)] = ErrorCode.group_authorization_failed
            elif name is None:
                errors[(key, p.partition_index)] = ErrorCode.unknown_topic_id
            elif name not in readable:
                errors[(key, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif cache.partition(name, p.partition_index) is None:
                errors[(key, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[TopicPartition(name, p.partition_index)] = committed_offset(
                    p, now, expire
                )
    results: dict[TopicPartition, ErrorCode] = {}
    if offsets:
        coord = broker.groups.coordinator
        results = await answer_of(
            lambda cb: coord.handle_commit_offsets(
                OffsetCommitter(
                    body.group_id,
                    body.member_id,
                    getattr(body, "group_instance_id", None),
                    body.generation_id_or_member_epoch,
                ),
                offsets,
                cb,
                now,
                api_version=req.api_version,
            ),
        )
    topics: dict[TopicKey, list[dict[str, Any]]] = {}
    for key, name, index in order:
        err = errors.get((key, index))
        if err is None:
            assert name is not None
            err = results.get(TopicPartition(name, index), ErrorCode.unknown_server_error)
        topics.setdefault(key, []).append({"partition_index": index, "error_code": err})
    return {
        "throttle_time": 0,
        "topics": topic_responses(
            topics, name_field="name", partitions_field="partitions", no_topic_id=None
        ),
    }
