"""InitProducerId (key 22) for idempotent producers.

Every call without a transactional id gets a fresh producer id with epoch 0, as Kafka's
transaction coordinator does for idempotent producers. Transactions are not implemented:
a transactional id is answered with COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    if req.body.transactional_id is not None:
        return {
            "error_code": ErrorCode.coordinator_not_available,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    pid = await broker.producer_ids.next_id()
    return {
        "error_code": ErrorCode.none,
        "producer_id": pid,
        "producer_epoch": 0,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    }
