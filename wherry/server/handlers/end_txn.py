"""EndTxn (key 26): commit or abort a transaction (Kafka: WRITE on the transactional id).

The coordinator writes PrepareCommit/PrepareAbort, answers, then sends the markers and writes
CompleteCommit/CompleteAbort (`wherry/txn/coordinator.py`, `coordinator/txn_markers.py`).
v5 is transactions v2 (KIP-890): the epoch is bumped at every end and the answer carries the
producer id and epoch the client goes on with -- a new producer id at epoch 0 when the epoch
is exhausted, for which the broker claims an id first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize
from wherry.server.handlers.txn_common import client_error
from wherry.txn.coordinator import EndResult

FIRST_V2_VERSION = 5
TRANSACTIONS_V2 = 2

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    tid = body.transactional_id
    if not authorize(broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        err = ErrorCode.transactional_id_authorization_failed
        pid = epoch = -1
    else:
        coordinator = broker.transactions.coordinator
        version = TRANSACTIONS_V2 if req.api_version >= FIRST_V2_VERSION else 0
        new_pid = (
            await broker.producer_ids.next_id()
            if coordinator.needs_producer_id_for_end(tid, version)
            else None
        )

        def start(respond: Callable[[EndResult], None]) -> None:
            coordinator.end_transaction_result(
                tid,
                int(body.producer_id),
                int(body.producer_epoch),
                bool(body.committed),
                broker.clock.now_ms(),
                respond,
                transaction_version=version,
                new_producer_id=new_pid,
            )

        err, pid, epoch = await answer_of(start)
    return {
        "throttle_time": 0,
        "error_code": client_error(err, req.api_version),
        "producer_id": pid,
        "producer_epoch": epoch,
    }
