"""DescribeTransactions (key 65): the state of transactional ids this broker coordinates.
Kafka: DESCRIBE on each transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the
partitions listed are those of topics the caller may DESCRIBE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _describe(broker: BrokerServices, tid: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "transactional_id": tid,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": 0,  # the schema default, as Kafka leaves it on errors
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }
    if not authorize(broker, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
        out["error_code"] = ErrorCode.transactional_id_authorization_failed
        return out
    err, txn = broker.transactions.coordinator.describe(tid)
    if txn is None:
        out["error_code"] = err
        return out
    topics: dict[str, list[int]] = {}
    for tp in sorted(txn.partitions):
        if authorize(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, tp.topic):
            topics.setdefault(tp.topic, []).append(tp.partition)
    out.update(
        transaction_state=str(txn.state),
        transaction_timeout=txn.timeout_ms,
        transaction_start_time=txn.start_timestamp_ms,
        producer_id=txn.producer_id,
        producer_epoch=txn.producer_epoch,
        topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()],
    )
    return out


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    return {
        "throttle_time": 0,
        "transaction_states": [_describe(broker, t) for t in req.body.transactional_ids],
    }
