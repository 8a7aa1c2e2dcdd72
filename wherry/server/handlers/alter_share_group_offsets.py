"""AlterShareGroupOffsets (key 91): set a share group's start offsets (KIP-932;
`server/share_offsets.py`).

As Kafka: READ on the group (else GROUP_AUTHORIZATION_FAILED for the whole request), READ on
each topic (else its partitions' TOPIC_AUTHORIZATION_FAILED); unknown topics and partitions
UNKNOWN_TOPIC_OR_PARTITION; a group with members NON_EMPTY_GROUP; another kind of group of
that name GROUP_ID_NOT_FOUND. An unknown group is created (empty), so offsets can be set
before its consumers start."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import AUTHORIZATION_MESSAGES, authorize
from wherry.server.handlers.share_common import offsets_answer, offsets_group, offsets_refusal
from wherry.server.share_offsets import alter_offsets

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    group_id = body.group_id
    refused = offsets_refusal(broker, group_id, AclOperation.READ)
    if refused is not None:
        return refused
    # Topics first, as KafkaApis: the unauthorized and unknown ones answer whatever happens
    # to the group.
    cache = broker.cache
    answers: dict[str, dict[int, ErrorCode]] = {}
    valid: list[tuple[str, Any, dict[int, int]]] = []
    for t in body.topics:
        name, tid = t.topic_name, cache.topic_id(t.topic_name)
        count = len(cache.partitions(name)) if tid is not None else 0
        if not authorize(broker, AclOperation.READ, ResourceType.TOPIC, name):
            answers[name] = dict.fromkeys((p.partition_index for p in t.partitions),
                                          ErrorCode.topic_authorization_failed)
            continue
        answers[name] = {p.partition_index: ErrorCode.unknown_topic_or_partition
                         for p in t.partitions if not 0 <= p.partition_index < count}
        wanted = {p.partition_index: p.start_offset for p in t.partitions
                  if 0 <= p.partition_index < count}
        if wanted:
            valid.append((name, tid, wanted))
    shares = broker.shares
    top, message, group = offsets_group(broker, group_id, "altered", create=True)
    if top == ErrorCode.none and group is not None:
        for name, tid, wanted in valid:
            answers[name].update(await alter_offsets(shares, group, name, tid, wanted))
        await shares.persist_group(group_id)  # a group created here is written even if empty
    responses = []
    for t in body.topics:
        codes = answers.get(t.topic_name, {})
        parts = [{"partition_index": p.partition_index,
                  "error_code": codes.get(p.partition_index, top),
                  "error_message": AUTHORIZATION_MESSAGES.get(
                      codes.get(p.partition_index, top))}
                 for p in t.partitions]
        responses.append({"topic_name": t.topic_name, "topic_id": cache.topic_id(t.topic_name),
                          "partitions": parts})
    return offsets_answer(top, message, responses)
