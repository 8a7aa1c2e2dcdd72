"""Dynamic broker configs (Kafka's `DynamicBrokerConfig`, ZooKeeper mode).

A broker's dynamic configs live at ``/config/brokers/<id>``, the cluster-wide defaults at
``/config/brokers/<default>``; a per-broker value wins over the default, which wins over the
static one (the broker's properties), which wins over the built-in default. Writers
(`AdminManager.set_broker_config`) add a ``/config/changes`` notification with
``entity_path`` ``brokers/<id>`` or ``brokers/<default>``; every broker's config-change
listener then reloads (`DynamicBrokerConfig.load`) and applies what it can at once
(`dynamic_apply.py`).

Which keys are dynamic, and where, is Kafka's set (`dynamic_keys.py`); what an alter may not
do is checked by `dynamic_validation.py`. This module holds what is stored and describes it,
and the KIP-73 replication throttles, `leader.replication.throttled.rate` and
`follower.replication.throttled.rate`, which bound this broker's `ReplicationQuotaManager`s;
the topics' `*.replication.throttled.replicas` say which partitions those quotas throttle
(`update_topic`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from wherry.common.record import frozen_record
from wherry.coordination import paths
from wherry.coordination.store import MetadataStore, NoNodeError
from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigType
from wherry.replication.quota import (
    UNLIMITED_RATE,
    ReplicationQuotaManager,
    throttled_partitions,
)
from wherry.server import dynamic_keys as dk

log = logging.getLogger(__name__)

__all__ = [
    "DYNAMIC_BROKER_KEYS",
    "DYNAMIC_LOG_KEYS",
    "FOLLOWER_REPLICATION_THROTTLED_RATE",
    "LEADER_REPLICATION_THROTTLED_RATE",
    "DynamicBrokerConfig",
    "EntryDetail",
    "describe_entries",
    "resource_broker_id",
]

LEADER_REPLICATION_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_REPLICATION_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"

# DescribeConfigs config sources (Kafka's ConfigSource ids)
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


@frozen_record(slots=True)
class ThrottleKey:
    name: str
    doc: str


DYNAMIC_BROKER_KEYS: Mapping[str, ThrottleKey] = {
    k.name: k
    for k in (
        ThrottleKey(
            FOLLOWER_REPLICATION_THROTTLED_RATE,
            "A long representing the upper bound (bytes/sec) on replication traffic for "
            "followers enumerated in the property follower.replication.throttled.replicas "
            "(for each topic). It is suggested that the limit be kept above 1MB/s for accurate "
            "behaviour.",
        ),
        ThrottleKey(
            LEADER_REPLICATION_THROTTLED_RATE,
            "A long representing the upper bound (bytes/sec) on replication traffic for "
            "leaders enumerated in the property leader.replication.throttled.replicas (for "
            "each topic). It is suggested that the limit be kept above 1MB/s for accurate "
            "behaviour.",
        ),
    )
}
"""The replication throttles, by name (with their documentation)."""

DYNAMIC_LOG_KEYS: Mapping[str, str] = dk.LOG_KEYS
"""The broker's log defaults Kafka lets change live (its DynamicLogConfig: every topic config's
broker synonym, e.g. `log.retention.ms` -> `retention.ms`, `message.max.bytes` ->
`max.message.bytes`): server name -> topic config name. Set per broker or as the cluster
default, they apply at once to every topic that has no override of its own."""

# Built-in defaults of the dynamic keys, as DescribeConfigs reports them among the synonyms
# (the throttles are no broker properties in Kafka: no default synonym).
_BUILT_IN: Mapping[str, str] = {
    k.name: k.default
    for k in dk.DYNAMIC_KEYS.values()
    if k.default is not None and k.name not in dk.QUOTA_KEYS
}


def resource(name: str) -> str:
    """A BROKER resource as Kafka's messages name it."""
    return f"ConfigResource(type=BROKER, name='{name}')"


PASSWORD_ENCODER_SECRET = "password.encoder.secret"


