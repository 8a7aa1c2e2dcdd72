"""DeleteTopics (key 20): mark for deletion; wait until the controller removed the topic."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.protocol.codec import duration_ms
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.admin import AdminError
from wherry.server.authz import authorized_names

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

_ZERO_UUID = uuid.UUID(int=0)


def _denied(name: str | None, topic_id: uuid.UUID) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": ErrorCode.topic_authorization_failed,
        "error_message": None,
    }


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    cache = broker.cache
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    if hasattr(body, "topic_names"):
        wanted = [(n, None) for n in body.topic_names]
    else:
        wanted = [(t.name, t.topic_id if t.topic_id != _ZERO_UUID else None) for t in body.topics]
    resolved = [(n if n is not None or t is None else cache.topic_name(t), t) for n, t in wanted]
    # Kafka: DELETE on each topic, asked before its existence is; a topic named by id needs
    # DESCRIBE for its name to be shown.
    named = [n for n, _ in resolved if n is not None]
    may_delete = authorized_names(broker, AclOperation.DELETE, ResourceType.TOPIC, named)
    may_describe = authorized_names(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, named)
    results: list[dict[str, Any]] = []
    pending: list[str] = []
    for (given, tid), (name, _) in zip(wanted, resolved, strict=True):
        if given is None and tid is None:  # v6+: a null name and the zero id
            results.append(
                {
                    "name": None,
                    "topic_id": _ZERO_UUID,
                    "error_code": ErrorCode.invalid_request,
                    "error_message": "Neither a topic name nor a topic id was given.",
                }
            )
            continue
        if given is None and tid is not None and name is None:
            results.append(
                {
                    "name": None,
                    "topic_id": tid,
                    "error_code": ErrorCode.unknown_topic_id,
                    "error_message": "This server does not host this topic ID.",
                }
            )
            continue
        assert name is not None
        topic_id = cache.topic_id(name) or _ZERO_UUID
        if given is None and name not in may_describe:
            results.append(_denied(None, tid or topic_id))
            continue
        if name not in may_delete:
            results.append(_denied(name, topic_id))
            continue
        if not cache.contains_topic(name):
            # As Kafka: only topics this broker's metadata knows (a topic whose deletion has
            # gone through is unknown even while its znodes are being removed).
            results.append(
                {
                    "name": name,
                    "topic_id": topic_id,
                    "error_code": ErrorCode.unknown_topic_or_partition,
                    "error_message": "This server does not host this topic-partition.",
                }
            )
            continue
        try:
            await broker.admin.delete_topic(name)
        except AdminError as e:
            results.append(
                {
                    "name": name,
                    "topic_id": topic_id,
                    "error_code": e.error_code,
                    "error_message": e.message,
                }
            )
            continue
        pending.append(name)
        results.append(
            {
                "name": name,
                "topic_id": topic_id,
                "error_code": ErrorCode.none,
                "error_message": None,
            }
        )
    timeout_ms = duration_ms(body.timeout)
    if pending and timeout_ms > 0:
        done = await broker.wait_for_metadata(
            lambda: not any(cache.contains_topic(n) for n in pending), timeout_ms
        )
        if not done:
            for r in results:
                if r["name"] in pending and cache.contains_topic(r["name"]):
                    r["error_code"] = ErrorCode.request_timed_out
    return {"throttle_time": 0, "responses": results}
