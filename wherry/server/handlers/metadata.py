"""Metadata (key 3), answered from the metadata cache.

Every broker answers alike: the cache holds what the controller's UpdateMetadata requests
said (live brokers with their advertised endpoints, and per partition the leader, leader
epoch, ISR, replicas and offline replicas), so any broker serves as a bootstrap server.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.group.records import OFFSETS_TOPIC
from wherry.protocol.metadata_response import TopicParts
from wherry.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from wherry.server.admin import AdminError, validate_topic_name
from wherry.server.authz import (
    authorize,
    authorize_cluster,
    authorized_names,
    authorized_operations,
    authorized_operations_field,
    current_session,
)

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.replication.metadata_cache import MetadataCache
    from wherry.server.services import BrokerServices

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_ZERO_UUID = uuid.UUID(int=0)

# Each broker's topics as written into its answers, kept while the topic does not change
# (a large cluster's all-topics answer is then mostly bytes already written).
_PARTS: weakref.WeakKeyDictionary[MetadataCache, TopicParts] = weakref.WeakKeyDictionary()


def _topic_parts(cache: MetadataCache) -> TopicParts:
    """The broker's kept topic parts. Those of deleted topics are dropped once the parts
    number more than twice the topics (and 64): a bound, with no pass per request."""
    parts = _PARTS.get(cache)
    if parts is None:
        parts = _PARTS[cache] = TopicParts()
    elif len(parts) > 2 * cache.topic_count() + 64:
        parts.keep_only(cache.contains_topic)
    return parts


def _topic_part(
    broker: BrokerServices, parts: TopicParts, name: str, strict: bool, version: int
) -> bytes:
    """`topic_metadata(broker, name, strict=strict)` as written into a v`version` answer."""
    return parts.get(
        name,
        broker.cache.topic_stamp(name),
        version,
        strict,
        lambda: topic_metadata(broker, name, strict=strict),
    )


def topic_metadata(broker: BrokerServices, name: str, *, strict: bool = False) -> dict[str, Any]:
    """A topic's partitions as the metadata cache has them (Kafka's ZK-mode MetadataCache).

    A leader that is not a live broker is reported as -1 with LEADER_NOT_AVAILABLE. With
    `strict` (Metadata v0: "errorUnavailableEndpoints") replicas and ISR members that are not
    live are left out and the partition gets REPLICA_NOT_AVAILABLE; later versions list every
    replica and name the dead ones in `offline_replicas`.
    """
    cache = broker.cache
    alive = set(cache.brokers)
    partitions = []
    for p, st in sorted(cache.partitions(name).items()):
        replicas = [r for r in st.replicas if not strict or r in alive]
        isr = [r for r in st.isr if not strict or r in alive]
        if st.leader not in alive:
            err = ErrorCode.leader_not_available
        elif len(replicas) < len(st.replicas) or len(isr) < len(st.isr):
            err = ErrorCode.replica_not_available
        else:
            err = ErrorCode.none
        partitions.append(
            {
                "error_code": err,
                "partition_index": p,
                "leader_id": st.leader if st.leader in alive else -1,
                "leader_epoch": st.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": isr,
                "offline_replicas": list(st.offline_replicas),
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": cache.topic_id(name) or _ZERO_UUID,
        "is_internal": name == OFFSETS_TOPIC,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _error_topic(
    name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None
) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or _ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    cache = broker.cache
    requested = body.topics
    v = req.api_version
    # v0: an empty list means all topics; v1+: null means all, empty means none.
    all_topics = requested is None or (v == 0 and not requested)
    allow_auto = getattr(body, "allow_auto_topic_creation", True)
    strict = v == 0
    # Kafka: DESCRIBE on each topic. All-topics requests silently leave out the others; a
    # named topic without it gets TOPIC_AUTHORIZATION_FAILED (named by id: its id, no name),
    # whether it exists or not. `described` are the answers of the topics that may be seen.
    # Topics already written (bytes) when their authorized operations are not asked for.
    with_operations = bool(getattr(body, "include_topic_authorized_operations", False))
    described: list[dict[str, Any]] = []
    topics: list[dict[str, Any] | bytes] = []
    if all_topics:
        names = cache.topics()
        allowed = authorized_names(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if with_operations:
            described = [topic_metadata(broker, t, strict=strict) for t in names if t in allowed]
            topics = list(described)
        else:
            parts = _topic_parts(cache)
            topics = [_topic_part(broker, parts, t, strict, v) for t in names if t in allowed]
    else:
        for t in requested:
            name = getattr(t, "name", None)
            tid = getattr(t, "topic_id", None)
            by_id = name is None
            if name is None:
                if tid is None or tid == _ZERO_UUID:
                    topics.append(_error_topic(None, ErrorCode.invalid_request))
                    continue
                name = cache.topic_name(tid)
                if name is None:
                    topics.append(_error_topic(None, ErrorCode.unknown_topic_id, tid))
                    continue
            if not authorize(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                denied = ErrorCode.topic_authorization_failed
                topics.append(
                    _error_topic(None, denied, tid) if by_id else _error_topic(name, denied)
                )
                continue
            if cache.contains_topic(name) and not with_operations:
                topics.append(_topic_part(broker, _topic_parts(cache), name, strict, v))
                continue
            if cache.contains_topic(name):
                answer = topic_metadata(broker, name, strict=strict)
            else:
                answer = await _unknown_topic(broker, name, allow_auto)
            topics.append(answer)
            if answer["error_code"] != ErrorCode.topic_authorization_failed:
                described.append(answer)
    if with_operations:
        for answer in described:
            answer["topic_authorized_operations"] = authorized_operations(
                broker, ResourceType.TOPIC, answer["name"]
            )
    brokers = [
        {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in cache.alive_brokers(current_session().listener)
    ]
    return {
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": broker.cluster_id,
        "controller_id": cache.controller_id if cache.controller_id is not None else -1,
        "topics": topics,
        # v8-v10 only (Kafka's DescribeCluster replaced it).
        "cluster_authorized_operations": authorized_operations_field(
            broker,
            8 <= v <= 10 and getattr(body, "include_cluster_authorized_operations", False),
            ResourceType.CLUSTER,
            CLUSTER_NAME,
            requires=AclOperation.DESCRIBE,
        ),
        "error_code": ErrorCode.none,
    }


async def _unknown_topic(broker: BrokerServices, name: str, allow_auto: bool) -> dict[str, Any]:
    auto = allow_auto and broker.config.auto_create_topics_enable
    if auto and not (
        authorize_cluster(broker, AclOperation.CREATE)
        or authorize(broker, AclOperation.CREATE, ResourceType.TOPIC, name)
    ):
        # Kafka: auto-creation needs CREATE on the cluster or on the topic.
        return _error_topic(name, ErrorCode.topic_authorization_failed)
    try:
        validate_topic_name(name)
    except AdminError:
        return _error_topic(name, ErrorCode.invalid_topic_exception)
    if not auto:
        return _error_topic(name, ErrorCode.unknown_topic_or_partition)
    if name == OFFSETS_TOPIC:
        # Internal: created with its own partition count, replication factor and configs.
        broker.groups.ensure_offsets_topic()
        return _error_topic(name, ErrorCode.leader_not_available)
    try:
        await broker.admin.create_topic(name)
        log.info("Auto-created topic %s", name)
    except AdminError as e:
        if e.error_code != ErrorCode.topic_already_exists:
            return _error_topic(name, e.error_code)
    # The controller initializes it asynchronously; clients retry (LEADER_NOT_AVAILABLE).
    return _error_topic(name, ErrorCode.leader_not_available)
