"""CreateTopics (key 19): write the topic through the store; the controller brings it online."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.protocol.codec import duration_ms
from wherry.security.acl import AclOperation, ResourceType
from wherry.server.admin import AdminError
from wherry.server.authz import authorize_cluster, authorized_names
from wherry.server.handlers.describe_configs import topic_config_entries

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def wait_for_partitions(
    broker: BrokerServices,
    expected: list[tuple[str, int]],
    timeout: datetime.timedelta | int,
    *,
    deadline_ms: int | None = None,
) -> set[str]:
    """Wait, up to the request's ``timeout`` (or until ``deadline_ms`` on the broker's
    monotonic clock, when the request already spent part of it), until the metadata cache has
    each topic of ``expected`` with its partition count; returns the topics that did not get
    there. A timeout of 0 or less does not wait (nor checks)."""
    timeout_ms = duration_ms(timeout)
    if not expected or timeout_ms <= 0:
        return set()
    if deadline_ms is not None:
        timeout_ms = max(0, deadline_ms - broker.clock.monotonic_ms())
    cache = broker.cache
    if await broker.wait_for_metadata(
        lambda: all(cache.has_partitions(n, c) for n, c in expected), timeout_ms
    ):
        return set()
    return {n for n, c in expected if not cache.has_partitions(n, c)}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    # One deadline for the whole request (waits for pending deletions included), as Kafka's.
    deadline_ms = broker.clock.monotonic_ms() + max(0, duration_ms(body.timeout))
    counts = Counter(t.name for t in body.topics)
    # Kafka: CREATE on the cluster, else on each topic; a created topic's configs and
    # partitioning are shown only with DESCRIBE_CONFIGS on it (else TOPIC_AUTHORIZATION_FAILED
    # as its topic_config_error_code).
    may_create = (
        set(counts)
        if authorize_cluster(broker, AclOperation.CREATE)
        else authorized_names(broker, AclOperation.CREATE, ResourceType.TOPIC, counts)
    )
    may_see_configs = authorized_names(
        broker, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts
    )
    results: list[dict[str, Any]] = []
    created: list[tuple[str, int]] = []
    for t in body.topics:
        base: dict[str, Any] = {
            "name": t.name,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
            "error_message": None,
        }
        if counts[t.name] > 1:
            results.append(
                {
                    **base,
                    "error_code": ErrorCode.invalid_request,
                    "error_message": "Create topics request from client contains "
                    "duplicate topic names",
                    "topic_config_error_code": ErrorCode.none
                    if t.name in may_see_configs
                    else ErrorCode.topic_authorization_failed,
                }
            )
            continue
        if t.name not in may_create:
            results.append(
                {
                    **base,
                    "error_code": ErrorCode.topic_authorization_failed,
                    "error_message": "Authorization failed.",
                }
            )
            continue
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        try:
            res = await broker.admin.create_topic(
                t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments={a.partition_index: list(a.broker_ids) for a in t.assignments},
                configs=configs,
                validate_only=body.validate_only,
                deletion_wait_ms=max(0, deadline_ms - broker.clock.monotonic_ms()),
            )
        except AdminError as e:
            results.append({**base, "error_code": e.error_code, "error_message": e.message})
            continue
        if not body.validate_only:
            created.append((t.name, res.num_partitions))
        if t.name not in may_see_configs:
            results.append(
                {
                    **base,
                    "error_code": ErrorCode.none,
                    "topic_id": res.topic_id,
                    "configs": [],
                    "topic_config_error_code": ErrorCode.topic_authorization_failed,
                }
            )
            continue
        results.append(
            {
                **base,
                "error_code": ErrorCode.none,
                "topic_id": res.topic_id,
                "num_partitions": res.num_partitions,
                "replication_factor": res.replication_factor,
                "configs": topic_config_entries(broker, configs),
            }
        )
    late = await wait_for_partitions(broker, created, body.timeout, deadline_ms=deadline_ms)
    for r in results:
        if r["name"] in late:
            r["error_code"] = ErrorCode.request_timed_out
            r["error_message"] = "Timed out waiting for the topic to be created"
    for r in results:
        if r.get("topic_id") is None:
            r.pop("topic_id", None)
        if r["error_code"] == ErrorCode.none and broker.cache.topic_id(r["name"]) is not None:
            r["topic_id"] = broker.cache.topic_id(r["name"])
    return {"throttle_time": 0, "topics": results}
