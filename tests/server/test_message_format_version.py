"""The deprecated `message.format.version` (topic) and `log.message.format.version` (broker)
are accepted and ignored as Kafka 3.9 does: validated as MetadataVersion strings, shown by
DescribeConfigs (default 3.0-IV1), a warning logged for pre-0.11 formats, records still
written in format v2. Real broker process, confluent-kafka's AdminClient and producer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until

MFV = "message.format.version"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("mfv")),
                      overrides=["log.message.format.version=0.10.1"]).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def _create(admin: AdminClient, name: str, **configs: str) -> None:
    topic = NewTopic(name, 1, 1, config=configs)
    admin.create_topics([topic], operation_timeout=10, request_timeout=15)[name].result(20)


def _describe(admin: AdminClient, name: str) -> ConfigEntry:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries: dict[str, ConfigEntry] = admin.describe_configs([res], request_timeout=10)[
        res].result(15)
    return entries[MFV]


def test_broker_setting_is_accepted_with_kafkas_warning(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    text = broker.log_text()
    assert ("Broker configuration log.message.format.version with value 0.10.1 is ignored "
            "because the inter-broker protocol version `3.9-IV0` is greater or equal than 3.0."
            in text)
    assert "were supplied but are not used yet" not in text
    _create(admin, "mfv-default")
    entry = _describe(admin, "mfv-default")
    assert entry.value == "0.10.1" and entry.source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_topic_setting_is_accepted_ignored_and_warned_about(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    _create(admin, "mfv-old", **{MFV: "0.10.2"})
    assert wait_until(lambda: "Topic configuration message.format.version with value `0.10.2` "
                      "is ignored for `mfv-old`" in broker.log_text())
    entry = _describe(admin, "mfv-old")
    assert entry.value == "0.10.2" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Records are still written (and read back) in format v2, with headers (v2 only).
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("mfv-old", b"v", key=b"k", headers=[("h", b"1")])
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mfv",
                         "auto.offset.reset": "earliest", "log_level": 0})
    try:
        consumer.subscribe(["mfv-old"])
        msg = None
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.value() == b"v" and msg.headers() == [("h", b"1")]
    finally:
        consumer.close()
    # Altered like any topic config; a later format gets no warning.
    res = ConfigResource(ConfigResource.Type.TOPIC, "mfv-old", incremental_configs=[
        ConfigEntry(MFV, "2.8-IV1", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res], request_timeout=10).values():
        f.result(15)
    assert wait_until(lambda: _describe(admin, "mfv-old").value == "2.8-IV1")
    assert "value `2.8-IV1` is ignored" not in broker.log_text()


def test_bad_versions_are_refused_as_kafka_refuses_them(admin: AdminClient) -> None:
    for bad in ("9.9", "banana", "3.0-IV"):
        with pytest.raises(KafkaException) as e:
            _create(admin, "mfv-bad", **{MFV: bad})
        err = e.value.args[0]
        assert err.code() == ErrorCode.invalid_config
        assert f"Version {bad} is not a valid version" in err.str()
    # The broker key cannot change at run time (Kafka's DynamicLogConfig excludes it).
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.message.format.version", "3.0",
                    incremental_operation=AlterConfigOpType.SET)])
    (f,) = admin.incremental_alter_configs([res], request_timeout=10).values()
    with pytest.raises(KafkaException) as e:
        f.result(15)
    assert e.value.args[0].code() == ErrorCode.invalid_request
