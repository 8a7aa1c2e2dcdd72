"""InitProducerId (key 22).

Without a transactional id: a fresh producer id with epoch 0, as Kafka's transaction
coordinator does for idempotent producers. With one: the transaction coordinator
(`wherry/txn/coordinator.py`) bumps the epoch (fencing older producers of the id; an ongoing
transaction of the previous epoch is aborted first and the client retries on
CONCURRENT_TRANSACTIONS), lets a producer that gives its id and epoch (KIP-360, v3+) bump
after an abortable error, and moves to a new producer id when the epoch is exhausted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.protocol.codec import duration_ms
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize, authorize_by_resource_type, authorize_cluster
from wherry.server.handlers.txn_common import client_error
from wherry.txn.coordinator import InitResult

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {
        "error_code": code,
        "producer_id": pid,
        "producer_epoch": epoch,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    tid = body.transactional_id
    # Kafka: WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or
    # WRITE on any topic (KIP-679).
    if tid is not None:
        if not authorize(broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return _answer(ErrorCode.transactional_id_authorization_failed)
        return await _transactional(broker, req, tid)
    if not (
        authorize_cluster(broker, AclOperation.IDEMPOTENT_WRITE)
        or authorize_by_resource_type(broker, AclOperation.WRITE, ResourceType.TOPIC)
    ):
        return _answer(ErrorCode.cluster_authorization_failed)
    return _answer(ErrorCode.none, await broker.producer_ids.next_id(), 0)


async def _transactional(broker: BrokerServices, req: Request, tid: str) -> Mapping[str, Any]:
    body = req.body
    pid = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    if (pid == -1) != (epoch == -1):  # Kafka: both or neither
        return _answer(ErrorCode.invalid_request)
    expected = None if pid == -1 else (pid, epoch)
    coordinator = broker.transactions.coordinator
    new_pid = await broker.producer_ids.next_id() if coordinator.needs_producer_id(tid) else None
    timeout = duration_ms(body.transaction_timeout)
    def start(respond: Callable[[InitResult], None]) -> None:
        coordinator.init_producer_id(
            tid, timeout, expected, new_pid, broker.clock.now_ms(), respond
        )

    err, got_pid, got_epoch = await answer_of(start)
    return _answer(client_error(err, req.api_version, 4), got_pid, got_epoch)
