"""Dynamic broker configs (Kafka's `DynamicConfig.Broker`, ZooKeeper mode).

A broker's dynamic configs live at ``/config/brokers/<id>``, the cluster-wide defaults at
``/config/brokers/<default>``; a per-broker value wins over the default, which wins over the
built-in default. Writers (`AdminManager.set_broker_config`) add a ``/config/changes``
notification with ``entity_path`` ``brokers/<id>`` or ``brokers/<default>``; every broker's
config-change listener then reloads (`DynamicBrokerConfig.load`).

The dynamic keys supported are the KIP-73 replication throttles,
`leader.replication.throttled.rate` and `follower.replication.throttled.rate` (bytes/s, LONG,
at least 0, default Long.MAX_VALUE: unlimited); they set the bounds of this broker's
`ReplicationQuotaManager`s. The topics' `*.replication.throttled.replicas` say which
partitions those quotas throttle (`update_topic`). Any other key in an alter is refused as
Kafka refuses a config it cannot update dynamically (INVALID_REQUEST).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigError, ConfigType, LogConfig
from wherry.replication.quota import (
    UNLIMITED_RATE,
    ReplicationQuotaManager,
    throttled_partitions,
)

log = logging.getLogger(__name__)

__all__ = [
    "DYNAMIC_BROKER_KEYS",
    "DYNAMIC_LOG_KEYS",
    "FOLLOWER_REPLICATION_THROTTLED_RATE",
    "LEADER_REPLICATION_THROTTLED_RATE",
    "DynamicBrokerConfig",
    "DynamicConfigError",
    "apply_incremental",
    "describe_entries",
    "resource_broker_id",
    "validate_dynamic",
]

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"

# DescribeConfigs config sources (Kafka's ConfigSource ids)
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
DEFAULT_CONFIG = 5

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class DynamicKey:
    name: str
    doc: str
    type: ConfigType = ConfigType.LONG
    default: int = UNLIMITED_RATE


DYNAMIC_BROKER_KEYS: Mapping[str, DynamicKey] = {
    k.name: k
    for k in (
        DynamicKey(
            FOLLOWER_REPLICATION_THROTTLED_RATE,
            "A long representing the upper bound (bytes/sec) on replication traffic for "
            "followers enumerated in the property follower.replication.throttled.replicas "
            "(for each topic). It is suggested that the limit be kept above 1MB/s for accurate "
            "behaviour.",
        ),
        DynamicKey(
            LEADER_REPLICATION_THROTTLED_RATE,
            "A long representing the upper bound (bytes/sec) on replication traffic for "
            "leaders enumerated in the property leader.replication.throttled.replicas (for "
            "each topic). It is suggested that the limit be kept above 1MB/s for accurate "
            "behaviour.",
        ),
    )
}
"""The broker configs that can be altered at run time, by name."""

_LONG_RE = re.compile(r"[+-]?[0-9]+")


# Kafka's DynamicLogConfig.ExcludedConfigs: the message format version cannot change live.
_NOT_DYNAMIC_LOG_KEYS = frozenset({"log.message.format.version"})

DYNAMIC_LOG_KEYS: Mapping[str, str] = {
    key.server_name: key.name
    for key in TOPIC_CONFIG_KEYS.values()
    if key.server_name and key.server_name not in _NOT_DYNAMIC_LOG_KEYS
}
"""The broker's log defaults Kafka lets change live (its DynamicLogConfig: every topic config's
broker synonym, e.g. `log.retention.ms` -> `retention.ms`, `message.max.bytes` ->
`max.message.bytes`): server name -> topic config name. Set per broker or as the cluster
default, they apply at once to every topic that has no override of its own."""


class DynamicConfigError(Exception):
    """A refused broker config alter; `error_code` is the answer (Kafka wraps its
    ConfigException in an InvalidRequestException: INVALID_REQUEST)."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _resource(name: str) -> str:
    return f"ConfigResource(type=BROKER, name='{name}')"


def resource_broker_id(name: str, broker_id: int) -> int | None:
    """Kafka's getBrokerId: None for the cluster-wide default (an empty name), else the id,
    which must be this broker's (a BROKER resource is altered on its own broker)."""
    if not name:
        return None
    try:
        requested = int(name)
    except ValueError:
        raise DynamicConfigError(
            ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if requested != broker_id:
        raise DynamicConfigError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker_id}, but received {name}",
        )
    return requested


