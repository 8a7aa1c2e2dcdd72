"""JoinGroup (key 11): join or rejoin a classic group; may wait for the rebalance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.group.member import JoinGroupResult
from wherry.protocol.codec import duration_ms
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize
from wherry.server.handlers.group_common import CLIENT_HOST, topics_image

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    v = req.api_version
    session_ms = duration_ms(body.session_timeout)
    # v0 has one timeout for both.
    rebalance_ms = duration_ms(body.rebalance_timeout) if v >= 1 else session_ms
    instance_id = getattr(body, "group_instance_id", None)
    coord = broker.groups.coordinator
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id):
        # Kafka's JoinGroupRequest.getErrorResponse: no member id, generation or leader.
        r = JoinGroupResult.failed("", ErrorCode.group_authorization_failed)
        return _response(r, v)
    r = await answer_of(
        lambda cb: coord.handle_join_group(
            body.group_id,
            body.member_id,
            instance_id,
            # KIP-394: from v4, a new dynamic member first gets MEMBER_ID_REQUIRED.
            require_known_member_id=v >= 4 and instance_id is None,
            support_skipping_assignment=v >= 9,
            client_id=req.client_id or "",
            client_host=CLIENT_HOST.get(),
            rebalance_timeout_ms=rebalance_ms,
            session_timeout_ms=session_ms,
            protocol_type=body.protocol_type,
            protocols=[(p.name, p.metadata) for p in body.protocols],
            callback=cb,
            now_ms=broker.clock.now_ms(),
            reason=getattr(body, "reason", None),
            topics=topics_image(broker.cache),
        ),
    )
    return _response(r, v)


def _response(r: JoinGroupResult, v: int) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        # Nullable from v7; older versions use "" for no protocol.
        "protocol_name": r.protocol_name if v >= 7 else (r.protocol_name or ""),
        "leader": r.leader_id,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in r.members
        ],
    }
