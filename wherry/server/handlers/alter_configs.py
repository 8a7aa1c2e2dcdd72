"""AlterConfigs (key 33): replace a topic's config overrides. Broker configs are static."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.server.admin import AdminError
from wherry.server.handlers.describe_configs import BROKER, TOPIC

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def reject_broker(broker: BrokerServices, name: str, keys: list[str]) -> tuple[ErrorCode, str]:
    if name not in ("", str(broker.broker_id)):
        return ErrorCode.invalid_request, f"Unexpected broker id {name}"
    return (ErrorCode.invalid_request, f"Cannot update these configs dynamically: {sorted(keys)}")


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    out = []
    for r in body.resources:
        code, msg = ErrorCode.none, None
        configs = {c.name: c.value for c in r.configs if c.value is not None}
        if r.resource_type == TOPIC:
            try:
                await broker.admin.set_topic_overrides(
                    r.resource_name, configs, validate_only=body.validate_only
                )
            except AdminError as e:
                code, msg = e.error_code, e.message
        elif r.resource_type == BROKER:
            code, msg = reject_broker(broker, r.resource_name, list(configs))
        else:
            code, msg = ErrorCode.invalid_request, f"Unsupported resource type {r.resource_type}"
        out.append(
            {
                "error_code": code,
                "error_message": msg,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
        )
    return {"throttle_time": 0, "responses": out}
