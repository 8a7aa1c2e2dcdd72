"""DescribeTopicPartitions (key 75, KIP-966): topics and their partitions, a page at a time.

As Kafka's `DescribeTopicPartitionsRequestHandler` with `getTopicMetadataForDescribeTopicResponse`:

* the topics asked for (an empty list means every topic), those before the cursor's topic
  left out, sorted by name; the cursor's topic must be among the named ones (else every named
  topic gets INVALID_REQUEST, Kafka's error response for its InvalidRequestException);
* DESCRIBE on each topic: a named topic without it gets TOPIC_AUTHORIZATION_FAILED (zero id,
  after the others) whether it exists or not; an all-topics request leaves it out;
* a page holds at most `min(2000, response_partition_limit)` partitions; the cursor's topic
  starts at the cursor's partition (when that topic may be described), every other at 0. A
  topic cut short ends the page with `next_cursor` = that topic and its first partition left
  out; a full page with topics left gives `next_cursor` = the next topic, partition 0;
* a named topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
  for an illegal name) in its sorted place, using none of the page;
* per partition: leader (-1 when not a live broker), leader epoch, replicas, ISR, offline
  replicas, and empty eligible-leader-replica lists (no ELR outside KRaft, KIP-966);
* `topic_authorized_operations` on every topic the caller may describe.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.internal_topics import INTERNAL_TOPICS
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.admin import AdminError, validate_topic_name
from wherry.server.authz import AUTHORIZED_OPERATIONS_OMITTED, authorize, authorized_operations

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

# Kafka's `max.request.partition.size.limit` default: the most partitions one page holds.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
# Kafka's Topic.isInternal (4.x adds the share-group state topic).
_ZERO_UUID = uuid.UUID(int=0)


def _error_topic(broker: BrokerServices, name: str, code: ErrorCode) -> dict[str, Any]:
    topic_id = _ZERO_UUID
    if code != ErrorCode.topic_authorization_failed:
        topic_id = broker.cache.topic_id(name) or _ZERO_UUID
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": name in INTERNAL_TOPICS and code != ErrorCode.topic_authorization_failed,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _page_of_topic(
    broker: BrokerServices, name: str, start: int, room: int, alive: set[int]
) -> tuple[dict[str, Any], int]:
    """`name`'s partitions `start` .. `start + room - 1` and the first one left out (-1: none)."""
    states = broker.cache.partitions(name)
    count = len(states)
    upper = min(count, start + room)
    nxt = upper if upper < count else -1
    partitions: list[dict[str, Any]] = []
    for index in range(start, upper):
        st = states.get(index)
        if st is None:
            continue
        partitions.append(
            {
                "error_code": ErrorCode.none,
                "partition_index": index,
                "leader_id": st.leader if st.leader in alive else -1,
                "leader_epoch": st.leader_epoch,
                "replica_nodes": list(st.replicas),
                "isr_nodes": list(st.isr),
                "eligible_leader_replicas": [],
                "last_known_elr": [],
                "offline_replicas": list(st.offline_replicas),
            }
        )
    topic = {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": broker.cache.topic_id(name) or _ZERO_UUID,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    return topic, nxt


def _invalid(req: Request) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "topics": [
            {
                "error_code": ErrorCode.invalid_request,
                "name": t.name,
                "topic_id": _ZERO_UUID,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
            for t in req.body.topics
        ],
        "next_cursor": None,
    }


def _known_error(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except AdminError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    cache = broker.cache
    cursor = body.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not body.topics
    if fetch_all:
        names = {t for t in cache.topics() if t >= cursor_topic}
    else:
        names = {t.name for t in body.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid(req)

    denied: list[dict[str, Any]] = []
    allowed: list[str] = []
    for name in sorted(names):
        if authorize(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            allowed.append(name)
        elif not fetch_all:
            denied.append(_error_topic(broker, name, ErrorCode.topic_authorization_failed))

    first_partition = 0
    if cursor is not None and cursor_topic in allowed:
        first_partition = int(cursor.partition_index)
    remaining = min(MAX_REQUEST_PARTITION_SIZE_LIMIT, int(body.response_partition_limit))
    alive = {b.broker_id for b in cache.alive_brokers()}
    topics: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    for name in allowed:
        if remaining == 0:
            # The page is full: the next page begins at this topic (known or not).
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if remaining < 0:
            continue
        if not cache.contains_topic(name):
            if not fetch_all:
                topics.append(_error_topic(broker, name, _known_error(name)))
            continue
        start = first_partition if name == cursor_topic else 0
        topic, nxt = _page_of_topic(broker, name, start, remaining, alive)
        topics.append(topic)
        if nxt != -1:
            next_cursor = {"topic_name": name, "partition_index": nxt}
            break
        remaining -= len(topic["partitions"])
    for topic in topics:
        topic["topic_authorized_operations"] = authorized_operations(
            broker, ResourceType.TOPIC, topic["name"]
        )
    return {"throttle_time": 0, "topics": topics + denied, "next_cursor": next_cursor}
