"""CreatePartitions (key 37)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.protocol.codec import duration_ms
from wherry.server.admin import AdminError

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    counts = Counter(t.name for t in body.topics)
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
    timeout_ms = duration_ms(body.timeout)
    if grown and timeout_ms > 0:
        ready = await broker.wait_for_metadata(
            lambda: all(broker.cache.has_partitions(n, c) for n, c in grown), timeout_ms
        )
        if not ready:
            for r in results:
                for n, c in grown:
                    if r["name"] == n and not broker.cache.has_partitions(n, c):
                        r["error_code"] = ErrorCode.request_timed_out
    return {"throttle_time": 0, "results": results}
