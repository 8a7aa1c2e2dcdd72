"""IncrementalAlterConfigs (key 44): SET / DELETE / APPEND / SUBTRACT on topic overrides, on a
broker's dynamic configs (`server/broker_configs.py`), on group configs, and SET / DELETE of a
broker's log levels (`server/broker_loggers.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigType
from wherry.server import broker_configs, broker_loggers
from wherry.server.admin import AdminError
from wherry.server.dynamic_validation import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    DynamicConfigError,
    apply_incremental,
    list_operation,
)
from wherry.server.handlers.alter_configs import alter_resources, set_group_config
from wherry.server.handlers.describe_configs import BROKER, BROKER_LOGGER, GROUP, TOPIC
from wherry.share.config import GROUP_CONFIG_KEYS

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

def apply_ops(current: dict[str, str], ops: Any, defaults: Any) -> dict[str, str]:
    new = dict(current)
    for c in ops:
        key = TOPIC_CONFIG_KEYS.get(c.name)
        if key is None:
            raise AdminError(ErrorCode.invalid_config, f"Unknown topic config name: {c.name}")
        match c.config_operation:
            case 0:
                if c.value is None:
                    raise AdminError(
                        ErrorCode.invalid_request, f"Null value not supported for {c.name}"
                    )
                new[c.name] = c.value
            case 1:
                new.pop(c.name, None)
            case 2 | 3:
                if key.type != ConfigType.LIST:
                    raise AdminError(
                        ErrorCode.invalid_config,
                        f"Config value append is not allowed for config key: {c.name}",
                    )
                new[c.name] = list_operation(
                    new.get(c.name, defaults.value_of(c.name)),
                    c.value,
                    append=c.config_operation == APPEND,
                )
            case op:
                raise AdminError(ErrorCode.invalid_request, f"Unknown config operation {op}")
    return new


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body

    async def alter_topic(r: Any) -> None:
        current = await broker.admin.topic_overrides(r.resource_name)
        new = apply_ops(current, r.configs, broker.config.log_defaults)
        await broker.admin.set_topic_overrides(
            r.resource_name, new, validate_only=body.validate_only
        )

    async def alter_broker(r: Any) -> None:
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            raise AdminError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        nulls = [c.name for c in r.configs if c.config_operation != DELETE and c.value is None]
        if nulls:
            raise AdminError(
                ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
            )
        try:
            broker_id = broker_configs.resource_broker_id(r.resource_name, broker.broker_id)
            current = await broker.admin.broker_config(broker_id)
            new = apply_incremental(current, r.configs)
        except DynamicConfigError as e:
            raise AdminError(e.error_code, e.message) from e
        await broker.admin.set_broker_config(r.resource_name, new, validate_only=body.validate_only)

    async def alter_group(r: Any) -> None:
        new = await broker.shares.stored_group_config(r.resource_name)
        for c in r.configs:
            if c.name not in GROUP_CONFIG_KEYS:
                raise AdminError(ErrorCode.invalid_config, f"Unknown group config name: {c.name}")
            if c.config_operation == SET:
                if c.value is None:
                    raise AdminError(
                        ErrorCode.invalid_request, f"Null value not supported for {c.name}"
                    )
                new[c.name] = c.value
            elif c.config_operation == DELETE:
                new.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                raise AdminError(
                    ErrorCode.invalid_config,
                    f"Config value append is not allowed for config key: {c.name}",
                )
            else:
                raise AdminError(
                    ErrorCode.invalid_request, f"Unknown config operation {c.config_operation}"
                )
        await set_group_config(broker, r.resource_name, new, body.validate_only)

    async def alter_logger(r: Any) -> None:
        changes = [(c.name, c.value, c.config_operation) for c in r.configs]
        try:
            broker_loggers.apply(r.resource_name, broker.broker_id, changes,
                                 validate_only=body.validate_only)
        except broker_loggers.LoggerConfigError as e:
            raise AdminError(e.error_code, e.message) from e

    return await alter_resources(
        broker,
        body.resources,
        alter_topic,
        alter_broker,
        authorized_types=(TOPIC, BROKER, BROKER_LOGGER, GROUP),
        alter_group=alter_group,
        alter_logger=alter_logger,
    )
