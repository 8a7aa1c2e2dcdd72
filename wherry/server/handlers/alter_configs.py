"""AlterConfigs (key 33): replace a topic's config overrides. Broker configs are static."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
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


def _given(resource: Any) -> dict[str, str]:
    return {c.name: c.value for c in resource.configs if c.value is not None}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body

    async def alter_topic(r: Any) -> None:
        await broker.admin.set_topic_overrides(
            r.resource_name, _given(r), validate_only=body.validate_only
        )

    return await alter_resources(broker, body.resources, alter_topic, lambda r: list(_given(r)))


async def alter_resources(
    broker: BrokerServices,
    resources: Iterable[Any],
    alter_topic: Callable[[Any], Awaitable[None]],
    broker_config_names: Callable[[Any], list[str]],
) -> Mapping[str, Any]:
    """Answer each resource of an (Incremental)AlterConfigs request: a topic is altered by
    ``alter_topic`` (an `AdminError` is its answer); broker configs are refused."""
    out = []
    for r in resources:
        code, msg = ErrorCode.none, None
        if r.resource_type == TOPIC:
            try:
                await alter_topic(r)
            except AdminError as e:
                code, msg = e.error_code, e.message
        elif r.resource_type == BROKER:
            code, msg = reject_broker(broker, r.resource_name, broker_config_names(r))
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