def parse_rate(name: str, value: str) -> int:
    """A throttle rate: a LONG of at least 0 (raises ValueError with Kafka's wording)."""
    text = value.strip()
    if not _LONG_RE.fullmatch(text) or not -(2**63) <= int(text) <= UNLIMITED_RATE:
        raise ValueError(
            f"Invalid value {value} for configuration {name}: Not a number of type LONG"
        )
    rate = int(text)
    if rate < 0:
        raise ValueError(f"Invalid value {rate} for configuration {name}: Value must be at least 0")
    return rate


def validate_dynamic(props: Mapping[str, str], resource_name: str) -> None:
    """Kafka's DynamicBrokerConfig.validate for the keys wherry supports."""
    fixed = sorted(k for k in props if k not in DYNAMIC_BROKER_KEYS and k not in DYNAMIC_LOG_KEYS)
    try:
        if fixed:
            raise ValueError(f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
        for name, value in props.items():
            if name in DYNAMIC_LOG_KEYS:
                topic_name = DYNAMIC_LOG_KEYS[name]
                try:
                    LogConfig().with_props({topic_name: value})
                except ConfigError as e:
                    raise ValueError(
                        f"Invalid value {value} for configuration {name}: {e.message}"
                    ) from None
            else:
                parse_rate(name, value)
    except ValueError as e:
        raise DynamicConfigError(
            ErrorCode.invalid_request,
            f"Invalid config value for resource {_resource(resource_name)}: {e}",
        ) from None


def apply_incremental(current: Mapping[str, str], ops: Iterable[Any]) -> dict[str, str]:
    """IncrementalAlterConfigs' operations on a broker entity's stored configs (validated
    afterwards by `validate_dynamic`)."""
    new = dict(current)
    for op in ops:
        match op.config_operation:
            case 0:
                if op.value is None:
                    raise DynamicConfigError(
                        ErrorCode.invalid_request,
                        f"Null value not supported for : SET:{op.name}",
                    )
                new[op.name] = op.value
            case 1:
                new.pop(op.name, None)
            case 2 | 3 if op.name in DYNAMIC_BROKER_KEYS:  # no LIST keys among them
                what = "append" if op.config_operation == APPEND else "subtract"
                raise DynamicConfigError(
                    ErrorCode.invalid_request,
                    f"Config value {what} is not allowed for config key: {op.name}",
                )
            case 2 | 3:
                new[op.name] = op.value or ""  # refused by validation: not dynamic
            case other:
                raise DynamicConfigError(
                    ErrorCode.invalid_request, f"Unknown config operation {other}"
                )
    return new


def describe_entries(
    per_broker: Mapping[str, str] | None,
    defaults: Mapping[str, str],
    keys: Iterable[str] | None,
    *,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of the dynamic keys. For a broker (`per_broker` given) every
    dynamic key, with its source; for the cluster default (`per_broker` None) only the keys
    set at the default level, as Kafka lists them."""
    wanted = list(DYNAMIC_BROKER_KEYS) if keys is None else list(keys)
    out = _log_entries(per_broker, defaults, keys, include_synonyms, include_documentation)
    for name in wanted:
        key = DYNAMIC_BROKER_KEYS.get(name)
        if key is None or (per_broker is None and name not in defaults):
            continue
        synonyms = dynamic_synonyms(name, per_broker, defaults)
        if synonyms:
            value, source = synonyms[0]["value"], synonyms[0]["source"]
        else:
            value, source = str(key.default), DEFAULT_CONFIG
        out.append(
            config_entry(
                name,
                value,
                source,
                synonyms if include_synonyms else [],
                config_type=key.type,
                documentation=key.doc if include_documentation else None,
            )
        )
    return out


def dynamic_synonyms(
    name: str, per_broker: Mapping[str, str] | None, defaults: Mapping[str, str]
) -> list[dict[str, Any]]:
    """DescribeConfigs synonyms of a dynamic broker config: this broker's value, then the
    cluster default's (the first one is in force)."""
    out: list[dict[str, Any]] = []
    if per_broker is not None and name in per_broker:
        out.append({"name": name, "value": per_broker[name], "source": DYNAMIC_BROKER_CONFIG})
    if name in defaults:
        out.append({"name": name, "value": defaults[name], "source": DYNAMIC_DEFAULT_BROKER_CONFIG})
    return out


def _log_entries(
    per_broker: Mapping[str, str] | None,
    defaults: Mapping[str, str],
    keys: Iterable[str] | None,
    include_synonyms: bool,
    include_documentation: bool,
) -> list[dict[str, Any]]:
    """Entries of the dynamic log defaults that are set (the unset ones are the broker's
    static configs, which DescribeConfigs lists apart)."""
    out = []
    for name, topic_name in DYNAMIC_LOG_KEYS.items():
        if keys is not None and name not in keys:
            continue
        synonyms = dynamic_synonyms(name, per_broker, defaults)
        if not synonyms:
            continue
        key = TOPIC_CONFIG_KEYS[topic_name]
        out.append(
            config_entry(
                name,
                synonyms[0]["value"],
                synonyms[0]["source"],
                synonyms if include_synonyms else [],
                config_type=key.type,
                documentation=key.doc if include_documentation else None,
            )
        )
    return out


def config_entry(
    name: str,
    value: str | None,
    source: int,
    synonyms: list[dict[str, Any]],
    *,
    config_type: ConfigType,
    documentation: str | None,
) -> dict[str, Any]:
    """One DescribeConfigs result entry (a config that can be altered, not sensitive)."""
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "is_default": source == DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": int(config_type),
        "documentation": documentation,
    }


async def read_entity(store: MetadataStore, broker_id: int | None) -> dict[str, str]:
    """The stored configs of ``/config/brokers/<id>`` (or ``<default>`` for None)."""
    try:
        data, _ = await store.get(paths.broker_config_path(broker_id))
    except NoNodeError:
        return {}
    return paths.decode_config(data)


class DynamicBrokerConfig:
    """This broker's dynamic configs and the replication quotas they drive."""

    def __init__(self, broker_id: int, *, quota_window_num: int, quota_window_ms: int) -> None:
        self.broker_id = broker_id
        self.leader_quota = ReplicationQuotaManager(
            samples=quota_window_num, window_ms=quota_window_ms
        )
        self.follower_quota = ReplicationQuotaManager(
            samples=quota_window_num, window_ms=quota_window_ms
        )
        self.per_broker: dict[str, str] = {}
        self.defaults: dict[str, str] = {}

    async def load(self, store: MetadataStore) -> None:
        """(Re)read ``/config/brokers/<id>`` and ``<default>`` and apply them."""
        self.per_broker = await read_entity(store, self.broker_id)
        self.defaults = await read_entity(store, None)
        self.leader_quota.update_quota(self.rate(LEADER_REPLICATION_THROTTLED_RATE))
        self.follower_quota.update_quota(self.rate(FOLLOWER_REPLICATION_THROTTLED_RATE))
        log.info(
            "[Broker id=%d] replication throttles: leader %d B/s, follower %d B/s",
            self.broker_id,
            self.leader_quota.bound,
            self.follower_quota.bound,
        )

    def rate(self, name: str) -> int:
        """A throttle rate in force: per-broker value > cluster default > unlimited."""
        for source in (self.per_broker, self.defaults):
            if name in source:
                try:
                    return parse_rate(name, source[name])
                except ValueError:
                    log.warning("[Broker id=%d] ignoring stored %s", self.broker_id, name)
        return DYNAMIC_BROKER_KEYS[name].default

    def log_overrides(self) -> dict[str, str]:
        """The dynamic log defaults in force, as topic configs (per broker > cluster default)."""
        out: dict[str, str] = {}
        for name, topic_name in DYNAMIC_LOG_KEYS.items():
            for source in (self.per_broker, self.defaults):
                if name in source:
                    out[topic_name] = source[name]
                    break
        return out

    def applies_to(self, entity: str) -> bool:
        """Whether a ``brokers/...`` change notification concerns this broker."""
        return entity in (
            paths.broker_config_entity(None),
            paths.broker_config_entity(self.broker_id),
        )

    def update_topic(self, topic: str, overrides: Mapping[str, str] | None) -> None:
        """Which of a topic's partitions the quotas throttle on this broker, from its
        `*.replication.throttled.replicas` (None: the topic is gone)."""
        for quota, name in (
            (self.leader_quota, LEADER_THROTTLED_REPLICAS),
            (self.follower_quota, FOLLOWER_THROTTLED_REPLICAS),
        ):
            value = (overrides or {}).get(name, "")
            try:
                quota.mark_throttled(topic, throttled_partitions(value.split(","), self.broker_id))
            except ValueError:
                log.warning(
                    "[Broker id=%d] ignoring %s of %s: %r", self.broker_id, name, topic, value
                )
                quota.remove_throttle(topic)
