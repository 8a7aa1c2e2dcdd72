"""DescribeConfigs (key 32) for topics and this broker: its static configs (read only) and its
dynamic ones (`server/broker_configs.py`); the empty name describes the cluster-wide dynamic
defaults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.log.config import SERVER_CONFIG_SYNONYMS, TOPIC_CONFIG_KEYS, ConfigType
from wherry.security.acl import AclOperation
from wherry.server import broker_configs, broker_loggers
from wherry.server.authz import AUTHORIZATION_MESSAGES, config_resource_denied
from wherry.server.dynamic_keys import ALL_DYNAMIC
from wherry.server.static_configs import static_configs
from wherry.share.config import GROUP_CONFIG_KEYS

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6
DYNAMIC_GROUP_CONFIG = 8

_VALUES_ONLY = broker_configs.EntryDetail()  # no synonyms, no documentation


def topic_config_entries(
    broker: BrokerServices,
    overrides: Mapping[str, str],
    keys: Iterable[str] | None = None,
    *,
    detail: broker_configs.EntryDetail = _VALUES_ONLY,
    dynamic: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
) -> list[dict[str, Any]]:
    """`dynamic`: this broker's and the cluster default's dynamic broker configs, whose log
    defaults (`log.retention.ms`, ...) rank between the topic's overrides and the static
    broker configs."""
    defaults = broker.config.log_defaults
    raw = broker.config.raw
    dynamic_synonyms = {
        topic_name: broker_configs.dynamic_synonyms(server_name, *dynamic)
        for server_name, topic_name in broker_configs.DYNAMIC_LOG_KEYS.items()
    }
    names = list(TOPIC_CONFIG_KEYS) if keys is None else [k for k in keys if k in TOPIC_CONFIG_KEYS]
    out = []
    for name in names:
        key = TOPIC_CONFIG_KEYS[name]
        broker_synonyms = [s for s in SERVER_CONFIG_SYNONYMS.get(name, ()) if s in raw]
        synonyms: list[dict[str, Any]] = []
        live = dynamic_synonyms.get(name, [])
        if name in overrides:
            value, source = overrides[name], DYNAMIC_TOPIC_CONFIG
            synonyms.append({"name": name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
        elif live:
            value, source = live[0]["value"], live[0]["source"]
        elif broker_synonyms:
            value, source = defaults.value_of(name), STATIC_BROKER_CONFIG
        else:
            value, source = key.default_str, DEFAULT_CONFIG
        synonyms += live
        synonyms += [
            {"name": s, "value": raw[s], "source": STATIC_BROKER_CONFIG} for s in broker_synonyms
        ]
        if key.server_name is not None or not synonyms:
            synonyms.append(
                {
                    "name": key.server_name or name,
                    "value": key.default_str,
                    "source": DEFAULT_CONFIG,
                }
            )
        out.append(detail.entry(name, value, source, synonyms, key.type, key.doc))
    return out


def broker_config_entries(
    broker: BrokerServices,
    keys: Iterable[str] | None,
    detail: broker_configs.EntryDetail = _VALUES_ONLY,
) -> list[dict[str, Any]]:
    """The broker's static configs (`server/static_configs.py`): each known key and each key
    given, its value in force, given (STATIC_BROKER_CONFIG) or not (DEFAULT_CONFIG); its
    synonyms are the value given and the default. Read only unless the key is dynamic."""
    raw = broker.config.raw
    out = []
    for name, c in static_configs(broker.config, keys).items():
        hide = c.sensitive
        synonyms = [
            {"name": name, "value": None if hide else text, "source": source}
            for text, source, present in (
                (raw.get(name), STATIC_BROKER_CONFIG, name in raw),
                (c.default, DEFAULT_CONFIG, c.default is not None),
            )
            if present
        ]
        source = STATIC_BROKER_CONFIG if name in raw else DEFAULT_CONFIG
        out.append(
            detail.entry(
                name,
                None if hide else c.value,
                source,
                synonyms,
                c.type,
                None,
                read_only=name not in ALL_DYNAMIC,
                sensitive=hide,
            )
        )
    return out


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    body = req.body
    detail = broker_configs.EntryDetail(
        synonyms=getattr(body, "include_synonyms", False),
        documentation=getattr(body, "include_documentation", False),
    )
    results = []
    for r in body.resources:
        base = {
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "error_code": ErrorCode.none,
            "error_message": None,
            "configs": [],
        }
        keys = r.configuration_keys
        # Kafka: DESCRIBE_CONFIGS on the topic, or on the cluster for a broker (logger).
        denied = config_resource_denied(
            broker, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name
        )
        if denied is not None:
            results.append(
                {**base, "error_code": denied, "error_message": AUTHORIZATION_MESSAGES[denied]}
            )
            continue
        if r.resource_type == TOPIC:
            if not broker.cache.contains_topic(r.resource_name):
                results.append(
                    {
                        **base,
                        "error_code": ErrorCode.unknown_topic_or_partition,
                        "error_message": f"Topic {r.resource_name} does not exist",
                    }
                )
                continue
            overrides = await broker.admin.topic_overrides(r.resource_name)
            base["configs"] = topic_config_entries(
                broker,
                overrides,
                keys,
                detail=detail,
                dynamic=(
                    await broker.admin.broker_config(broker.broker_id),
                    await broker.admin.broker_config(None),
                ),
            )
        elif r.resource_type == BROKER and r.resource_name == "":
            base["configs"] = broker_configs.describe_entries(
                None,
                await broker.admin.broker_config(None),
                broker.config.raw,
                keys,
                detail,
            )
        elif r.resource_type == BROKER:
            if r.resource_name != str(broker.broker_id):
                results.append(
                    {
                        **base,
                        "error_code": ErrorCode.invalid_request,
                        "error_message": f"Unexpected broker id, expected "
                        f"{broker.broker_id} or empty string, but "
                        f"received {r.resource_name}",
                    }
                )
                continue
            base["configs"] = await this_broker_entries(broker, keys, detail)
        elif r.resource_type == BROKER_LOGGER:
            problem = broker_loggers.resource_problem(r.resource_name, broker.broker_id)
            if problem is not None:
                base.update(error_code=ErrorCode.invalid_request, error_message=problem)
            else:
                base["configs"] = logger_entries(keys, detail)
        elif r.resource_type == GROUP and not r.resource_name:
            base.update(
                error_code=ErrorCode.invalid_request,
                error_message="Group name must not be empty",
            )
        elif r.resource_type == GROUP:
            base["configs"] = await group_config_entries(broker, r.resource_name, keys, detail)
        else:
            base.update(
                error_code=ErrorCode.invalid_request,
                error_message=f"Unsupported resource type {r.resource_type}",
            )
        results.append(base)
    return {"throttle_time": 0, "results": results}


async def this_broker_entries(
    broker: BrokerServices, keys: Iterable[str] | None, detail: broker_configs.EntryDetail
) -> list[dict[str, Any]]:
    """Every config of this broker: its dynamic ones, and the static ones no dynamic value
    replaces."""
    dynamic = broker_configs.describe_entries(
        await broker.admin.broker_config(broker.broker_id),
        await broker.admin.broker_config(None),
        broker.config.raw,
        keys,
        detail,
    )
    set_live = {e["name"] for e in dynamic}
    static = broker_config_entries(broker, keys, detail)
    return [e for e in static if e["name"] not in set_live] + dynamic


def logger_entries(
    keys: Iterable[str] | None, detail: broker_configs.EntryDetail
) -> list[dict[str, Any]]:
    """A BROKER_LOGGER resource: each logger and its level, no synonyms (as Kafka)."""
    return [
        detail.entry(name, level, DYNAMIC_BROKER_LOGGER_CONFIG, [], ConfigType.UNKNOWN, None)
        for name, level in broker_loggers.levels(keys)
    ]


async def group_config_entries(
    broker: BrokerServices,
    group: str,
    keys: Iterable[str] | None,
    detail: broker_configs.EntryDetail,
) -> list[dict[str, Any]]:
    """A GROUP resource (type 32): every group config (Kafka 4.1's GroupConfig), the group's
    own value or the broker's default."""
    stored = await broker.shares.stored_group_config(group)
    shares = broker.shares.config
    out = []
    for name, key in GROUP_CONFIG_KEYS.items():
        if keys is not None and name not in keys:
            continue
        default = shares.default_of(name)
        synonyms: list[dict[str, Any]] = []
        if name in stored:
            value, source = stored[name], DYNAMIC_GROUP_CONFIG
            synonyms.append({"name": name, "value": value, "source": source})
        else:
            value, source = default, DEFAULT_CONFIG
        if key.broker_default:
            synonyms.append(
                {"name": key.broker_default, "value": default, "source": DEFAULT_CONFIG}
            )
        config_type = ConfigType.INT if key.type == "int" else ConfigType.STRING
        out.append(detail.entry(name, value, source, synonyms, config_type, key.doc))
    return out
