"""Group coordinator settings: Kafka's names and defaults, and the quickstart replication factor."""

from __future__ import annotations

from pathlib import Path

import pytest

from wherry.server.config import BrokerConfig, BrokerConfigError, load_config
from wherry.server.groups import group_coordinator_config, offsets_topic_configs


def test_kafka_defaults() -> None:
    cfg = BrokerConfig.from_props({})
    assert cfg.offsets_topic_num_partitions == 50
    assert cfg.offsets_topic_replication_factor == 3  # KafkaConfig's default
    assert cfg.offsets_retention_ms == 7 * 24 * 3_600_000
    assert cfg.offsets_retention_check_interval_ms == 600_000
    assert cfg.group_initial_rebalance_delay_ms == 3000
    assert (cfg.group_min_session_timeout_ms, cfg.group_max_session_timeout_ms) == (
        6000, 1_800_000)
    assert cfg.offset_metadata_max_bytes == 4096
    g = group_coordinator_config(cfg)
    assert g.group_max_size == 2**31 - 1 and g.offsets_topic_num_partitions == 50


def test_no_properties_file_runs_with_kafkas_shipped_single_broker_settings(
    tmp_path: Path,
) -> None:
    assert load_config().offsets_topic_replication_factor == 1
    f = tmp_path / "server.properties"
    f.write_text("broker.id=1\n")
    assert load_config(f).offsets_topic_replication_factor == 3
    assert load_config(None, {"offsets.topic.replication.factor": "2"}
                       ).offsets_topic_replication_factor == 2


def test_overrides_and_bad_values() -> None:
    cfg = load_config(None, {"offsets.retention.minutes": "2", "group.max.size": "5",
                             "group.initial.rebalance.delay.ms": "0"})
    assert cfg.offsets_retention_ms == 120_000 and cfg.group_max_size == 5
    assert cfg.group_initial_rebalance_delay_ms == 0
    for bad in ({"offsets.topic.num.partitions": "0"}, {"group.max.size": "x"},
                {"offsets.topic.replication.factor": "0"}):
        with pytest.raises(BrokerConfigError):
            load_config(None, bad)


def test_offsets_topic_is_compacted() -> None:
    assert offsets_topic_configs(BrokerConfig()) == {
        "cleanup.policy": "compact", "segment.bytes": "104857600", "compression.type": "producer"}
