"""What the share-group handlers share.

ShareFetch and ShareAcknowledge: the share session's opening, topic resolution by id with READ
checks, acknowledgement batches, the current leader and node endpoints of answers, the answer
(its top level, its partitions by topic). AlterShareGroupOffsets and DeleteShareGroupOffsets:
the answer, the refusal of a request without a group id or the right on the group, and the
group with the error of one that cannot have its offsets changed."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.authz import (
    AUTHORIZATION_MESSAGES,
    authorize,
    authorized_names,
    current_session,
)
from wherry.server.handlers.group_common import CONNECTION_ID
from wherry.server.share_offsets import find_group
from wherry.share.group import ShareGroup
from wherry.share.partition import AckBatch

if TYPE_CHECKING:
    from wherry.server.services import BrokerServices
    from wherry.share.config import ShareGroupSettings
    from wherry.share.sessions import ShareSession


def request_error(
    broker: BrokerServices, group: str | None, member: str | None
) -> tuple[ErrorCode, str] | None:
    """The whole-request error of a ShareFetch / ShareAcknowledge, or None: the group and
    member ids must be set, and the principal needs READ on the group."""
    if not group or not member:
        return ErrorCode.invalid_request, "The group id and member id must be set."
    if not authorize(broker, AclOperation.READ, ResourceType.GROUP, group):
        code = ErrorCode.group_authorization_failed
        return code, AUTHORIZATION_MESSAGES[code]
    return None


def resolve(
    broker: BrokerServices, topic_ids: Iterable[uuid.UUID | None]
) -> dict[uuid.UUID | None, tuple[str | None, ErrorCode]]:
    """topic id -> (name, error): UNKNOWN_TOPIC_ID, or TOPIC_AUTHORIZATION_FAILED without
    READ on the topic."""
    cache = broker.cache
    names = {tid: (cache.topic_name(tid) if tid is not None else None) for tid in topic_ids}
    readable = authorized_names(
        broker, AclOperation.READ, ResourceType.TOPIC, (n for n in names.values() if n)
    )
    out: dict[uuid.UUID | None, tuple[str | None, ErrorCode]] = {}
    for tid, name in names.items():
        if name is None:
            out[tid] = (None, ErrorCode.unknown_topic_id)
        elif name not in readable:
            out[tid] = (name, ErrorCode.topic_authorization_failed)
        else:
            out[tid] = (name, ErrorCode.none)
    return out


def ack_batches(batches: Iterable[Any]) -> list[AckBatch]:
    return [
        AckBatch(b.first_offset, b.last_offset, tuple(int(t) for t in b.acknowledge_types))
        for b in batches
    ]


def leader_of(broker: BrokerServices, tp: TopicPartition) -> dict[str, int]:
    st = broker.cache.partition(tp.topic, tp.partition)
    if st is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": st.leader, "leader_epoch": st.leader_epoch}


def node_endpoints(broker: BrokerServices, leader_ids: Iterable[int]) -> list[dict[str, Any]]:
    out = []
    listener = current_session().listener
    for b in sorted({i for i in leader_ids if i >= 0}):
        ep = broker.cache.endpoint(b, listener)
        if ep is not None:
            out.append({"node_id": b, "host": ep.host, "port": ep.port, "rack": None})
    return out


MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def answer(
    code: ErrorCode,
    message: str | None = None,
    *,
    lock_ms: int = 0,
    by_topic: Mapping[uuid.UUID | None, list[dict[str, Any]]] | None = None,
    endpoints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ShareFetch / ShareAcknowledge answer: the top-level fields and the partitions' answers
    by topic id."""
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout": lock_ms,
        "responses": [
            {"topic_id": tid, "partitions": ps} for tid, ps in (by_topic or {}).items()
        ],
        "node_endpoints": endpoints or [],
    }


def partitions_answer(
    broker: BrokerServices,
    lock_ms: int,
    parts: Iterable[tuple[uuid.UUID | None, dict[str, Any]]],
) -> dict[str, Any]:
    """A ShareFetch / ShareAcknowledge answer of the partitions' answers, (topic id, fields) in
    order; each partition whose error or acknowledgement error says its leader moved brings
    its current leader's endpoint."""
    by_topic: dict[uuid.UUID | None, list[dict[str, Any]]] = {}
    moved: list[int] = []
    for topic_id, part in parts:
        if part["error_code"] in MOVED or part.get("acknowledge_error_code") in MOVED:
            moved.append(part["current_leader"]["leader_id"])
        by_topic.setdefault(topic_id, []).append(part)
    return answer(
        ErrorCode.none, lock_ms=lock_ms, by_topic=by_topic, endpoints=node_endpoints(broker, moved)
    )


def offsets_answer(
    code: ErrorCode, message: str | None = None, responses: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An AlterShareGroupOffsets / DeleteShareGroupOffsets answer (an authorization error
    says its usual message)."""
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message or AUTHORIZATION_MESSAGES.get(code),
        "responses": responses or [],
    }


def offsets_refusal(
    broker: BrokerServices, group_id: str | None, operation: AclOperation
) -> dict[str, Any] | None:
    """The whole-request answer of a request on a share group's offsets that names no group
    (INVALID_GROUP_ID) or whose principal lacks `operation` on it; None if it may go on."""
    if not group_id:
        return offsets_answer(ErrorCode.invalid_group_id)
    if not authorize(broker, operation, ResourceType.GROUP, group_id):
        return offsets_answer(ErrorCode.group_authorization_failed)
    return None


def offsets_group(
    broker: BrokerServices, group_id: str, verb: str, *, create: bool = False
) -> tuple[ErrorCode, str | None, ShareGroup | None]:
    """The share group of a request `verb` ("altered", "deleted") its offsets, with the
    request-level error and message: the lookup's error when there is no group (the offsets
    topic is created when it is missing), NON_EMPTY_GROUP while the group has members. With
    `create` an unknown group is made (empty) unless another kind of group has the name."""
    shares = broker.shares
    err, group = find_group(shares, group_id)
    if group is None and err == ErrorCode.group_id_not_found and create:
        gc = broker.groups.coordinator
        if gc.group(group_id) is not None or gc.consumer_groups.get(group_id) is not None:
            return err, f"Group {group_id} is not a share group.", None
        group = shares.groups.groups[group_id] = ShareGroup(group_id)
    if group is None:
        if err == ErrorCode.coordinator_not_available:
            broker.groups.ensure_offsets_topic()
        return err, None, None
    if group.members:
        message = f"the group must be empty for its offsets to be {verb}"
        return ErrorCode.non_empty_group, message, group
    return ErrorCode.none, None, group


async def open_session(
    broker: BrokerServices, body: Any, *, fetch: bool
) -> tuple[ShareGroupSettings, ShareSession | None] | dict[str, Any]:
    """The group's settings and the share session a ShareFetch / ShareAcknowledge goes on
    with (None: its final epoch, after which the session closes); or the answer refusing the
    whole request."""
    group, member = body.group_id, body.member_id
    refused = request_error(broker, group, member)
    if refused is not None:
        return answer(*refused)
    shares = broker.shares
    settings = await shares.settings(group)
    session = shares.session_for(
        group,
        member,
        body.share_session_epoch,
        broker.clock.now_ms(),
        fetch=fetch,
        connection_id=CONNECTION_ID.get(),
    )
    if isinstance(session, ErrorCode):
        return answer(session)
    return settings, session
