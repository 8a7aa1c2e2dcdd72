"""Fetch (key 1) for consumers and followers (SPEC H9, R11).

Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells
clients to send full fetch requests; a request naming an unknown session gets
FETCH_SESSION_ID_NOT_FOUND as the protocol prescribes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import duration_ms
from wherry.replication.replica_manager import FetchPartition, FetchResult
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize_cluster, authorized_names
from wherry.server.handlers.topic_keys import TopicKey, resolve_topic, topic_responses

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

_ZERO_UUID = uuid.UUID(int=0)


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    session_id = getattr(body, "session_id", 0)
    if session_id != 0:
        return {
            "error_code": ErrorCode.fetch_session_id_not_found,
            "session_id": 0,
            "responses": [],
            "throttle_time": 0,
        }
    replica_state = getattr(body, "replica_state", None)
    replica_id = (
        replica_state.replica_id if replica_state is not None else getattr(body, "replica_id", -1)
    )
    replica_epoch = (
        replica_state.replica_epoch
        if replica_state is not None
        else getattr(body, "replica_epoch", -1)
    )
    cache = broker.cache
    resolved = [
        (t, *resolve_topic(cache, getattr(t, "topic", None), getattr(t, "topic_id", None)))
        for t in body.topics
    ]
    # Kafka: a follower (replica id >= 0) needs CLUSTER_ACTION on the cluster, else every
    # partition is refused; consumers, the debugging one (-2) included, READ on each topic.
    if replica_id >= 0:
        follower_ok = authorize_cluster(broker, AclOperation.CLUSTER_ACTION)
        readable = {n for _, _, n in resolved if n} if follower_ok else set()
    else:
        follower_ok = True
        readable = authorized_names(
            broker, AclOperation.READ, ResourceType.TOPIC, (n for _, _, n in resolved if n)
        )
    wanted: list[FetchPartition] = []
    # Response skeleton in request order: (topic key, name or None, partition)
    order: list[tuple[TopicKey, str | None, int]] = []
    denied: set[tuple[TopicKey, int]] = set()
    for t, key, name in resolved:
        for p in t.partitions:
            order.append((key, name, p.partition))
            if not follower_ok or (name is not None and name not in readable):
                denied.add((key, p.partition))
            elif name is not None:
                wanted.append(
                    FetchPartition(
                        TopicPartition(name, p.partition),
                        p.fetch_offset,
                        p.partition_max_bytes,
                        getattr(p, "current_leader_epoch", -1),
                        getattr(p, "log_start_offset", -1),
                    )
                )

    result: FetchResult = {}
    if wanted:
        result = await broker.node.fetch(
            wanted,
            replica_id=replica_id,
            replica_epoch=replica_epoch,
            max_wait_ms=duration_ms(body.max_wait),
            min_bytes=body.min_bytes,
            max_bytes=getattr(body, "max_bytes", 0x7FFFFFFF),
            isolation_level=getattr(body, "isolation_level", 0),
            zero_copy=True,  # records as file regions: network.py sends them from the files
        )

    topics: dict[TopicKey, list[dict[str, Any]]] = {}
    for key, name, index in order:
        r = None
        if name is not None and (key, index) not in denied:
            r = result.get(TopicPartition(name, index))
        if (
            r is not None
            and r.error_code == ErrorCode.unknown_topic_or_partition
            and name is not None
            and cache.partition(name, index) is not None
        ):
            # The partition exists but has no replica here: the client's metadata is stale
            # (Kafka's ReplicaManager.getPartitionOrError).
            r.error_code = ErrorCode.not_leader_or_follower
        if r is None:
            if (key, index) in denied:
                code = ErrorCode.topic_authorization_failed
            elif name is None:
                code = ErrorCode.unknown_topic_id
            else:
                code = ErrorCode.unknown_topic_or_partition
            part: dict[str, Any] = {
                "partition_index": index,
                "error_code": code,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "preferred_read_replica": -1,
                "records": None,
            }
        else:
            part = {
                "partition_index": index,
                "error_code": r.error_code,
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.last_stable_offset,
                "log_start_offset": r.log_start_offset,
                "aborted_transactions": (
                    None
                    if r.aborted_transactions is None
                    else [
                        {"producer_id": pid, "first_offset": first}
                        for pid, first in r.aborted_transactions
                    ]
                ),
                "preferred_read_replica": -1,
                "records": r.records,
            }
        topics.setdefault(key, []).append(part)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": topic_responses(
            topics, name_field="topic", partitions_field="partitions", no_topic_id=_ZERO_UUID
        ),
    }
