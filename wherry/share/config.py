"""Share-group settings: the broker's `group.share.*` configs (Kafka's ShareGroupConfig and
GroupCoordinatorConfig share keys) and the per-group configs of a GROUP config resource
(Kafka 4.1's GroupConfig: `/config/groups/<group>`), validated against the broker's bounds
with Kafka's messages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wherry.share.broker_keys import BROKER_DEFAULTS as _BROKER_DEFAULTS
from wherry.share.broker_keys import SHARE_BROKER_KEYS

if TYPE_CHECKING:  # the broker reads these keys with its config, long before a share group
    from wherry.share.partition import SharePartitionConfig

__all__ = [
    "GROUP_CONFIG_KEYS",
    "SHARE_BROKER_KEYS",
    "GroupConfigError",
    "ShareBrokerConfig",
    "ShareGroupSettings",
    "validate_group_config",
]

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"


class GroupConfigError(ValueError):
    """An invalid group config (INVALID_CONFIG), in Kafka's words."""


@dataclass(frozen=True, slots=True)
class _Key:
    type: str  # "int" | "string"
    broker_default: str  # the broker config that gives the default
    doc: str
    choices: tuple[str, ...] = ()


# name -> (type, the broker key holding its default, doc)
GROUP_CONFIG_KEYS: dict[str, _Key] = {
    "consumer.session.timeout.ms": _Key(
        "int", "group.consumer.session.timeout.ms",
        "The timeout to detect client failures when using the consumer group protocol.",
    ),
    "consumer.heartbeat.interval.ms": _Key(
        "int", "group.consumer.heartbeat.interval.ms",
        "The heartbeat interval given to the members of a consumer group.",
    ),
    "share.session.timeout.ms": _Key(
        "int", "group.share.session.timeout.ms",
        "The timeout to detect client failures when using the share group protocol.",
    ),
    "share.heartbeat.interval.ms": _Key(
        "int", "group.share.heartbeat.interval.ms",
        "The heartbeat interval given to the members of a share group.",
    ),
    "share.record.lock.duration.ms": _Key(
        "int", "group.share.record.lock.duration.ms",
        "The record acquisition lock duration in milliseconds for share groups.",
    ),
    "share.delivery.count.limit": _Key(
        "int", "group.share.delivery.count.limit",
        "The maximum number of delivery attempts for a record delivered to a share group.",
    ),
    "share.partition.max.record.locks": _Key(
        "int", "group.share.partition.max.record.locks",
        "Share-group record lock limit per share-partition.",
    ),
    "share.auto.offset.reset": _Key(
        "string", "", "The strategy to initialize the share-partition start offset.",
        ("latest", "earliest"),
    ),
    "share.isolation.level": _Key(
        "string", "",
        "Controls how to read records written transactionally (read_committed or "
        "read_uncommitted).",
        (READ_UNCOMMITTED, READ_COMMITTED),
    ),
}

_STRING_DEFAULTS = {"share.auto.offset.reset": "latest", "share.isolation.level": READ_UNCOMMITTED}


# group key -> (minimum broker key, maximum broker key)
_BOUNDS = {
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": (
        "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": (
        "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": (
        "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": (
        "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": (
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks"),
}


@dataclass(frozen=True, slots=True)
class ShareBrokerConfig:
    values: Mapping[str, int]

    @classmethod
    def from_props(cls, raw: Mapping[str, str]) -> ShareBrokerConfig:
        vals = dict(_BROKER_DEFAULTS)
        for k in _BROKER_DEFAULTS:
            if k in raw:
                try:
                    vals[k] = int(raw[k].strip())
                except ValueError as e:
                    raise ValueError(
                        f"Invalid value {raw[k]} for configuration {k}: Not a number of type INT"
                    ) from e
        return cls(vals)

    def __getitem__(self, key: str) -> int:
        return self.values[key]

    def default_of(self, group_key: str) -> str:
        k = GROUP_CONFIG_KEYS[group_key]
        if k.type == "string":
            return _STRING_DEFAULTS[group_key]
        return str(self.values[k.broker_default])


def validate_group_config(config: Mapping[str, str], broker: ShareBrokerConfig) -> None:
    """Kafka's GroupConfig.validate: known names, parsable values within the broker's bounds,
    session timeouts above heartbeat intervals. Raises GroupConfigError."""
    for name in config:
        if name not in GROUP_CONFIG_KEYS:
            raise GroupConfigError(f"Unknown group config name: {name}")
    merged = {k: config.get(k, broker.default_of(k)) for k in GROUP_CONFIG_KEYS}
    ints: dict[str, int] = {}
    for name, key in GROUP_CONFIG_KEYS.items():
        value = merged[name]
        if key.type == "int":
            try:
                ints[name] = int(value.strip())
            except ValueError as e:
                raise GroupConfigError(
                    f"Invalid value {value} for configuration {name}: Not a number of type INT"
                ) from e
            if ints[name] < 1:
                raise GroupConfigError(
                    f"Invalid value {value} for configuration {name}: Value must be at least 1"
                )
        elif value not in key.choices:
            raise GroupConfigError(
                f"Invalid value {value} for configuration {name}: String must be one of: "
                + ", ".join(key.choices)
            )
    for name, (lo, hi) in _BOUNDS.items():
        if ints[name] < broker[lo]:
            raise GroupConfigError(f"{name} must be greater than or equal to {lo}")
        if ints[name] > broker[hi]:
            raise GroupConfigError(f"{name} must be less than or equal to {hi}")
    if ints["consumer.session.timeout.ms"] <= ints["consumer.heartbeat.interval.ms"]:
        raise GroupConfigError(
            "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
        )
    if ints["share.session.timeout.ms"] <= ints["share.heartbeat.interval.ms"]:
        raise GroupConfigError(
            "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"
        )


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """A share group's effective settings: its group configs over the broker's defaults."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    delivery_count_limit: int
    max_record_locks: int
    auto_offset_reset: str
    isolation_level: str

    @classmethod
    def of(cls, overrides: Mapping[str, str], broker: ShareBrokerConfig) -> ShareGroupSettings:
        def get(name: str) -> str:
            return overrides.get(name, broker.default_of(name))

        def num(name: str) -> int:
            try:
                return int(get(name))
            except ValueError:
                return int(broker.default_of(name))

        return cls(
            session_timeout_ms=num("share.session.timeout.ms"),
            heartbeat_interval_ms=num("share.heartbeat.interval.ms"),
            record_lock_duration_ms=num("share.record.lock.duration.ms"),
            delivery_count_limit=num("share.delivery.count.limit"),
            max_record_locks=num("share.partition.max.record.locks"),
            auto_offset_reset=get("share.auto.offset.reset"),
            isolation_level=get("share.isolation.level"),
        )

    def partition_config(self) -> SharePartitionConfig:
        from wherry.share.partition import SharePartitionConfig

        return SharePartitionConfig(
            record_lock_duration_ms=self.record_lock_duration_ms,
            delivery_count_limit=self.delivery_count_limit,
            max_record_locks=self.max_record_locks,
        )
