"""The static broker configs a broker's DescribeConfigs lists beside its dynamic ones.

Kafka describes a broker with every config it defines and every key it was given: each with
the value in force (the text given, else the default), its source (STATIC_BROKER_CONFIG or
DEFAULT_CONFIG), its type, and whether it is read only (not dynamic). Here that is every key
the broker reads (`config_keys.KNOWN_KEYS`) and every key given in its properties; the value
of each comes from where the broker holds it: `BrokerConfig`, the log defaults, the
connection limits, the replica fetchers', share groups' and fetch sessions' settings. A key
whose type is unknown, or a password, is sensitive: its value is not shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields

from wherry.common.record import frozen_record
from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigType, LogConfig, unit_synonym_defaults
from wherry.observability.endpoints import HttpEndpoint
from wherry.replication.fetch_session import DEFAULT_CACHE_SLOTS, DEFAULT_EVICTION_MS
from wherry.replication.fetcher import FETCHER_CONFIG_KEYS, FetcherConfig
from wherry.server import dynamic_keys as dk
from wherry.server.config import BrokerConfig, number_type
from wherry.server.config_keys import KNOWN_KEYS
from wherry.server.connection_limits import ConnectionLimits, limit_values
from wherry.share.broker_keys import BROKER_DEFAULTS as SHARE_DEFAULTS

__all__ = ["StaticConfig", "static_configs"]

# Broker keys whose BrokerConfig field is not the key with underscores for dots.
_FIELDS: Mapping[str, str] = {
    "node.id": "broker_id",
    "broker.rack": "rack",
    "advertised.listeners": "advertised_listeners",
}
# field -> its annotation (text: the module postpones them)
_FIELD_TYPES: Mapping[str, str] = {f.name: str(f.type) for f in fields(BrokerConfig)}
# Settings wherry accepts and ignores, and security settings read from the properties as
# given: Kafka's defaults (none: Kafka's default is null).
_KAFKA_DEFAULTS: Mapping[str, tuple[str | None, ConfigType]] = {
    "num.network.threads": ("3", ConfigType.INT),
    "num.io.threads": ("8", ConfigType.INT),
    "num.replica.fetchers": ("1", ConfigType.INT),
    "num.recovery.threads.per.data.dir": ("2", ConfigType.INT),
    "background.threads": ("10", ConfigType.INT),
    "queued.max.requests": ("500", ConfigType.INT),
    "socket.send.buffer.bytes": ("102400", ConfigType.INT),
    "socket.receive.buffer.bytes": ("102400", ConfigType.INT),
    "replica.socket.receive.buffer.bytes": ("65536", ConfigType.INT),
    "inter.broker.protocol.version": (None, ConfigType.STRING),
    "broker.id.generation.enable": ("true", ConfigType.BOOLEAN),
    "security.inter.broker.protocol": ("PLAINTEXT", ConfigType.STRING),
    "inter.broker.listener.name": (None, ConfigType.STRING),
    "authorizer.class.name": ("", ConfigType.STRING),
    "super.users": (None, ConfigType.STRING),
    "allow.everyone.if.no.acl.found": ("false", ConfigType.BOOLEAN),
    "zookeeper.set.acl": ("false", ConfigType.BOOLEAN),
    "ssl.allow.dn.changes": ("false", ConfigType.BOOLEAN),
    "ssl.allow.san.changes": ("false", ConfigType.BOOLEAN),
    "zookeeper.digest.username": (None, ConfigType.STRING),
    "zookeeper.digest.password": (None, ConfigType.PASSWORD),
    "password.encoder.secret": (None, ConfigType.PASSWORD),
    "log.dir": (None, ConfigType.STRING),  # log.dirs holds wherry's default
}


@frozen_record(slots=True)
class StaticConfig:
    """One static broker config: the value in force, the default, the type."""

    value: str | None
    default: str | None
    type: ConfigType

    @property
    def sensitive(self) -> bool:
        return self.type in (ConfigType.PASSWORD, ConfigType.UNKNOWN)


def static_configs(cfg: BrokerConfig, keys: Iterable[str] | None = None) -> dict[str, StaticConfig]:
    """Every static config of the broker (`keys`: only those), by name, sorted."""
    wanted = sorted({*KNOWN_KEYS, *cfg.raw} if keys is None else set(keys))
    defaults = _defaults()
    out: dict[str, StaticConfig] = {}
    for name in wanted:
        if name in defaults:
            default, type_ = defaults[name]
            value = _in_force(cfg, name, default)
        elif name in cfg.raw:  # a listener's own setting, or a key wherry does not read
            key = dk.key_of(name)
            default, type_ = None, (ConfigType.UNKNOWN if key is None else key.type)
            value = cfg.raw[name]
        else:
            continue
        out[name] = StaticConfig(value, default, type_)
    return out


def _in_force(cfg: BrokerConfig, name: str, default: str | None) -> str | None:
    """The value the broker uses for `name`, as Kafka writes it (the given text wins)."""
    if name in cfg.raw:
        return cfg.raw[name]
    if name in _SERVER_NAMES:
        return cfg.log_defaults.value_of(_SERVER_NAMES[name])
    if name in _LIMIT_KEYS:
        return limit_values(cfg.connection_limits)[name][0]
    field = _field(name)
    if field is not None:
        return _text(getattr(cfg, field))
    return default


def _field(name: str) -> str | None:
    field = _FIELDS.get(name, name.replace(".", "_"))
    return field if field in _FIELD_TYPES else None


_SERVER_NAMES: Mapping[str, str] = {
    key.server_name: topic for topic, key in TOPIC_CONFIG_KEYS.items() if key.server_name
}
_LIMIT_KEYS = frozenset(limit_values(ConnectionLimits()))
_DEFAULTS: dict[str, tuple[str | None, ConfigType]] = {}


def _defaults() -> dict[str, tuple[str | None, ConfigType]]:
    """name -> (default, type) of every static key wherry knows (made on first use)."""
    if _DEFAULTS:
        return _DEFAULTS
    out = _DEFAULTS
    base = BrokerConfig()
    for name in KNOWN_KEYS:
        field = _field(name)
        if field is not None:
            default = getattr(base, field)
            out[name] = (_text(default), _type_of(name, _FIELD_TYPES[field]))
    out.update(_KAFKA_DEFAULTS)
    log_defaults = LogConfig()
    for server_name, topic in _SERVER_NAMES.items():
        out[server_name] = (log_defaults.value_of(topic), TOPIC_CONFIG_KEYS[topic].type)
    for name, text in unit_synonym_defaults().items():
        out[name] = (text, ConfigType.INT)
    for name, (text, type_) in limit_values(ConnectionLimits()).items():
        out[name] = (text, type_)
    fetcher = FetcherConfig()
    for name, field in FETCHER_CONFIG_KEYS.items():
        out[name] = (str(getattr(fetcher, field)), ConfigType.INT)
    out["max.incremental.fetch.session.cache.slots"] = (str(DEFAULT_CACHE_SLOTS), ConfigType.INT)
    out["min.incremental.fetch.session.eviction.ms"] = (str(DEFAULT_EVICTION_MS), ConfigType.INT)
    for name, number in SHARE_DEFAULTS.items():
        out[name] = (str(number), number_type(name))
    return out


def _type_of(name: str, annotation: str) -> ConfigType:
    """A BrokerConfig field's DescribeConfigs type, from its annotation."""
    kind = annotation.split("[", 1)[0].split("|", 1)[0].strip()
    if kind == "bool":
        return ConfigType.BOOLEAN
    if kind == "int":
        return number_type(name)
    if kind == "tuple":
        return ConfigType.LIST
    return ConfigType.STRING


def _text(value: object) -> str | None:
    """A config value as Kafka shows it: booleans in lower case, lists comma-separated."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(t for v in value if (t := _text(v)) is not None)
    if isinstance(value, HttpEndpoint):
        return value.url()
    return str(value)  # numbers, text, listeners (Endpoint), paths
