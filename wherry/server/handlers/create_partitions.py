"""CreatePartitions (key 37)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation, ResourceType
from wherry.server.admin import AdminError
from wherry.server.authz import authorized_names
from wherry.server.handlers.create_topics import wait_for_partitions

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    counts = Counter(t.name for t in body.topics)
    # Kafka: ALTER on each topic (duplicates are refused first).
    may_alter = authorized_names(broker, AclOperation.ALTER, ResourceType.TOPIC, counts)
    results: list[dict[str, Any]] = []
    grown: list[tuple[str, int]] = []
    for t in body.topics:
        if counts[t.name] > 1:
            results.append(
                {
                    "name": t.name,
                    "error_code": ErrorCode.invalid_request,
                    "error_message": "Duplicate topic in request.",
                }
            )
            continue
        if t.name not in may_alter:
            results.append(
                {
                    "name": t.name,
                    "error_code": ErrorCode.topic_authorization_failed,
                    "error_message": "The topic authorization is failed.",
                }
            )
            continue
        assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
        try:
            await broker.admin.create_partitions(
                t.name, t.count, assignments, validate_only=body.validate_only
            )
        except AdminError as e:
            results.append({"name": t.name, "error_code": e.error_code, "error_message": e.message})
            continue
        if not body.validate_only:
            grown.append((t.name, t.count))
        results.append({"name": t.name, "error_code": ErrorCode.none, "error_message": None})
    late = await wait_for_partitions(broker, grown, body.timeout)
    for r in results:
        if r["name"] in late:
            r["error_code"] = ErrorCode.request_timed_out
    return {"throttle_time": 0, "results": results}
