"""WriteTxnMarkers (key 27): the transaction coordinator's COMMIT/ABORT markers, written by
the partition leaders (Kafka's KafkaApis.handleWriteTxnMarkersRequest).

* CLUSTER_ACTION on the cluster, else every partition of every marker gets
  CLUSTER_AUTHORIZATION_FAILED.
* Per marker (`coordinator/txn_markers.write_txn_marker`, which the simulation runs too, and
  which the coordinator runs in process for its own broker's partitions), a
  partition without a local replica gets UNKNOWN_TOPIC_OR_PARTITION; the others
  get one control batch (`build_control_batch`: producer id/epoch, coordinator epoch) appended
  as the leader with acks=all semantics (`min.insync.replicas` checked, answer once the ISR has
  it, `request.timeout.ms`). Errors are the append's: NOT_LEADER_OR_FOLLOWER (a follower),
  NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH (an epoch below the producer's last one),
  TRANSACTION_COORDINATOR_FENCED (a coordinator epoch below the last marker's), REQUEST_TIMED_OUT.
* A partition leader's check of the producer's transaction in flight on those partitions is
  void from then on (`coordinator/txn_verification.py`'s guards).
* Markers on `__consumer_offsets` partitions written without error complete the group
  coordinator's pending transactional offsets of the producer (commit: they become the
  committed offsets; abort: dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordinator.txn_markers import marker_answer, write_txn_marker
from wherry.security.acl import AclOperation
from wherry.server.authz import authorize_cluster

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

DEFAULT_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default


async def _write_marker(
    broker: BrokerServices, marker: Any, timeout_ms: int
) -> dict[TopicPartition, ErrorCode]:
    def on_offsets(producer_id: int, partitions: list[int], commit: bool) -> None:
        # The group coordinator is looked up only for markers on `__consumer_offsets`.
        broker.groups.coordinator.on_transaction_completed(producer_id, partitions, commit)

    return await write_txn_marker(
        broker.node,
        marker,
        broker.clock.now_ms(),
        timeout_ms,
        on_marker=broker.transactions.verifier.guards.marker_written,
        on_offsets=on_offsets,
    )


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    if not authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        return {
            "markers": [
                marker_answer(
                    m.producer_id,
                    {
                        TopicPartition(t.name, p): ErrorCode.cluster_authorization_failed
                        for t in m.topics
                        for p in t.partition_indexes
                    },
                )
                for m in body.markers
            ]
        }
    timeout_ms = DEFAULT_TIMEOUT_MS  # Kafka: request.timeout.ms
    results = await asyncio.gather(*(_write_marker(broker, m, timeout_ms) for m in body.markers))
    return {
        "markers": [
            marker_answer(m.producer_id, errors)
            for m, errors in zip(body.markers, results, strict=True)
        ]
    }
