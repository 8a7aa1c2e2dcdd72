"""ConsumerGroupDescribe (key 69): KIP-848 consumer groups with their epochs, assignor and
members (current and target assignments, by topic id and name).

DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED); a group that is missing or not a
consumer group gets GROUP_ID_NOT_FOUND in state Dead, as Kafka 4 answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize, authorized_operations_field

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.replication.metadata_cache import MetadataCache
    from wherry.server.services import BrokerServices

# member_type (v1): how the member talks to the group -- the classic protocol (JoinGroup,
# SyncGroup, Heartbeat: a classic consumer inside a consumer group while it migrates) or the
# consumer protocol (ConsumerGroupHeartbeat), as Kafka's MemberType answers it.
_CLASSIC_MEMBER = 0
_CONSUMER_MEMBER = 1


def _assignment(cache: MetadataCache, parts: Mapping[uuid.UUID, frozenset[int]]) -> dict[str, Any]:
    out = []
    for tid, ps in sorted(parts.items()):
        name = cache.topic_name(tid)
        if name is None or not ps:
            continue
        out.append({"topic_id": tid, "topic_name": name, "partitions": sorted(ps)})
    return {"topic_partitions": out}


def _empty(group_id: str, error: ErrorCode, message: str | None, state: str) -> dict[str, Any]:
    return {
        "error_code": error,
        "error_message": message,
        "group_id": group_id,
        "group_state": state,
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": -2147483648,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    coord = broker.groups.coordinator
    cache = broker.cache
    include_ops = req.body.include_authorized_operations
    out = []
    for group_id in req.body.group_ids:
        if not authorize(broker, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            denied = ErrorCode.group_authorization_failed
            out.append(_empty(group_id, denied, AUTHORIZATION_MESSAGES[denied], ""))
            continue
        err, message, group = coord.handle_consumer_group_describe(group_id, broker.clock.now_ms())
        if group is None:
            state = "Dead" if err == ErrorCode.group_id_not_found else ""
            out.append(_empty(group_id, err, message, state))
            continue
        members = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": _assignment(cache, m.assigned),
                "target_assignment": _assignment(cache, group.target.get(m.member_id, {})),
                "member_type": _CLASSIC_MEMBER if m.uses_classic_protocol else _CONSUMER_MEMBER,
            }
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        out.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": coord.consumer_groups.assignor_name(group),
                "members": members,
                "authorized_operations": authorized_operations_field(
                    broker, include_ops, ResourceType.GROUP, group_id
                ),
            }
        )
    return {"throttle_time": 0, "groups": out}
