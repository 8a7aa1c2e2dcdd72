"""DescribeConfigs after IncrementalAlterConfigs, as confluent-kafka-python's suite checks it
against Kafka 4.1 and later: the non-default entries of two topics after APPEND / SUBTRACT /
SET / DELETE, including the cluster-level `min.insync.replicas` those Kafka versions hold
(source DYNAMIC_DEFAULT_BROKER_CONFIG), written once at the cluster's first start."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.broker_process import BrokerProcess


def _non_default(fs: dict[ConfigResource, Any]) -> dict[str, list[str]]:
    return {res.name: sorted(str(e) for e in f.result(20).values() if not e.is_default)
            for res, f in fs.items()}


def _ok(fs: dict[ConfigResource, Any]) -> None:
    for f in fs.values():
        assert f.result(20) is None


def test_entries_after_incremental_alter_as_the_python_suite_expects(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    tag = uuid.uuid4().hex[:8]
    t1, t2 = f"test-topic-{tag}", f"test-topic2-{tag}"
    for t in (t1, t2):
        admin.create_topics([NewTopic(t, 2, 1, config={"compression.type": "gzip"})])[t].result(20)
    res1 = ConfigResource(ResourceType.TOPIC, t1, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET)])
    res2 = ConfigResource(ResourceType.TOPIC, t2, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    _ok(admin.incremental_alter_configs([res1, res2]))
    time.sleep(1)
    assert _non_default(admin.describe_configs([res1, res2])) == {
        t1: ['cleanup.policy="delete,compact"', 'compression.type="gzip"',
             'min.insync.replicas="1"', 'retention.ms="10000"'],
        t2: ['cleanup.policy=""', 'compression.type="gzip"', 'min.insync.replicas="1"',
             'retention.ms="5000"'],
    }
    res2 = ConfigResource(ResourceType.TOPIC, t2, incremental_configs=[
        ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET)])
    _ok(admin.incremental_alter_configs([res2]))
    time.sleep(1)
    assert _non_default(admin.describe_configs([res2])) == {
        t2: ['cleanup.policy=""', 'min.insync.replicas="1"', 'retention.ms="10000"']}

    # Where it comes from: the cluster level, Kafka's source.
    [entries] = [f.result(20) for f in admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, t1)]).values()]
    isr = entries["min.insync.replicas"]
    assert isr.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    # A topic's own value still wins over it.
    own = ConfigResource(ResourceType.TOPIC, t1, incremental_configs=[
        ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET)])
    _ok(admin.incremental_alter_configs([own]))
    time.sleep(1)
    got = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t1)])
    [entries] = [f.result(20) for f in got.values()]
    assert entries["min.insync.replicas"].value == "2"
    assert entries["min.insync.replicas"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_written_once_from_the_static_value(tmp_path: Path) -> None:
    """The first start writes the static value; a restart with another static value keeps
    the cluster-level one (as in Kafka, it changes only through an alter)."""
    b = BrokerProcess(tmp_path / "b", overrides=["min.insync.replicas=2"]).start()
    try:
        assert "Set the cluster-level min.insync.replicas to 2" in b.log_text()
        assert b.stop() == 0
        b.overrides = ["min.insync.replicas=3"]
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(20)
        [entries] = [f.result(20) for f in admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, "t")]).values()]
        assert entries["min.insync.replicas"].value == "2"
        assert "Set the cluster-level" not in b.log_text()
    finally:
        assert b.stop() == 0, b.log_text()[-3000:]


def test_group_entries_after_incremental_alter_as_the_python_suite_expects(
    broker: BrokerProcess,
) -> None:
    """The suite's GROUP step (its `group.protocol=consumer` run): a group config set with
    IncrementalAlterConfigs is the group's one non-default entry."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    group = f"test-group-{uuid.uuid4().hex[:8]}"
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000",
                    incremental_operation=AlterConfigOpType.SET)])
    _ok(admin.incremental_alter_configs([res]))
    time.sleep(1)
    assert _non_default(admin.describe_configs([res])) == {
        group: ['consumer.session.timeout.ms="50000"']}
