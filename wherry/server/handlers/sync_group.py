"""SyncGroup (key 14): the leader hands in the assignment; every member gets its share.

The assignment is written to `__consumer_offsets` before anyone is answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.group.member import SyncGroupResult
from wherry.runtime.parking import answer_of
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import authorize

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _response(r: SyncGroupResult) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": r.error,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    protocol_type = getattr(body, "protocol_type", None)
    protocol_name = getattr(body, "protocol_name", None)
    if req.api_version >= 5 and (protocol_type is None or protocol_name is None):
        # From v5 both are mandatory (Kafka's areMandatoryProtocolTypeAndNamePresent).
        return _response(SyncGroupResult.failed(ErrorCode.inconsistent_group_protocol))
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return _response(SyncGroupResult.failed(ErrorCode.group_authorization_failed))
    coord = broker.groups.coordinator
    assignments = {a.member_id: a.assignment for a in body.assignments}
    r: SyncGroupResult = await answer_of(
        lambda cb: coord.handle_sync_group(
            body.group_id,
            body.generation_id,
            body.member_id,
            protocol_type,
            protocol_name,
            getattr(body, "group_instance_id", None),
            assignments,
            cb,
            broker.clock.now_ms(),
        ),
    )
    return _response(r)
