"""AddOffsetsToTxn (key 25): the group's `__consumer_offsets` partition joins the transaction
(so its markers reach the group coordinator). Kafka: WRITE on the transactional id, READ on
the group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.records import OFFSETS_TOPIC
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize
from wherry.server.handlers.txn_common import client_error

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    tid, group = body.transactional_id, body.group_id
    if not authorize(broker, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        err = ErrorCode.transactional_id_authorization_failed
    elif not authorize(broker, AclOperation.READ, ResourceType.GROUP, group):
        err = ErrorCode.group_authorization_failed
    else:
        tp = TopicPartition(OFFSETS_TOPIC, broker.groups.coordinator.partition_for(group))
        coordinator = broker.transactions.coordinator
        err = await answer_of(
            lambda respond: coordinator.add_partitions(
                tid,
                int(body.producer_id),
                int(body.producer_epoch),
                [tp],
                broker.clock.now_ms(),
                respond,
            )
        )
    return {"throttle_time": 0, "error_code": client_error(err, req.api_version)}
