"""EndTxn (key 26): commit or abort a transaction (Kafka: WRITE on the transactional id).

The coordinator writes PrepareCommit/PrepareAbort, answers, then sends the markers and writes
CompleteCommit/CompleteAbort (`wherry/txn/coordinator.py`, `coordinator/txn_markers.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize
from wherry.server.handlers.txn_common import client_error

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    tid = body.transactional_id
    if not authorize(broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        err = ErrorCode.transactional_id_authorization_failed
    else:
        coordinator = broker.transactions.coordinator
        err = await answer_of(
            lambda respond: coordinator.end_transaction(
                tid,
                int(body.producer_id),
                int(body.producer_epoch),
                bool(body.committed),
                broker.clock.now_ms(),
                respond,
            )
        )
    return {
        "throttle_time": 0,
        "error_code": client_error(err, req.api_version),
        "producer_id": -1,
        "producer_epoch": -1,
    }
