"""DescribeProducers (key 61, KIP-664): the producers a replica keeps state for (what
`kafka-transactions.sh describe-producers` and `find-hanging` read): each one's id, epoch, last
sequence and timestamp, coordinator epoch and the first offset of its open transaction (-1 when
none). Any replica answers from its own log, a follower too (the tool's `--broker-id`), as
Kafka's does. Kafka: READ on the topic, else TOPIC_AUTHORIZATION_FAILED; a partition the
cluster does not have answers UNKNOWN_TOPIC_OR_PARTITION, one with no replica on this broker
NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _producers(broker: BrokerServices, tp: TopicPartition, readable: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "partition_index": tp.partition,
        "error_code": ErrorCode.none,
        "error_message": None,
        "active_producers": [],
    }
    rm = broker.replica_manager
    part = rm.get_partition(tp)
    if not readable:
        out["error_code"] = ErrorCode.topic_authorization_failed
    elif broker.cache.partition(tp.topic, tp.partition) is None:
        out["error_code"] = ErrorCode.unknown_topic_or_partition
    elif part is None:  # no replica here (Kafka's getPartitionOrError)
        out["error_code"] = rm.missing_partition_error(tp, ErrorCode.not_leader_or_follower)
    else:
        out["active_producers"] = [
            {
                "producer_id": pid,
                "producer_epoch": entry.producer_epoch,
                "last_sequence": entry.last_seq,
                "last_timestamp": entry.last_timestamp_ms,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_start_offset": entry.current_txn_first_offset,
            }
            for pid, entry in sorted(part.log.producer_state.producers.items())
        ]
    return out


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    readable = authorized_names(
        broker, AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.body.topics)
    )
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    _producers(broker, TopicPartition(t.name, index), t.name in readable)
                    for index in t.partition_indexes
                ],
            }
            for t in req.body.topics
        ],
    }
