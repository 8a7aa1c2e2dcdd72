"""AddPartitionsToTxn (key 24): partitions join a transaction.

v0-3 (clients): Kafka's KafkaApis checks WRITE on the transactional id (else every partition
gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic (TOPIC_AUTHORIZATION_FAILED)
and that each partition exists (UNKNOWN_TOPIC_OR_PARTITION); when any partition fails so, the
others get OPERATION_NOT_ATTEMPTED and nothing is added. v4+ (brokers, KIP-890): batched
transactions, CLUSTER_ACTION on the cluster; `verify_only` ones are checked, not added; the
others come from a partition leader adding a transactions v2 client's partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.internal_topics import INTERNAL_TOPICS
from wherry.common.topic_partition import TopicPartition
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorize_cluster
from wherry.server.handlers.txn_common import client_error

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _partitions(topics: Iterable[Any]) -> list[TopicPartition]:
    return [TopicPartition(t.name, int(p)) for t in topics for p in t.partitions]


def _results(errors: Mapping[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, err in errors.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "partition_error_code": err}
        )
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


async def _add(
    broker: BrokerServices,
    tid: str,
    pid: int,
    epoch: int,
    partitions: list[TopicPartition],
    version: int,
    *,
    check_txn_id: bool,
    transaction_version: int = 0,
) -> dict[TopicPartition, ErrorCode]:
    if check_txn_id and not authorize(
        broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid
    ):
        return {tp: ErrorCode.transactional_id_authorization_failed for tp in partitions}
    failed: dict[TopicPartition, ErrorCode] = {}
    allowed: dict[str, bool] = {}
    for tp in partitions:
        if tp.topic not in allowed:  # Kafka checks no ACL of internal topics here
            allowed[tp.topic] = tp.topic in INTERNAL_TOPICS or authorize(
                broker, AclOperation.WRITE, ResourceType.TOPIC, tp.topic
            )
        if not allowed[tp.topic]:
            failed[tp] = ErrorCode.topic_authorization_failed
        elif broker.cache.partition(tp.topic, tp.partition) is None:
            failed[tp] = ErrorCode.unknown_topic_or_partition
    if failed:
        return {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in partitions}
    coordinator = broker.transactions.coordinator
    def start(respond: Callable[[ErrorCode], None]) -> None:
        coordinator.add_partitions(
            tid, pid, epoch, partitions, broker.clock.now_ms(), respond, transaction_version
        )

    err = client_error(await answer_of(start), version)
    return {tp: err for tp in partitions}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    if req.api_version <= 3:
        errors = await _add(
            broker,
            body.v3_and_below_transactional_id,
            int(body.v3_and_below_producer_id),
            int(body.v3_and_below_producer_epoch),
            _partitions(body.v3_and_below_topics),
            req.api_version,
            check_txn_id=True,
        )
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _results(errors)}
    if not authorize_cluster(broker, AclOperation.CLUSTER_ACTION):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results_by_transaction": [],
        }
    coordinator = broker.transactions.coordinator
    out = []
    for txn in body.transactions:
        tps = _partitions(txn.topics)
        pid, epoch = int(txn.producer_id), int(txn.producer_epoch)
        if txn.verify_only:
            verified = coordinator.verify_partitions(txn.transactional_id, pid, epoch, tps)
            errors = (
                {tp: verified for tp in tps} if isinstance(verified, ErrorCode) else verified
            )
        else:
            errors = await _add(
                broker,
                txn.transactional_id,
                pid,
                epoch,
                tps,
                req.api_version,
                check_txn_id=False,
                transaction_version=2,  # only a v2 client's partition leader adds
            )
        out.append({"transactional_id": txn.transactional_id, "topic_results": _results(errors)})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": out}
