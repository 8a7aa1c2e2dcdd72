"""DeleteShareGroupOffsets (key 92): delete a share group's state for whole topics (KIP-932;
`server/share_offsets.py`); its consumers start those topics afresh
(`share.auto.offset.reset`).

As Kafka: DELETE on the group (else GROUP_AUTHORIZATION_FAILED for the whole request), READ
on each topic (else TOPIC_AUTHORIZATION_FAILED); unknown topics UNKNOWN_TOPIC_OR_PARTITION;
an unknown group GROUP_ID_NOT_FOUND; a group with members NON_EMPTY_GROUP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize
from wherry.server.handlers.share_common import offsets_answer, offsets_group, offsets_refusal
from wherry.server.share_offsets import delete_offsets

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    group_id = body.group_id
    refused = offsets_refusal(broker, group_id, AclOperation.DELETE)
    if refused is not None:
        return refused
    # Topics first, as KafkaApis: the unauthorized and unknown ones answer whatever happens
    # to the group.
    answers: dict[str, ErrorCode] = {}
    for t in dict.fromkeys(t.topic_name for t in body.topics):
        if not authorize(broker, AclOperation.READ, ResourceType.TOPIC, t):
            answers[t] = ErrorCode.topic_authorization_failed
        elif broker.cache.topic_id(t) is None:
            answers[t] = ErrorCode.unknown_topic_or_partition
    top, message, group = offsets_group(broker, group_id, "deleted")
    responses = []
    for t in dict.fromkeys(t.topic_name for t in body.topics):
        tid = broker.cache.topic_id(t)
        code = answers.get(t)
        if code is None:
            if top != ErrorCode.none or group is None or tid is None:
                continue  # the request-level error says it
            code = await delete_offsets(broker.shares, group, tid)
        responses.append({"topic_name": t, "topic_id": tid, "error_code": code,
                          "error_message": AUTHORIZATION_MESSAGES.get(code)})
    return offsets_answer(top, message, responses)
