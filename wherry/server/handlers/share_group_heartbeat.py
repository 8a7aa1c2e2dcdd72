"""ShareGroupHeartbeat (key 76): join, stay in or leave a share group (KIP-932).

Kafka's checks first: READ on the group, then DESCRIBE on each subscribed topic; the group's
coordinator (the leader of its `__consumer_offsets` partition) answers from
`share.group.ShareGroups` (`coordinator/shares.py`) with the member's epoch, the heartbeat interval
and, when it changed, its assignment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize, current_session

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _answer(code: ErrorCode, message: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "member_id": kw.get("member_id"),
        "member_epoch": kw.get("member_epoch", -1),
        "heartbeat_interval": kw.get("heartbeat_interval", 0),
        "assignment": kw.get("assignment"),
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    group = body.group_id
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, group):
        return _answer(
            ErrorCode.group_authorization_failed,
            AUTHORIZATION_MESSAGES[ErrorCode.group_authorization_failed],
        )
    subscribed = body.subscribed_topic_names
    if subscribed is not None:
        denied = [
            t for t in subscribed
            if not authorize(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, t)
        ]
        if denied:
            return _answer(
                ErrorCode.topic_authorization_failed,
                f"Not authorized to describe topics: {sorted(denied)}",
            )
    if not group:
        return _answer(ErrorCode.invalid_request, "GroupId can't be empty.")
    shares = broker.shares
    err = shares.coordinator_error(group)
    if err != ErrorCode.none:
        if err == ErrorCode.coordinator_not_available:
            broker.groups.ensure_offsets_topic()
        return _answer(err)
    if broker.groups.coordinator.group(group) is not None:
        return _answer(
            ErrorCode.group_id_not_found,
            f"Group {group} is not a share group.",
        )
    settings = await shares.settings(group)
    session = current_session()
    r = shares.groups.heartbeat(
        group,
        body.member_id,
        body.member_epoch,
        subscribed,
        body.rack_id,
        shares.topic_infos(),
        broker.clock.now_ms(),
        session_timeout_ms=settings.session_timeout_ms,
        client_id=req.client_id or "",
        client_host="/" + session.client_address,
        max_size=shares.config["group.share.max.size"],
    )
    if r.error_code != ErrorCode.none:
        return _answer(r.error_code, r.error_message, member_id=body.member_id)
    # A member that leaves keeps its share sessions: a closing consumer sends its last
    # acknowledgements beside this heartbeat (librdkafka at once, on another connection), and
    # they must still apply. Its session's end -- its final ShareFetch or ShareAcknowledge, its
    # connection closing -- gives back what it still holds, as on Kafka.
    err = await shares.persist_group(group)  # answered once `__consumer_offsets` has it
    if err != ErrorCode.none:
        return _answer(err, member_id=body.member_id)
    assignment = None
    if r.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": tid, "partitions": sorted(ps)}
                for tid, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))
            ]
        }
    return _answer(
        ErrorCode.none,
        member_id=body.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval=settings.heartbeat_interval_ms,
        assignment=assignment,
    )
