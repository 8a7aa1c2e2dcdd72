"""AlterConfigs (key 33): replace a topic's config overrides, or a broker's dynamic configs
(`/config/brokers/<id>`, or the cluster default for an empty name; `server/broker_configs.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.security.acl import AclOperation
from wherry.server.admin import AdminError
from wherry.server.authz import config_resource_denied
from wherry.server.handlers.describe_configs import BROKER, BROKER_LOGGER, GROUP, TOPIC
from wherry.share.config import GroupConfigError

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def _given(resource: Any) -> dict[str, str]:
    return {c.name: c.value for c in resource.configs if c.value is not None}


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body

    async def alter_topic(r: Any) -> None:
        await broker.admin.set_topic_overrides(
            r.resource_name, _given(r), validate_only=body.validate_only
        )

    async def alter_broker(r: Any) -> None:
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            raise AdminError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        nulls = [c.name for c in r.configs if c.value is None]
        if nulls:
            raise AdminError(
                ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
            )
        await broker.admin.set_broker_config(
            r.resource_name, _given(r), validate_only=body.validate_only
        )

    async def alter_group(r: Any) -> None:
        await set_group_config(broker, r.resource_name, _given(r), body.validate_only)

    # Kafka's AlterConfigs refuses broker loggers outright (no authorization asked).
    return await alter_resources(
        broker,
        body.resources,
        alter_topic,
        alter_broker,
        authorized_types=(TOPIC, BROKER, GROUP),
        alter_group=alter_group,
    )


async def set_group_config(
    broker: BrokerServices, group: str, config: Mapping[str, str], validate_only: bool
) -> None:
    """A GROUP resource (type 32): its configs replaced, validated as Kafka's GroupConfig."""
    try:
        await broker.shares.set_group_config(group, config, validate_only=validate_only)
    except GroupConfigError as e:
        raise AdminError(ErrorCode.invalid_config, str(e)) from e


async def alter_resources(
    broker: BrokerServices,
    resources: Iterable[Any],
    alter_topic: Callable[[Any], Awaitable[None]],
    alter_broker: Callable[[Any], Awaitable[None]],
    *,
    authorized_types: Iterable[int],
    alter_group: Callable[[Any], Awaitable[None]] | None = None,
    alter_logger: Callable[[Any], Awaitable[None]] | None = None,
) -> Mapping[str, Any]:
    """Answer each resource of an (Incremental)AlterConfigs request: a topic is altered by
    ``alter_topic``, a broker by ``alter_broker`` (an `AdminError` is the answer). Resources of
    ``authorized_types`` need ALTER_CONFIGS first (Kafka: on the topic, or on the cluster for
    brokers and broker loggers); refused ones get the authorization error, no message."""
    checked = set(authorized_types)
    out = []
    for r in resources:
        code, msg = ErrorCode.none, None
        alter = {
            TOPIC: alter_topic, BROKER: alter_broker, GROUP: alter_group,
            BROKER_LOGGER: alter_logger,
        }.get(r.resource_type)
        denied = None
        if r.resource_type in checked:
            denied = config_resource_denied(
                broker, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name
            )
        if denied is not None:
            code = denied
        elif alter is None:
            code, msg = (
                ErrorCode.invalid_request,
                "AlterConfigs is only supported for topics, brokers and groups, but resource "
                "type is "
                f"{r.resource_type}",
            )
        else:
            try:
                await alter(r)
            except AdminError as e:
                code, msg = e.error_code, e.message
        out.append(
            {
                "error_code": code,
                "error_message": msg,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
        )
    return {"throttle_time": 0, "responses": out}
