"""LogConfig: Kafka topic-config names, defaults and validation."""

from __future__ import annotations

import pytest

from wherry.log.config import (
    LONG_MAX,
    SERVER_CONFIG_SYNONYMS,
    TOPIC_CONFIG_KEYS,
    ConfigError,
    ConfigType,
    LogConfig,
)


def test_kafka_defaults() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == 7 * 24 * 3600 * 1000
    assert c.segment_jitter_ms == 0
    assert c.segment_index_bytes == 10 * 1024 * 1024
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604_800_000
    assert c.retention_bytes == -1
    assert c.flush_messages == LONG_MAX
    assert c.flush_ms == LONG_MAX
    assert c.max_message_bytes == 1_048_588
    assert c.file_delete_delay_ms == 60_000
    assert c.cleanup_policy == ("delete",)
    assert c.min_insync_replicas == 1
    assert c.unclean_leader_election_enable is False
    assert c.message_timestamp_type == "CreateTime"
    assert c.delete and not c.compact and not c.log_append_time


def test_table_matches_dataclass_defaults() -> None:
    c = LogConfig()
    for name, key in TOPIC_CONFIG_KEYS.items():
        assert getattr(c, key.field) == key.default, name
        assert c.value_of(name) == key.default_str
        assert key.doc
    assert TOPIC_CONFIG_KEYS["segment.bytes"].type is ConfigType.INT
    assert TOPIC_CONFIG_KEYS["retention.ms"].type is ConfigType.LONG
    assert TOPIC_CONFIG_KEYS["cleanup.policy"].type is ConfigType.LIST
    assert TOPIC_CONFIG_KEYS["min.cleanable.dirty.ratio"].default_str == "0.5"
    assert c.value_of("unclean.leader.election.enable") == "false"
    assert SERVER_CONFIG_SYNONYMS["retention.ms"] == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )


def test_from_props_overrides_defaults() -> None:
    base = LogConfig(retention_ms=1000)
    c = LogConfig.from_props(
        {
            "segment.bytes": " 2048 ",
            "retention.bytes": "-1",
            "unclean.leader.election.enable": "TRUE",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.25",
            "cleanup.policy": "delete",
        },
        base,
    )
    assert c.segment_bytes == 2048
    assert c.retention_ms == 1000  # from the defaults given
    assert c.unclean_leader_election_enable is True
    assert c.log_append_time
    assert c.min_cleanable_dirty_ratio == 0.25
    assert c.diff_props(base) == {
        "segment.bytes": "2048",
        "unclean.leader.election.enable": "true",
        "message.timestamp.type": "LogAppendTime",
        "min.cleanable.dirty.ratio": "0.25",
    }
    assert LogConfig.from_props(c.to_props()) == c


@pytest.mark.parametrize(
    ("props", "name"),
    [
        ({"segment.bytes": "abc"}, "segment.bytes"),
        ({"segment.bytes": "13"}, "segment.bytes"),
        ({"segment.bytes": str(2**31)}, "segment.bytes"),
        ({"segment.ms": "0"}, "segment.ms"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"flush.messages": "0"}, "flush.messages"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"no.such.config": "1"}, "no.such.config"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "min.compaction.lag.ms"),
    ],
)
def test_invalid_values(props: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_props(props)
    assert info.value.name == name
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete, compact"])
def test_compaction_accepted(policy: str) -> None:
    c = LogConfig.from_props({"cleanup.policy": policy})
    assert c.compact
    assert c.delete == ("delete" in policy)


def test_from_server_props() -> None:
    c = LogConfig.from_server_props(
        {
            "log.retention.hours": "1",
            "log.roll.hours": "2",
            "log.segment.bytes": "1048576",
            "message.max.bytes": "2000000",
            "broker.id": "1",
        }
    )
    assert c.retention_ms == 3_600_000
    assert c.segment_ms == 7_200_000
    assert c.segment_bytes == 1_048_576
    assert c.max_message_bytes == 2_000_000
    c = LogConfig.from_server_props({"log.retention.ms": "5", "log.retention.hours": "1"})
    assert c.retention_ms == 5  # ms wins over hours
    assert LogConfig.from_server_props({"log.retention.hours": "-1"}).retention_ms == -1
    with pytest.raises(ConfigError):
        LogConfig.from_server_props({"broker.id": "1"}, ignore_unknown=False)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("3.0-IV1", True), ("0.10.2", True), ("0.10.2.1", True), ("2.8.1", True), ("2.8", True),
        ("0.8.0", True), ("3.9-IV0", True), ("3.7-IV4", True), ("1.0-IV0", True),
        ("3.0-IV2", False), ("0.8.0-IV0", False), ("9.9", False), ("0.12.0", False),
        ("banana", False), ("", False), ("3", False),
    ],
)
def test_message_format_version_takes_kafkas_metadata_versions(value: str, valid: bool) -> None:
    """The deprecated `message.format.version`: Kafka 3.9's MetadataVersionValidator."""
    if valid:
        assert LogConfig.from_props({"message.format.version": value}).message_format_version == (
            value)
    else:
        with pytest.raises(ConfigError, match=f"Version {value} is not a valid version"):
            LogConfig.from_props({"message.format.version": value})


def test_message_format_version_warns_only_before_the_v2_format() -> None:
    from wherry.log.config import message_format_ignored_warning

    assert LogConfig().message_format_version == "3.0-IV1"
    assert [v for v in ("0.8.2", "0.10.2-IV0", "0.11.0", "2.8", "3.0-IV1")
            if message_format_ignored_warning(v)] == ["0.8.2", "0.10.2-IV0"]