def encode_passwords(
    props: Mapping[str, str], static: Mapping[str, str], *, per_broker: bool
) -> dict[str, str]:
    """Kafka's toPersistentProps: the password configs encoded with the broker's
    `password.encoder.secret` (raises ValueError with Kafka's message when they cannot be)."""
    from wherry.security import password_encoder

    out = dict(props)
    for name, value in props.items():
        if not dk.is_password(name):
            continue
        if not per_broker:
            raise ValueError("Password config can be defined only at broker level")
        secret = static.get(PASSWORD_ENCODER_SECRET)
        if secret is None:
            raise ValueError("Password encoder secret not configured")
        out[name] = password_encoder.encode(secret, value)
    return out


def decode_passwords(stored: Mapping[str, str], static: Mapping[str, str]) -> dict[str, str]:
    """Kafka's fromPersistentProps for the passwords: decoded, or dropped (with an error
    logged) when this broker's secret cannot decode them."""
    out = dict(stored)
    for name, value in stored.items():
        if not dk.is_password(name):
            continue
        from wherry.security import password_encoder  # (hashlib): only with a password

        try:
            out[name] = password_encoder.decode(static.get(PASSWORD_ENCODER_SECRET, ""), value)
        except password_encoder.PasswordDecodeError:
            log.error("Dynamic password config %s could not be decoded, ignoring.", name)
            del out[name]
    return out


def resource_broker_id(name: str, broker_id: int) -> int | None:
    """Kafka's getBrokerId: None for the cluster-wide default (an empty name), else the id,
    which must be this broker's (a BROKER resource is altered on its own broker)."""
    if not name:
        return None
    from kio.schema.errors import ErrorCode  # an admin request's: not imported by a start

    from wherry.server.dynamic_validation import DynamicConfigError

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
    return int(dk.parse_value(name, dk.DYNAMIC_KEYS[name], value))


