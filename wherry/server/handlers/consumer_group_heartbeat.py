"""ConsumerGroupHeartbeat (key 68): KIP-848's consumer group protocol (`group.protocol=consumer`).

Checks as Kafka 4's KafkaApis: READ on the group (GROUP_AUTHORIZATION_FAILED), DESCRIBE on
every subscribed topic name (TOPIC_AUTHORIZATION_FAILED); then the group coordinator
(group/consumer_coordinator.py) joins, heartbeats, reconciles or removes the member and the
answer waits for its records to be written. v0 lets the coordinator pick the member id of a
joining member; v1 members bring their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.group.consumer_coordinator import HeartbeatRequest, HeartbeatResult
from wherry.protocol.codec import duration_ms
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize, authorized_names
from wherry.server.handlers.group_common import CLIENT_HOST, topics_image

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _failed(error: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval": 0,
        "assignment": None,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id):
        denied = ErrorCode.group_authorization_failed
        return _failed(denied, AUTHORIZATION_MESSAGES.get(denied))
    names = body.subscribed_topic_names
    if names:
        allowed = authorized_names(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if len(allowed) < len(set(names)):
            denied = ErrorCode.topic_authorization_failed
            return _failed(denied, AUTHORIZATION_MESSAGES.get(denied))
    member_id = body.member_id
    if req.api_version == 0 and not member_id and body.member_epoch == 0:
        member_id = str(uuid.uuid4())
    owned: dict[uuid.UUID, frozenset[int]] | None = None
    if body.topic_partitions is not None:
        owned = {}
        for tp in body.topic_partitions:
            if tp.topic_id is not None:
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    request = HeartbeatRequest(
        group_id=body.group_id,
        member_id=member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=duration_ms(body.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),  # v1+
        server_assignor=body.server_assignor,
        owned=owned,
        client_id=req.client_id or "",
        client_host=CLIENT_HOST.get(),
    )
    coord = broker.groups.coordinator
    image = topics_image(broker.cache)
    now = broker.clock.now_ms()
    result: HeartbeatResult = await answer_of(
        lambda cb: coord.handle_consumer_group_heartbeat(request, image, cb, now)
    )
    if result.error != ErrorCode.none:
        return _failed(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": tid, "partitions": sorted(parts)}
                for tid, parts in sorted(result.assignment.items())
            ]
        }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }
