"""Per-topic log configuration: Kafka 3.9 topic-config names, types, defaults and validation."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from wherry.common.record import frozen_record

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "SERVER_CONFIG_SYNONYMS",
    "TOPIC_CONFIG_KEYS",
    "ConfigError",
    "ConfigKey",
    "ConfigType",
    "LogConfig",
    "unit_synonym_defaults",
]

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


class ConfigError(ValueError):
    """An invalid topic (or broker log) configuration value; answers with INVALID_CONFIG."""

    def __init__(self, name: str, message: str, *, text: str | None = None) -> None:
        super().__init__(text or f"Invalid configuration {name}: {message}")
        self.name = name
        self.message = message

    @property
    def error_code(self) -> ErrorCode:
        """INVALID_CONFIG (kio's error codes imported once a config is refused: a start
        reads its configuration before it has any use for them)."""
        from kio.schema.errors import ErrorCode

        return ErrorCode.invalid_config


class ConfigType(IntEnum):
    """DescribeConfigs `config_type` values (Kafka's ConfigDef.Type order)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@frozen_record(slots=True)
class ConfigKey:
    """One topic config: its name, the `LogConfig` field it fills, type, default and checks."""

    name: str
    field: str
    type: ConfigType
    default: Any
    doc: str
    server_name: str | None = None
    min_value: int | float | None = None
    max_value: int | float | None = None
    choices: tuple[str, ...] | None = None
    # A check of a LIST value's items beyond `choices` (raises ConfigError).
    list_check: Callable[[str, tuple[str, ...]], None] | None = None
    # A check of a STRING value beyond `choices` (raises ConfigError).
    string_check: Callable[[str, str], None] | None = None

    @property
    def default_str(self) -> str:
        """The default rendered as Kafka renders it in DescribeConfigs."""
        return format_value(self.type, self.default)


def format_value(config_type: ConfigType, value: Any) -> str:
    """Render a typed config value as its string form."""
    match config_type:
        case ConfigType.BOOLEAN:
            return "true" if value else "false"
        case ConfigType.LIST:
            return ",".join(value)
        case ConfigType.DOUBLE:
            return repr(float(value))
        case _:
            return str(value)


_INTEGER_RE = re.compile(r"[+-]?[0-9]+")


def _invalid(name: str, value: object, message: str) -> ConfigError:
    """Kafka's ConfigException wording: `Invalid value V for configuration N: M`."""
    shown = str(value).lower() if isinstance(value, bool) else str(value).strip()
    return ConfigError(name, message,
                       text=f"Invalid value {shown} for configuration {name}: {message}")


def _java_number(bound: float) -> str:
    """A Range bound as Kafka prints it (its validators are built from ints: `between(0, 1)`)."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _parse(key: ConfigKey, raw: object) -> Any:
    """Parse and validate one value (a string, or an already-typed value)."""
    name = key.name
    value: Any
    match key.type:
        case ConfigType.INT | ConfigType.SHORT | ConfigType.LONG:
            if isinstance(raw, bool):
                raise _invalid(name, raw, f"Not a number of type {key.type.name}")
            if isinstance(raw, int):
                value = raw
            else:
                text = str(raw).strip()
                if not _INTEGER_RE.fullmatch(text):
                    raise _invalid(name, raw, f"Not a number of type {key.type.name}")
                value = int(text)
            lo, hi = {
                ConfigType.INT: (INT_MIN, INT_MAX),
                ConfigType.SHORT: (-(2**15), 2**15 - 1),
                ConfigType.LONG: (LONG_MIN, LONG_MAX),
            }[key.type]
            if not lo <= value <= hi:
                raise _invalid(name, raw, f"Not a number of type {key.type.name}")
        case ConfigType.DOUBLE:
            try:
                value = float(str(raw).strip()) if not isinstance(raw, int | float) else float(raw)
            except ValueError:
                raise _invalid(name, raw, "Not a number of type DOUBLE") from None
            if not math.isfinite(value):
                raise _invalid(name, raw, "Not a number of type DOUBLE")
        case ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                value = raw
            else:
                text = str(raw).strip().lower()
                if text not in ("true", "false"):
                    raise _invalid(name, raw, "Expected value to be either true or false")
                value = text == "true"
        case ConfigType.LIST:
            if isinstance(raw, list | tuple):
                items = [str(item).strip() for item in raw]
            else:
                text = str(raw).strip()
                items = [item.strip() for item in text.split(",")] if text else []
            value = tuple(item for item in items if item)
            if key.choices is not None:
                for item in value:
                    if item not in key.choices:
                        raise _invalid(
                            name, item, f"String must be one of: {', '.join(key.choices)}"
                        )
            if key.list_check is not None:
                key.list_check(name, value)
        case _:
            value = str(raw).strip()
            if key.choices is not None and value not in key.choices:
                raise _invalid(name, value, f"String must be one of: {', '.join(key.choices)}")
            if key.string_check is not None:
                key.string_check(name, value)
    if key.min_value is not None and value < key.min_value:
        raise _invalid(name, value, f"Value must be at least {_java_number(key.min_value)}")
    if key.max_value is not None and value > key.max_value:
        raise _invalid(name, value,
                       f"Value must be no more than {_java_number(key.max_value)}")
    return value


_THROTTLED_REPLICA_RE = re.compile(r"[0-9]+:[0-9]+")


def check_throttled_replicas(name: str, items: tuple[str, ...]) -> None:
    """`*.replication.throttled.replicas`: the literal `*` or `partition:broker` pairs
    (Kafka's ThrottledReplicaListValidator)."""
    if items == ("*",) or all(_THROTTLED_REPLICA_RE.fullmatch(item) for item in items):
        return
    raise _invalid(
        name,
        ",".join(items),
        f"{name} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


# Kafka 3.9's MetadataVersion releases (the `inter.broker.protocol.version` values), which the
# deprecated `message.format.version` takes, with how many internal versions ("X-IVn") each has.
_RELEASE_IVS: Mapping[str, int] = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1,
    "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2,
    "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1,
    "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}
_RELEASES = frozenset(_RELEASE_IVS)
_INTERNAL_VERSION_RE = re.compile(r"(?P<release>[0-9.]+)-IV(?P<iv>[0-9]+)")
DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"
# The inter-broker protocol wherry speaks (Kafka 3.9's latest production version).
INTER_BROKER_PROTOCOL_VERSION = "3.9-IV0"


def _release_of(version: str) -> str | None:
    """The release a MetadataVersion string names (Kafka's `fromVersionString`: "2.8.1" is
    2.8, "0.10.2.1" is 0.10.2, "3.0-IV1" is 3.0), or None when it names none."""
    m = _INTERNAL_VERSION_RE.fullmatch(version)
    if m is not None:
        ivs = _RELEASE_IVS.get(m["release"], 0)
        return m["release"] if int(m["iv"]) < ivs else None
    parts = version.split(".")
    key = ".".join(parts[: 3 if version.startswith("0.") else 2])
    return key if key in _RELEASES else None


def check_metadata_version(name: str, value: str) -> None:
    """Kafka's MetadataVersionValidator (`message.format.version`, its broker synonym)."""
    if _release_of(value) is None:
        raise _invalid(name, value, f"Version {value} is not a valid version")


def message_format_ignored_warning(value: str) -> bool:
    """Kafka 3.x warns that a `message.format.version` is ignored only when it predates the
    v2 record format (0.11.0): with inter-broker protocol 3.0 or later the broker writes v2
    records whatever it says (`MessageFormatVersion.shouldWarn`)."""
    release = _release_of(value)
    return release is not None and release.startswith(("0.8.", "0.9.", "0.10."))


def topic_message_format_warning(topic: str, value: str) -> str:
    return (
        f"Topic configuration message.format.version with value `{value}` is ignored for "
        f"`{topic}` because the inter-broker protocol version `{INTER_BROKER_PROTOCOL_VERSION}` "
        "is greater or equal than 3.0. This configuration is deprecated and it will be removed "
        "in Apache Kafka 4.0."
    )


def broker_message_format_warning(value: str) -> str:
    return (
        f"Broker configuration log.message.format.version with value {value} is ignored "
        f"because the inter-broker protocol version `{INTER_BROKER_PROTOCOL_VERSION}` is "
        "greater or equal than 3.0. This configuration is deprecated and it will be removed "
        "in Apache Kafka 4.0."
    )


_DAY_MS = 24 * 60 * 60 * 1000
_WEEK_MS = 7 * _DAY_MS

_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "cleanup.policy",
        "cleanup_policy",
        ConfigType.LIST,
        ("delete",),
        'The retention policy for log segments: "delete" discards old segments when their '
        'retention time or size limit is reached; "compact" enables log compaction (the latest '
        "record of each key is kept); both may be given.",
        "log.cleanup.policy",
        choices=("compact", "delete"),
    ),
    ConfigKey(
        "compression.type",
        "compression_type",
        ConfigType.STRING,
        "producer",
        'The final compression type for the topic; "producer" keeps the producer\'s codec.',
        "compression.type",
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    ConfigKey(
        "delete.retention.ms",
        "delete_retention_ms",
        ConfigType.LONG,
        _DAY_MS,
        "How long delete tombstone markers are retained for log compacted topics.",
        "log.cleaner.delete.retention.ms",
        min_value=0,
    ),
    ConfigKey(
        "file.delete.delay.ms",
        "file_delete_delay_ms",
        ConfigType.LONG,
        60_000,
        "The time to wait before deleting a file from the filesystem.",
        "log.segment.delete.delay.ms",
        min_value=0,
    ),
    ConfigKey(
        "flush.messages",
        "flush_messages",
        ConfigType.LONG,
        LONG_MAX,
        "Force an fsync of the log after this many messages have been appended.",
        "log.flush.interval.messages",
        min_value=1,
    ),
    ConfigKey(
        "flush.ms",
        "flush_ms",
        ConfigType.LONG,
        LONG_MAX,
        "Force an fsync of the log when this much time has passed since the last flush.",
        "log.flush.interval.ms",
        min_value=0,
    ),
    ConfigKey(
        "follower.replication.throttled.replicas",
        "follower_replication_throttled_replicas",
        ConfigType.LIST,
        (),
        "A list of replicas for which log replication should be throttled on the follower "
        "side, as [PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or the wildcard '*' "
        "to throttle all replicas of this topic.",
        list_check=check_throttled_replicas,
    ),
    ConfigKey(
        "index.interval.bytes",
        "index_interval_bytes",
        ConfigType.INT,
        4096,
        "How frequently (in bytes of log) an entry is added to the offset index.",
        "log.index.interval.bytes",
        min_value=0,
    ),
    ConfigKey(
        "leader.replication.throttled.replicas",
        "leader_replication_throttled_replicas",
        ConfigType.LIST,
        (),
        "A list of replicas for which log replication should be throttled on the leader "
        "side, as [PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or the wildcard '*' "
        "to throttle all replicas of this topic.",
        list_check=check_throttled_replicas,
    ),
    ConfigKey(
        "max.compaction.lag.ms",
        "max_compaction_lag_ms",
        ConfigType.LONG,
        LONG_MAX,
        "The maximum time a message will remain ineligible for compaction in the log.",
        "log.cleaner.max.compaction.lag.ms",
        min_value=1,
    ),
    ConfigKey(
        "max.message.bytes",
        "max_message_bytes",
        ConfigType.INT,
        1_048_588,
        "The largest record batch size allowed by Kafka (after compression if compression "
        "is enabled).",
        "message.max.bytes",
        min_value=0,
    ),
    ConfigKey(
        "message.downconversion.enable",
        "message_downconversion_enable",
        ConfigType.BOOLEAN,
        True,
        "Whether down-conversion of message formats is enabled to satisfy consume requests.",
        "log.message.downconversion.enable",
    ),
    ConfigKey(
        "message.format.version",
        "message_format_version",
        ConfigType.STRING,
        DEFAULT_MESSAGE_FORMAT_VERSION,
        "[DEPRECATED] The message format version the broker uses to append messages; ignored "
        "with inter-broker protocol 3.0 or later (records are always written in format v2).",
        "log.message.format.version",
        string_check=check_metadata_version,
    ),
    ConfigKey(
        "message.timestamp.after.max.ms",
        "message_timestamp_after_max_ms",
        ConfigType.LONG,
        LONG_MAX,
        "The maximum allowed difference between a message timestamp later than the broker's "
        "timestamp and the broker's timestamp (CreateTime only).",
        "log.message.timestamp.after.max.ms",
        min_value=0,
    ),
    ConfigKey(
        "message.timestamp.before.max.ms",
        "message_timestamp_before_max_ms",
        ConfigType.LONG,
        LONG_MAX,
        "The maximum allowed difference between the broker's timestamp and an earlier message "
        "timestamp (CreateTime only).",
        "log.message.timestamp.before.max.ms",
        min_value=0,
    ),
    ConfigKey(
        "message.timestamp.difference.max.ms",
        "message_timestamp_difference_max_ms",
        ConfigType.LONG,
        LONG_MAX,
        "[DEPRECATED] The maximum difference allowed between the broker timestamp and the "
        "message timestamp.",
        "log.message.timestamp.difference.max.ms",
        min_value=0,
    ),
    ConfigKey(
        "message.timestamp.type",
        "message_timestamp_type",
        ConfigType.STRING,
        "CreateTime",
        "Whether the timestamp in the message is message create time or log append time.",
        "log.message.timestamp.type",
        choices=("CreateTime", "LogAppendTime"),
    ),
    ConfigKey(
        "min.cleanable.dirty.ratio",
        "min_cleanable_dirty_ratio",
        ConfigType.DOUBLE,
        0.5,
        "The minimum ratio of dirty log to total log for a log to be eligible for cleaning.",
        "log.cleaner.min.cleanable.ratio",
        min_value=0.0,
        max_value=1.0,
    ),
    ConfigKey(
        "min.compaction.lag.ms",
        "min_compaction_lag_ms",
        ConfigType.LONG,
        0,
        "The minimum time a message will remain uncompacted in the log.",
        "log.cleaner.min.compaction.lag.ms",
        min_value=0,
    ),
    ConfigKey(
        "min.insync.replicas",
        "min_insync_replicas",
        ConfigType.INT,
        1,
        "The minimum number of in-sync replicas that must acknowledge a write with acks=all.",
        "min.insync.replicas",
        min_value=1,
    ),
    ConfigKey(
        "preallocate",
        "preallocate",
        ConfigType.BOOLEAN,
        False,
        "True if we should preallocate the file on disk when creating a new log segment.",
        "log.preallocate",
    ),
    ConfigKey(
        "retention.bytes",
        "retention_bytes",
        ConfigType.LONG,
        -1,
        "The maximum size a partition log can grow to before old segments are discarded; "
        "-1 means no size limit.",
        "log.retention.bytes",
    ),
    ConfigKey(
        "retention.ms",
        "retention_ms",
        ConfigType.LONG,
        _WEEK_MS,
        "The maximum time a log segment is retained before it is discarded; -1 means no limit.",
        "log.retention.ms",
        min_value=-1,
    ),
    ConfigKey(
        "segment.bytes",
        "segment_bytes",
        ConfigType.INT,
        1 << 30,
        "The segment file size for the log.",
        "log.segment.bytes",
        min_value=14,
    ),
    ConfigKey(
        "segment.index.bytes",
        "segment_index_bytes",
        ConfigType.INT,
        10 * 1024 * 1024,
        "The size of the index that maps offsets to file positions.",
        "log.index.size.max.bytes",
        min_value=4,
    ),
    ConfigKey(
        "segment.jitter.ms",
        "segment_jitter_ms",
        ConfigType.LONG,
        0,
        "The maximum random jitter subtracted from the scheduled segment roll time.",
        "log.roll.jitter.ms",
        min_value=0,
    ),
    ConfigKey(
        "segment.ms",
        "segment_ms",
        ConfigType.LONG,
        _WEEK_MS,
        "The period of time after which Kafka will force the log to roll even if the segment "
        "file isn't full.",
        "log.roll.ms",
        min_value=1,
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        "unclean_leader_election_enable",
        ConfigType.BOOLEAN,
        False,
        "Whether replicas not in the ISR may be elected as leader as a last resort.",
        "unclean.leader.election.enable",
    ),
)

TOPIC_CONFIG_KEYS: Mapping[str, ConfigKey] = {key.name: key for key in _KEYS}
"""Topic config name -> ConfigKey, sorted by name (as DescribeConfigs lists them)."""

_BY_FIELD: Mapping[str, ConfigKey] = {key.field: key for key in _KEYS}

# Broker-level names whose value is scaled into a topic config (name, multiplier), in order of
# decreasing precedence after the primary `server_name` (Kafka: ms > minutes > hours).
_SERVER_UNIT_SYNONYMS: Mapping[str, tuple[tuple[str, int], ...]] = {
    "retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "segment.ms": (("log.roll.hours", 3_600_000),),
    "segment.jitter.ms": (("log.roll.jitter.hours", 3_600_000),),
}

SERVER_CONFIG_SYNONYMS: Mapping[str, tuple[str, ...]] = {
    key.name: tuple(
        name
        for name in (
            key.server_name,
            *(syn for syn, _ in _SERVER_UNIT_SYNONYMS.get(key.name, ())),
        )
        if name
    )
    for key in _KEYS
}
"""Topic config name -> broker-level synonyms, most specific first (for DescribeConfigs)."""


@frozen_record(slots=True)
class LogConfig:
    """Effective configuration of one partition log (Kafka 3.9 defaults)."""

    segment_bytes: int = 1 << 30
    segment_ms: int = _WEEK_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = _WEEK_MS
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    file_delete_delay_ms: int = 60_000
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = _DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    compression_type: str = "producer"
    preallocate: bool = False
    message_downconversion_enable: bool = True
    message_format_version: str = DEFAULT_MESSAGE_FORMAT_VERSION  # deprecated, ignored
    # KIP-73 replication throttling: `partition:broker` pairs or ("*",).
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()

    # -- derived -------------------------------------------------------------------------

    @property
    def delete(self) -> bool:
        """Whether retention (time/size) deletes old segments."""
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """Whether the broker stamps batches with LogAppendTime."""
        return self.message_timestamp_type == "LogAppendTime"

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_props(cls, props: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Build a config from topic-level overrides (Kafka names) on top of `defaults`.

        Raises ConfigError for an unknown name, a value of the wrong type or range, a
        conflicting values.
        """
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            key = TOPIC_CONFIG_KEYS.get(name)
            if key is None:
                raise ConfigError(name, "Unknown topic config name",
                                  text=f"Unknown topic config name: {name}")  # Kafka's words
            changes[key.field] = _parse(key, raw)
        config = dataclasses.replace(base, **changes)
        config.validate()
        return config

    def with_props(self, props: Mapping[str, str]) -> LogConfig:
        """This config with some topic-level overrides applied (validated). The same
        overrides on an equal config give the config made the first time (a broker asks for
        each partition's, and building one takes about 0.1 ms)."""
        return _with_props(self, frozenset(props.items()))

    @classmethod
    def from_server_props(
        cls, props: Mapping[str, str], *, ignore_unknown: bool = True
    ) -> LogConfig:
        """Build the broker-wide default log config from `server.properties`-style names.

        Understands Kafka's synonyms (log.retention.ms > .minutes > .hours, log.roll.ms >
        log.roll.hours, ...). Other keys are ignored unless `ignore_unknown` is False.
        """
        changes: dict[str, Any] = {}
        known: set[str] = set()
        for key in _KEYS:
            candidates: list[tuple[str, int]] = []
            if key.server_name is not None:
                candidates.append((key.server_name, 1))
            candidates.extend(_SERVER_UNIT_SYNONYMS.get(key.name, ()))
            known.update(name for name, _ in candidates)
            for server_name, scale in candidates:
                if server_name in props:
                    raw = props[server_name]
                    if scale != 1:
                        hours_key = dataclasses.replace(
                            key, name=server_name, min_value=None, max_value=None
                        )
                        amount = _parse(hours_key, raw)
                        value: Any = amount * scale if amount >= 0 else amount
                        value = _parse(dataclasses.replace(key, name=server_name), value)
                    else:
                        value = _parse(dataclasses.replace(key, name=server_name), raw)
                    changes[key.field] = value
                    break
        if not ignore_unknown:
            for name in props:
                if name not in known:
                    raise ConfigError(name, "Unknown broker log config name")
        config = dataclasses.replace(cls(), **changes)
        config.validate()
        return config

    def validate(self) -> None:
        """Cross-field checks and features not supported yet."""
        for key in _KEYS:
            _parse(key, getattr(self, key.field))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            message = (f"conflict topic config setting min.compaction.lag.ms "
                       f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                       f"({self.max_compaction_lag_ms})")
            raise ConfigError("min.compaction.lag.ms", message, text=message)

    # -- rendering -----------------------------------------------------------------------

    def value_of(self, name: str) -> str:
        """The string value of a topic config (KeyError for unknown names)."""
        key = TOPIC_CONFIG_KEYS[name]
        return format_value(key.type, getattr(self, key.field))

    def to_props(self) -> dict[str, str]:
        """All topic configs as name -> string value."""
        return {name: self.value_of(name) for name in TOPIC_CONFIG_KEYS}

    def diff_props(self, base: LogConfig) -> dict[str, str]:
        """The topic configs whose value differs from `base` (the overrides)."""
        return {
            name: self.value_of(name)
            for name, key in TOPIC_CONFIG_KEYS.items()
            if getattr(self, key.field) != getattr(base, key.field)
        }


def config_key_for_field(field: str) -> ConfigKey:
    """The ConfigKey that fills a given LogConfig field."""
    return _BY_FIELD[field]


@functools.lru_cache(maxsize=1024)
def _with_props(base: LogConfig, props: frozenset[tuple[str, str]]) -> LogConfig:
    return LogConfig.from_props(dict(sorted(props)), base)


def unit_synonym_defaults() -> dict[str, str | None]:
    """Kafka's defaults of the broker's coarser names of a topic config (`log.retention.hours`
    168, `log.retention.minutes` none, `log.roll.hours` 168, `log.roll.jitter.hours` 0): the
    coarsest name holds the default, the finer ones have none."""
    base = LogConfig()
    out: dict[str, str | None] = {}
    for topic_name, synonyms in _SERVER_UNIT_SYNONYMS.items():
        for i, (name, multiplier) in enumerate(synonyms):
            last = i == len(synonyms) - 1
            out[name] = str(int(base.value_of(topic_name)) // multiplier) if last else None
    return out