def describe_entries(
    per_broker: Mapping[str, str] | None,
    defaults: Mapping[str, str],
    static: Mapping[str, str],
    keys: Iterable[str] | None,
    detail: EntryDetail,
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of the dynamic configs. For a broker (`per_broker` given)
    every dynamic key, the log defaults set dynamically and any other key stored for it,
    each with its source (this broker's value, the cluster default's, the static one, the
    built-in default); for the cluster default (`per_broker` None) only the keys set at the
    default level, as Kafka lists them. Passwords and keys of unknown type are sensitive:
    no value."""
    out = []
    # The dynamic log defaults that are set (the unset ones are the broker's static configs,
    # which DescribeConfigs lists apart).
    for name, topic_name in DYNAMIC_LOG_KEYS.items():
        if keys is not None and name not in keys:
            continue
        if not dynamic_synonyms(name, per_broker, defaults):
            continue
        synonyms = synonym_chain(name, per_broker, defaults, static)
        if per_broker is None:
            synonyms = [s for s in synonyms if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG]
        log_key = TOPIC_CONFIG_KEYS[topic_name]
        value, source = synonyms[0]["value"], synonyms[0]["source"]
        out.append(detail.entry(name, value, source, synonyms, log_key.type, log_key.doc))
    listed = set(dk.LOG_KEYS)
    if per_broker is None:
        names = [n for n in defaults if n not in listed]
    else:
        names = list(dk.DYNAMIC_KEYS) + sorted(
            n for n in {*per_broker, *defaults} if n not in dk.DYNAMIC_KEYS and n not in listed
        )
    for name in names:
        if keys is not None and name not in keys:
            continue
        key = dk.key_of(name)
        sensitive = key is None or key.type == ConfigType.PASSWORD
        chain = synonym_chain(name, per_broker, defaults, static, sensitive=sensitive)
        if per_broker is None:
            chain = [s for s in chain if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG]
        value = chain[0]["value"] if chain else (key.default if key is not None else None)
        doc = DYNAMIC_BROKER_KEYS[name].doc if name in DYNAMIC_BROKER_KEYS else None
        out.append(
            detail.entry(
                name,
                None if sensitive else value,
                chain[0]["source"] if chain else DEFAULT_CONFIG,
                chain,
                config_type=ConfigType.UNKNOWN if key is None else key.type,
                documentation=doc,
                read_only=name not in dk.ALL_DYNAMIC,
                sensitive=sensitive,
            )
        )
    return out


def synonym_chain(
    name: str,
    per_broker: Mapping[str, str] | None,
    defaults: Mapping[str, str],
    static: Mapping[str, str],
    *,
    sensitive: bool = False,
) -> list[dict[str, Any]]:
    """Kafka's DescribeConfigs synonyms of a broker config: each synonym name's value set for
    this broker, then at the cluster default, then statically, then its built-in default
    (the first one is in force); a listener override's chain goes on to its base key."""
    names = dk.broker_synonyms(name)
    layers: list[tuple[Mapping[str, str], int]] = [
        (per_broker or {}, DYNAMIC_BROKER_CONFIG),
        (defaults, DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static, STATIC_BROKER_CONFIG),
        (_BUILT_IN, DEFAULT_CONFIG),
    ]
    out = [
        {"name": n, "value": None if sensitive else layer[n], "source": source}
        for layer, source in layers
        for n in names
        if n in layer
    ]
    while out and out[0]["name"] != name:
        out.pop(0)
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


@frozen_record(slots=True)
class EntryDetail:
    """What a DescribeConfigs request asks to see of each entry beyond its value: the
    synonyms (`include_synonyms`) and the documentation (`include_documentation`)."""

    synonyms: bool = False
    documentation: bool = False

    def entry(
        self,
        name: str,
        value: str | None,
        source: int,
        synonyms: list[dict[str, Any]],
        config_type: ConfigType,
        documentation: str | None,
        *,
        read_only: bool = False,
        sensitive: bool = False,
    ) -> dict[str, Any]:
        """One DescribeConfigs result entry (by default a config that can be altered, not
        sensitive), its synonyms and documentation shown only when asked for."""
        return {
            "name": name,
            "value": value,
            "read_only": read_only,
            "is_default": source == DEFAULT_CONFIG,
            "config_source": source,
            "is_sensitive": sensitive,
            "synonyms": synonyms if self.synonyms else [],
            "config_type": int(config_type),
            "documentation": documentation if self.documentation else None,
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

    def __init__(
        self,
        broker_id: int,
        *,
        quota_window_num: int,
        quota_window_ms: int,
        static: Mapping[str, str] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_prefix = f"[Broker id={broker_id}]"
        self.static: Mapping[str, str] = static or {}
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
        self.per_broker = decode_passwords(await read_entity(store, self.broker_id), self.static)
        self.defaults = decode_passwords(await read_entity(store, None), self.static)
        self.leader_quota.update_quota(self.rate(LEADER_REPLICATION_THROTTLED_RATE))
        self.follower_quota.update_quota(self.rate(FOLLOWER_REPLICATION_THROTTLED_RATE))
        log.info(
            "[Broker id=%d] replication throttles: leader %s, follower %s",
            self.broker_id,
            _rate_text(self.leader_quota.bound),
            _rate_text(self.follower_quota.bound),
        )

    def rate(self, name: str) -> int:
        """A throttle rate in force: per-broker value > cluster default > unlimited."""
        for source in (self.per_broker, self.defaults):
            if name in source:
                try:
                    return parse_rate(name, source[name])
                except ValueError:
                    log.warning("[Broker id=%d] ignoring stored %s", self.broker_id, name)
        return UNLIMITED_RATE

    def effective(self, static: Mapping[str, str]) -> dict[str, str]:
        """The broker's configuration in force: `static` under the dynamic configs."""
        from wherry.server.dynamic_validation import effective_props  # not needed by a start

        return effective_props(static, self.defaults, self.per_broker)

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


def _rate_text(bound: int) -> str:
    return "none" if bound >= UNLIMITED_RATE else f"{bound} B/s"
