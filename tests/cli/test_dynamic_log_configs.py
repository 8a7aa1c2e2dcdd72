"""Dynamic log defaults (kafka-configs' `--entity-type brokers`: `log.retention.ms`,
`message.max.bytes`, ... per broker or for the cluster): they apply at once to every topic
without an override of its own, show in DescribeConfigs with their dynamic source, survive a
restart, and bad values are refused."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.helpers import create_topic
from wherry.cli.main import main
from wherry.common.topic_partition import TopicPartition
from wherry.testing.cluster import DevCluster, wait_until

pytestmark = pytest.mark.slow

DYNAMIC_DEFAULT_BROKER_CONFIG = 3
DYNAMIC_BROKER_CONFIG = 2


def configs(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(
        main, ["configs", "--bootstrap-server", bootstrap, *args], catch_exceptions=False
    )


def retention_ms(c: DevCluster, topic: str) -> int:
    def get() -> int:
        plog = c.broker(0).log_manager.get_log(TopicPartition(topic, 0))
        assert plog is not None
        return int(plog.config.retention_ms)

    return c.call(get)


def described(c: DevCluster, topic: str, name: str) -> tuple[str, int]:
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    res = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([res])[res].result(20)[name]
    return str(entry.value), int(entry.source)


def produce_error(c: DevCluster, topic: str, size: int) -> object:
    p = Producer(
        {"bootstrap.servers": c.bootstrap, "log_level": 0, "message.max.bytes": 10_000_000}
    )
    errors: list[object] = []
    p.produce(topic, b"x" * size, on_delivery=lambda e, _m: errors.append(e))
    assert p.flush(20) == 0
    return errors[0]


def test_dynamic_log_defaults_apply_live_and_after_a_restart(tmp_path: Path) -> None:
    with DevCluster(tmp_path / "c", brokers=1) as c:
        plain, own = f"plain-{uuid.uuid4().hex[:6]}", f"own-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, plain)
        create_topic(c.bootstrap, own, **{"retention.ms": "86400000"})
        assert retention_ms(c, plain) == 604_800_000  # Kafka's default: 7 days

        out = configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
                      "--add-config", "log.retention.ms=3600000")
        assert out.exit_code == 0, out.stderr
        out = configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                      "--add-config", "message.max.bytes=2000")
        assert out.exit_code == 0, out.stderr
        # Live: the topic without an override follows, the one with its own keeps it.
        assert wait_until(lambda: retention_ms(c, plain) == 3_600_000, 10)
        assert retention_ms(c, own) == 86_400_000
        assert described(c, plain, "retention.ms") == ("3600000", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert described(c, own, "retention.ms") == ("86400000", 1)  # DYNAMIC_TOPIC_CONFIG
        assert described(c, plain, "max.message.bytes") == ("2000", DYNAMIC_BROKER_CONFIG)
        err = produce_error(c, plain, 5000)
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[attr-defined]
        listed = configs(c.bootstrap, "--describe", "--entity-type", "brokers",
                         "--entity-name", "0").stdout
        assert "message.max.bytes=2000" in listed, listed

        c.stop_broker(0)
        c.start_broker(0)
        assert retention_ms(c, plain) == 3_600_000
        assert retention_ms(c, own) == 86_400_000
        assert produce_error(c, plain, 5000) is not None

        # Removing them brings the static defaults back, live.
        assert configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
                       "--delete-config", "log.retention.ms").exit_code == 0
        assert configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-name",
                       "0", "--delete-config", "message.max.bytes").exit_code == 0
        assert wait_until(lambda: retention_ms(c, plain) == 604_800_000, 10)
        assert wait_until(lambda: produce_error(c, plain, 5000) is None, 10)


def test_bad_dynamic_log_values_are_refused(tmp_path: Path) -> None:
    with DevCluster(tmp_path / "c", brokers=1) as c:
        bad = configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                      "--add-config", "log.retention.ms=soon")
        assert bad.exit_code == 1
        assert "Invalid value soon for configuration log.retention.ms" in bad.stderr
        bad = configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                      "--add-config", "log.cleanup.policy=sometimes")
        assert bad.exit_code == 1 and "log.cleanup.policy" in bad.stderr
        fixed = configs(c.bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", "0",
                        "--add-config", "log.dirs=/tmp/x")
        assert fixed.exit_code == 1 and "Cannot update these configs dynamically" in fixed.stderr
