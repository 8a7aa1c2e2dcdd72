"""Produce (key 0): validate, append through the replica manager, answer per acks (SPEC P1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.records import OFFSETS_TOPIC
from wherry.protocol.codec import duration_ms
from wherry.replication.delayed import ProducePartitionStatus
from wherry.server.handlers.topic_keys import TopicKey, resolve_topic, topic_responses
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


ADMIN_CLIENT_ID = "__admin_client"  # Kafka lets this client id write internal topics


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any] | None:
    body = req.body
    acks = body.acks
    cache = broker.cache
    entries: dict[TopicPartition, bytes | None] = {}
    # (response topic key, partition) → fixed error, for partitions never sent to the log
    errors: dict[tuple[TopicKey, int], ErrorCode] = {}
    order: list[tuple[TopicKey, str | None, int]] = []
    for t in body.topic_data:
        key, name = resolve_topic(cache, getattr(t, "name", None), getattr(t, "topic_id", None))
        for p in t.partition_data:
            order.append((key, name, p.index))
            if acks not in (-1, 0, 1):
                errors[(key, p.index)] = ErrorCode.invalid_required_acks
            elif name is None:
                errors[(key, p.index)] = ErrorCode.unknown_topic_id
            elif cache.partition(name, p.index) is None:
                errors[(key, p.index)] = ErrorCode.unknown_topic_or_partition
            elif name == OFFSETS_TOPIC and req.client_id != ADMIN_CLIENT_ID:
                # Kafka: "Cannot append to internal topic" (only the coordinator writes it).
                errors[(key, p.index)] = ErrorCode.invalid_topic_exception
            elif broker.replica_manager.get_partition(TopicPartition(name, p.index)) is None:
                # The partition exists but has no replica here: the client's metadata is
                # stale (Kafka's ReplicaManager.getPartitionOrError).
                errors[(key, p.index)] = ErrorCode.not_leader_or_follower
            else:
                entries[TopicPartition(name, p.index)] = p.records

    statuses: Mapping[TopicPartition, ProducePartitionStatus] = {}
    if entries:
        statuses = await broker.node.append(
            entries, required_acks=acks, timeout_ms=duration_ms(body.timeout)
        )

    if acks == 0:
        if errors or any(s.error_code != ErrorCode.none for s in statuses.values()):
            # Kafka closes the connection so an acks=0 client notices the failure.
            raise CloseConnection("acks=0 produce request failed")
        return None

    topics: dict[TopicKey, list[dict[str, Any]]] = {}
    for key, name, index in order:
        err = errors.get((key, index))
        if err is not None or name is None:
            part: dict[str, Any] = {
                "index": index,
                "error_code": err or ErrorCode.unknown_topic_id,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
            }
        else:
            s = statuses[TopicPartition(name, index)]
            part = {
                "index": index,
                "error_code": s.error_code,
                "base_offset": s.base_offset,
                "log_append_time": s.log_append_time_ms,
                "log_start_offset": s.log_start_offset,
                "error_message": s.error_message if s.error_code else None,
            }
        topics.setdefault(key, []).append(part)
    return {
        "responses": topic_responses(
            topics, name_field="name", partitions_field="partition_responses", no_topic_id=None
        ),
        "throttle_time": 0,
    }
