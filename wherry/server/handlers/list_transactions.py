"""ListTransactions (key 66): the transactions this broker coordinates, filtered by state,
producer id, duration (v1) and transactional id pattern (v2); only ids the caller may
DESCRIBE are listed (Kafka's KafkaApis)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    err, unknown, txns = broker.transactions.coordinator.list_transactions(
        list(body.state_filters),
        [int(p) for p in body.producer_id_filters],
        now_ms=broker.clock.now_ms(),
        duration_ms=int(getattr(body, "duration_filter", -1)),
        pattern=getattr(body, "transactional_id_pattern", None),
    )
    return {
        "throttle_time": 0,
        "error_code": err,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": t.transactional_id,
                "producer_id": t.producer_id,
                "transaction_state": str(t.state),
            }
            for t in txns
            if authorize(
                broker, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id
            )
        ],
    }
