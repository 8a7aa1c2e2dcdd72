"""Produce (key 0): validate, append through the replica manager, answer per acks.

A transactional request's partitions are first added to its transaction (transactions v2,
v12+) or verified to be in it (older versions) at the coordinator (`txn_checks.py`); the
partitions that fail get its error, the others are appended."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordinator.txn_verification import produce_error
from wherry.group.records import OFFSETS_TOPIC
from wherry.protocol.codec import duration_ms
from wherry.protocol.records import first_batch_is_transactional
from wherry.replication.delayed import ProducePartitionStatus
from wherry.runtime.parking import Parked
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorized_names
from wherry.server.handlers.topic_keys import TopicKey, resolve_topic, topic_responses
from wherry.server.handlers.txn_checks import (
    FIRST_V2_PRODUCE_VERSION,
    check_partitions,
    transactional_producers,
)
from wherry.server.network import CloseConnection

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


ADMIN_CLIENT_ID = "__admin_client"  # Kafka lets this client id write internal topics


def _has_transactional_records(body: Any) -> bool:
    """Kafka's ProduceRequest.hasTransactionalRecords: the first batch of any partition is
    transactional (unreadable records are left to validation)."""
    for t in body.topic_data:
        for p in t.partition_data:
            records = p.records
            if records is not None and first_batch_is_transactional(records):
                return True
    return False


def _all_failed(body: Any, cache: Any, code: ErrorCode) -> Mapping[str, Any]:
    topics: dict[TopicKey, list[dict[str, Any]]] = {}
    for t in body.topic_data:
        key, _ = resolve_topic(cache, getattr(t, "name", None), getattr(t, "topic_id", None))
        for p in t.partition_data:
            topics.setdefault(key, []).append(
                {
                    "index": p.index,
                    "error_code": code,
                    "base_offset": -1,
                    "log_append_time": -1,
                    "log_start_offset": -1,
                }
            )
    return {
        "responses": topic_responses(
            topics, name_field="name", partitions_field="partition_responses", no_topic_id=None
        ),
        "throttle_time": 0,
    }


async def handle(
    broker: BrokerServices, req: Request
) -> Mapping[str, Any] | Parked[Mapping[str, Any]] | None:
    """The records are appended when this returns; an acks=all answer still waiting for
    the ISR comes back `Parked`, so the connection may go on with its next request."""
    body = req.body
    acks = body.acks
    cache = broker.cache
    tid: str | None = None
    if _has_transactional_records(body):
        # Kafka: WRITE on the transactional id, else the whole request fails.
        tid = getattr(body, "transactional_id", None)
        if tid is None or not authorize(
            broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid
        ):
            if acks == 0:
                raise CloseConnection("acks=0 produce request failed")
            return _all_failed(body, cache, ErrorCode.transactional_id_authorization_failed)
    resolved = [
        (t, *resolve_topic(cache, getattr(t, "name", None), getattr(t, "topic_id", None)))
        for t in body.topic_data
    ]
    writable = authorized_names(
        broker, AclOperation.WRITE, ResourceType.TOPIC, (n for _, _, n in resolved if n)
    )
    entries: dict[TopicPartition, bytes | None] = {}
    # (response topic key, partition) → fixed error, for partitions never sent to the log
    errors: dict[tuple[TopicKey, int], ErrorCode] = {}
    # per partition in request order: its topic key, its index, where its status will be
    order: list[tuple[TopicKey, int, TopicPartition | None]] = []
    replica_manager = broker.replica_manager
    for t, key, name in resolved:
        for p in t.partition_data:
            index = p.index
            tp = None
            if name is not None and name not in writable:
                # Before any existence check: unauthorized topics are not disclosed.
                errors[(key, index)] = ErrorCode.topic_authorization_failed
            elif acks not in (-1, 0, 1):
                errors[(key, index)] = ErrorCode.invalid_required_acks
            elif name is None:
                errors[(key, index)] = ErrorCode.unknown_topic_id
            elif cache.partition(name, index) is None:
                errors[(key, index)] = ErrorCode.unknown_topic_or_partition
            elif name == OFFSETS_TOPIC and req.client_id != ADMIN_CLIENT_ID:
                # Kafka: "Cannot append to internal topic" (only the coordinator writes it).
                errors[(key, index)] = ErrorCode.invalid_topic_exception
            else:
                tp = TopicPartition(name, index)
                if replica_manager.get_partition(tp) is None:
                    # The partition exists but has no replica here: the client's metadata
                    # is stale, or its log dir failed (Kafka's
                    # ReplicaManager.getPartitionOrError).
                    errors[(key, index)] = replica_manager.missing_partition_error(
                        tp, ErrorCode.not_leader_or_follower
                    )
                else:
                    entries[tp] = p.records
            order.append((key, index, tp))

    if tid is not None and entries:
        keys = {name: key for _, key, name in resolved if name is not None}
        for tp, err in (await _transaction_checks(broker, tid, entries, req.api_version)).items():
            del entries[tp]
            errors[(keys[tp.topic], tp.partition)] = err
    statuses: Mapping[TopicPartition, ProducePartitionStatus] = {}
    if entries:
        appended = broker.node.start_append(
            entries, required_acks=acks, timeout_ms=duration_ms(body.timeout)
        )
        _release_records(entries)
        if not appended.done() and acks == -1:
            return Parked(_answer_when_replicated(appended, order, errors))
        statuses = await appended

    if acks == 0:
        if errors or any(s.error_code != ErrorCode.none for s in statuses.values()):
            # Kafka closes the connection so an acks=0 client notices the failure.
            raise CloseConnection("acks=0 produce request failed")
        return None
    return _response(order, errors, statuses)


def _release_records(entries: Mapping[TopicPartition, object]) -> None:
    """The records are in the log: let go of their views of the request's receive buffer
    (Kafka clears a produce request's records once appended), so the connection reuses that
    buffer for its next requests while this one's answer waits for the ISR (acks=all), rather
    than taking fresh memory, a page fault per 4 KiB, for each request."""
    for records in entries.values():
        if type(records) is memoryview:
            try:
                records.release()
            except BufferError:  # something still reads it: it goes when that does
                pass


async def _transaction_checks(
    broker: BrokerServices,
    tid: str,
    entries: Mapping[TopicPartition, bytes | None],
    version: int,
) -> dict[TopicPartition, ErrorCode]:
    """The partitions the transaction's coordinator refused, with the Produce error."""
    sequences: dict[TopicPartition, int] = {}
    failed = await check_partitions(
        broker,
        tid,
        transactional_producers(entries, sequences),
        add=version >= FIRST_V2_PRODUCE_VERSION,
        abortable_known=version >= 11,
        sequences=sequences,
    )
    return {tp: produce_error(err) for tp, err in failed.items()}


async def _answer_when_replicated(
    appended: asyncio.Future[Mapping[TopicPartition, ProducePartitionStatus]],
    order: list[tuple[TopicKey, int, TopicPartition | None]],
    errors: dict[tuple[TopicKey, int], ErrorCode],
) -> Mapping[str, Any]:
    return _response(order, errors, await appended)


def _response(
    order: list[tuple[TopicKey, int, TopicPartition | None]],
    errors: dict[tuple[TopicKey, int], ErrorCode],
    statuses: Mapping[TopicPartition, ProducePartitionStatus],
) -> Mapping[str, Any]:
    topics: dict[TopicKey, list[dict[str, Any]]] = {}
    for key, index, tp in order:
        err = errors.get((key, index)) if errors else None
        if err is not None or tp is None:
            part: dict[str, Any] = {
                "index": index,
                "error_code": err or ErrorCode.unknown_topic_id,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
            }
        else:
            s = statuses[tp]
            code = s.error_code
            part = {
                "index": index,
                "error_code": code,
                "base_offset": s.base_offset,
                "log_append_time": s.log_append_time_ms,
                "log_start_offset": s.log_start_offset,
                "error_message": s.error_message if code else None,
                "record_errors": [
                    {"batch_index": i, "batch_index_error_message": msg}
                    for i, msg in s.record_errors
                ]
                if s.record_errors
                else [],
            }
        parts = topics.get(key)
        if parts is None:
            topics[key] = [part]
        else:
            parts.append(part)
    return {
        "responses": topic_responses(
            topics, name_field="name", partitions_field="partition_responses", no_topic_id=None
        ),
        "throttle_time": 0,
    }
