"""ShareGroupDescribe (key 77): share groups as their coordinator holds them (KIP-932).

DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED otherwise); a group this broker does not
coordinate gets NOT_COORDINATOR, an unknown one GROUP_ID_NOT_FOUND."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize, authorized_operations_field

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _group(broker: BrokerServices, group_id: str, include_ops: bool) -> dict[str, Any]:
    base: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group_id,
        "group_state": "Dead",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "simple",
        "members": [],
        "authorized_operations": -2147483648,
    }
    if not authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        code = ErrorCode.group_authorization_failed
        return {**base, "error_code": code, "error_message": AUTHORIZATION_MESSAGES[code]}
    shares = broker.shares
    err = shares.coordinator_error(group_id)
    if err != ErrorCode.none:
        if err == ErrorCode.coordinator_not_available:
            broker.groups.ensure_offsets_topic()
        return {**base, "error_code": err}
    g = shares.groups.groups.get(group_id)
    if g is None:
        return {
            **base,
            "error_code": ErrorCode.group_id_not_found,
            "error_message": f"Group {group_id} not found.",
        }
    cache = broker.cache
    members = []
    for m in g.members.values():
        tps = []
        for tid, ps in m.assignment.items():
            name = cache.topic_name(tid)
            if name is not None:
                tps.append({"topic_id": tid, "topic_name": name, "partitions": sorted(ps)})
        members.append(
            {
                "member_id": m.member_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed),
                "assignment": {"topic_partitions": tps},
            }
        )
    return {
        **base,
        "group_state": g.state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "members": members,
        "authorized_operations": authorized_operations_field(
            broker, include_ops, ResourceType.GROUP, group_id
        ),
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    include = bool(getattr(body, "include_authorized_operations", False))
    return {"throttle_time": 0, "groups": [_group(broker, g, include) for g in body.group_ids]}
