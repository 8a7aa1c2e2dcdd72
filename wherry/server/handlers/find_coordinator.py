"""FindCoordinator (key 10): which broker coordinates a group or a transactional id
(batched keys from v4).

Groups live on partition `partition_for(group)` of `__consumer_offsets`, transactional ids
(key type 1) on partition `partition_for(id)` of `__transaction_state`, share-partition keys
`group:topicId:partition` (key type 2, KIP-932, CLUSTER_ACTION needed) on a partition of
`__share_group_state`; that partition's leader is the coordinator. When the topic does not
exist yet its creation starts and the answer is COORDINATOR_NOT_AVAILABLE (the client
retries), as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.group.records import OFFSETS_TOPIC
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import (
    AUTHORIZATION_MESSAGES,
    authorize,
    authorize_cluster,
    current_session,
)
from wherry.share.state import SHARE_STATE_TOPIC, state_partition_for
from wherry.txn.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2  # KIP-932: the share coordinator of `group:topicId:partition`

_MESSAGES = {
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.invalid_request: "Unknown coordinator type",
    **AUTHORIZATION_MESSAGES,
}


def _find(broker: BrokerServices, key_type: int, key: str) -> dict[str, Any]:
    err = ErrorCode.none
    node: tuple[int, str, int] = (-1, "", -1)
    # Kafka: DESCRIBE on the group, or on the transactional id.
    if key_type == GROUP_KEY_TYPE and not authorize(
        broker, AclOperation.DESCRIBE, ResourceType.GROUP, key
    ):
        err = ErrorCode.group_authorization_failed
    elif key_type == TRANSACTION_KEY_TYPE and not authorize(
        broker, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        err = ErrorCode.transactional_id_authorization_failed
    elif key_type == SHARE_KEY_TYPE and not authorize_cluster(
        broker, AclOperation.CLUSTER_ACTION
    ):
        err = ErrorCode.cluster_authorization_failed
    elif key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, SHARE_KEY_TYPE):
        err = ErrorCode.invalid_request
    else:
        cache = broker.cache
        if key_type == GROUP_KEY_TYPE:
            topic, ensure = OFFSETS_TOPIC, broker.groups.ensure_offsets_topic
            partition = broker.groups.coordinator.partition_for(key)
        elif key_type == SHARE_KEY_TYPE:
            share = broker.shares.coordinator
            topic, ensure = SHARE_STATE_TOPIC, broker.shares.state_topic.ensure
            partition = state_partition_for(key, share.partition_count())
        else:
            topic, ensure = TRANSACTION_STATE_TOPIC, broker.transactions.ensure_topic
            partition = broker.transactions.coordinator.partition_for(key)
        if not cache.contains_topic(topic):
            ensure()
            err = ErrorCode.coordinator_not_available
        else:
            st = cache.partition(topic, partition)
            leader = (
                cache.endpoint(st.leader, current_session().listener) if st is not None else None
            )
            if leader is None:
                err = ErrorCode.coordinator_not_available
            else:
                node = (leader.broker_id, leader.host, leader.port)
    return {
        "key": key,
        "node_id": node[0],
        "host": node[1],
        "port": node[2],
        "error_code": err,
        "error_message": _MESSAGES.get(err) if err != ErrorCode.none else None,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    if req.api_version >= 4:
        return {
            "throttle_time": 0,
            "coordinators": [_find(broker, body.key_type, k) for k in body.coordinator_keys],
        }
    one = _find(broker, getattr(body, "key_type", GROUP_KEY_TYPE), body.key)
    return {"throttle_time": 0, **one}
