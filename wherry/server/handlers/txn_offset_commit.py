"""TxnOffsetCommit (key 28): a transactional producer's consumed offsets (KIP-98, KIP-447).

Kafka's KafkaApis.handleTxnOffsetCommitRequest: WRITE on the transactional id (else every
partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else
GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED) and a known
partition (UNKNOWN_TOPIC_OR_PARTITION). The group coordinator checks the member and generation
(generation -1 with no member id: a producer outside the group's management) and writes the
offsets to `__consumer_offsets` as a transactional batch of the producer; they stay pending,
invisible to OffsetFetch, until WriteTxnMarkers writes the producer's marker there.

Before that, the group's `__consumer_offsets` partition is added to the transaction at its
coordinator for a transactions v2 client (v5+: no AddOffsetsToTxn was sent), or verified to be
in it for an older one (`txn_checks.py`); a refusal is every partition's error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.group import OffsetAndMetadata, OffsetCommitter
from wherry.group.records import OFFSETS_TOPIC
from wherry.group.storage import ProducerIdAndEpoch
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorized_names
from wherry.server.handlers.offset_commit import committed_offset
from wherry.server.handlers.txn_checks import (
    FIRST_V2_TXN_OFFSET_COMMIT_VERSION,
    check_partitions,
)

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _all(body: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code}
                    for p in t.partitions
                ],
            }
            for t in body.topics
        ],
    }


async def _transaction_check(broker: BrokerServices, req: Request) -> ErrorCode | None:
    """The group's offsets partition added to (v5+) or verified in the transaction; the
    coordinator's refusal, or None."""
    body = req.body
    tp = TopicPartition(OFFSETS_TOPIC, broker.groups.coordinator.partition_for(body.group_id))
    failed = await check_partitions(
        broker,
        body.transactional_id,
        {(int(body.producer_id), int(body.producer_epoch)): [tp]},
        add=req.api_version >= FIRST_V2_TXN_OFFSET_COMMIT_VERSION,
        abortable_known=req.api_version >= 4,
    )
    return failed.get(tp)


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    if not authorize(
        broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
    ):
        return _all(body, ErrorCode.transactional_id_authorization_failed)
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _all(body, ErrorCode.group_authorization_failed)
    cache = broker.cache
    now = broker.clock.now_ms()
    readable = authorized_names(
        broker, AclOperation.READ, ResourceType.TOPIC, (t.name for t in body.topics)
    )
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for t in body.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if t.name not in readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif cache.partition(t.name, p.partition_index) is None:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = committed_offset(p, now)
    results: dict[TopicPartition, ErrorCode] = {}
    if offsets and (refused := await _transaction_check(broker, req)) is not None:
        return _all(body, refused)
    if offsets:
        coord = broker.groups.coordinator
        results = await answer_of(
            lambda cb: coord.handle_txn_commit_offsets(
                OffsetCommitter(
                    body.group_id,
                    getattr(body, "member_id", ""),
                    getattr(body, "group_instance_id", None),
                    getattr(body, "generation_id", -1),
                ),
                ProducerIdAndEpoch(body.producer_id, body.producer_epoch),
                offsets,
                cb,
                now,
            )
        )
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": errors.get(
                            TopicPartition(t.name, p.partition_index),
                            results.get(
                                TopicPartition(t.name, p.partition_index),
                                ErrorCode.unknown_server_error,
                            ),
                        ),
                    }
                    for p in t.partitions
                ],
            }
            for t in body.topics
        ],
    }
