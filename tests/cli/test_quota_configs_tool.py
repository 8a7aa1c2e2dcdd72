"""`wherry configs --entity-type users|clients` (kafka-configs.sh's quota commands) against a
broker in this process: a session that adds, describes, changes and deletes quotas of users,
client ids, a user's client and the defaults, with kafka-configs' output and errors, and the
broker applying each change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from wherry.cli.common import CommandError
from wherry.cli.main import main
from wherry.cli.quota_configs import java_double, quota_entity
from wherry.testing.cluster import DevCluster, wait_until

ERROR_PREFIX = "Error while executing config command : "


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "c", brokers=1, base_port=0)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def configs(cluster: DevCluster, *args: str) -> Result:
    return CliRunner().invoke(main, ["configs", "--bootstrap-server", cluster.bootstrap, *args],
                              catch_exceptions=False)


def ok(result: Result) -> list[str]:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout.splitlines()


def failed(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    return result.stderr.strip()


def test_quota_session(cluster: DevCluster, tmp_path: Path) -> None:
    assert ok(configs(cluster, "--alter", "--entity-type", "clients", "--entity-name", "app",
                      "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
              ) == ["Completed updating config for client app."]
    assert ok(configs(cluster, "--alter", "--entity-type", "users", "--entity-default",
                      "--add-config", "request_percentage=200")
              ) == ["Completed updating default config for users in the cluster."]
    assert ok(configs(cluster, "--alter", "--entity-type", "users", "--entity-name", "alice",
                      "--entity-type", "clients", "--entity-name", "app",
                      "--add-config", "producer_byte_rate=10000000")
              ) == ["Completed updating config for user alice."]
    assert ok(configs(cluster, "--alter", "--entity-type", "clients", "--entity-name", "web",
                      "--entity-type", "users", "--entity-default",
                      "--add-config", "consumer_byte_rate=5000")
              ) == ["Completed updating config for client web."]

    assert ok(configs(cluster, "--describe", "--entity-type", "clients")) == [
        "Quota configs for client-id 'app' are consumer_byte_rate=2097152.0, "
        "producer_byte_rate=1048576.0",
    ]
    assert ok(configs(cluster, "--describe", "--entity-type", "users", "--entity-default")) == [
        "Quota configs for user-principal the default are request_percentage=200.0",
    ]
    assert ok(configs(cluster, "--describe", "--entity-type", "users",
                      "--entity-type", "clients")) == [
        "Quota configs for user-principal 'alice', client-id 'app' are "
        "producer_byte_rate=1.0E7",
        "Quota configs for user-principal the default, client-id 'web' are "
        "consumer_byte_rate=5000.0",
    ]

    broker = cluster.broker(0)
    assert wait_until(lambda: cluster.call(
        lambda: broker.client_quotas.produce.bound("alice", "app")) == 10_000_000.0)
    assert cluster.call(lambda: broker.client_quotas.fetch.bound("bob", "web")) == 5000.0
    assert cluster.call(lambda: broker.client_quotas.request.bound("bob", "x")) == 200.0

    # Change one, delete another: the broker follows.
    ok(configs(cluster, "--alter", "--entity-type", "clients", "--entity-name", "app",
               "--add-config", "producer_byte_rate=4096", "--delete-config",
               "consumer_byte_rate"))
    assert ok(configs(cluster, "--describe", "--entity-type", "clients",
                      "--entity-name", "app")) == [
        "Quota configs for client-id 'app' are producer_byte_rate=4096.0"]
    assert wait_until(lambda: cluster.call(
        lambda: broker.client_quotas.produce.bound("bob", "app")) == 4096.0)
    assert cluster.call(lambda: broker.client_quotas.fetch.bound("bob", "app")) is None

    # kafka-configs' errors.
    assert failed(configs(cluster, "--alter", "--entity-type", "clients", "--entity-name",
                          "app", "--delete-config", "consumer_byte_rate")
                  ) == ERROR_PREFIX + "Invalid config(s): consumer_byte_rate"
    assert failed(configs(cluster, "--alter", "--entity-type", "clients", "--entity-name",
                          "app", "--add-config", "producer_byte_rate=fast")
                  ) == ERROR_PREFIX + ("Cannot parse quota configuration value for "
                                       "producer_byte_rate: fast")
    assert failed(configs(cluster, "--alter", "--entity-type", "users", "--entity-name",
                          "alice", "--add-config", "SCRAM-SHA-256=[password=x]")
                  ) == ERROR_PREFIX + ("SCRAM-SHA-256: SCRAM credentials are altered with "
                                       "`wherry users`")
    assert failed(configs(cluster, "--alter", "--entity-type", "users", "--entity-name",
                          "alice", "--add-config", "bogus=1")
                  ) == ERROR_PREFIX + "Invalid configuration key bogus"
    assert failed(configs(cluster, "--alter", "--entity-type", "clients", "--entity-name",
                          "app", "--add-config", "producer_byte_rate=1.5")
                  ) == ERROR_PREFIX + "Configuration producer_byte_rate must be a Long value"
    assert failed(configs(cluster, "--alter", "--entity-type", "users",
                          "--add-config", "producer_byte_rate=1")
                  ) == ERROR_PREFIX + "An entity name must be specified with --alter of users"
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\n")
    assert failed(configs(cluster, "--describe", "--entity-type", "users",
                          "--command-config", str(props))
                  ) == ERROR_PREFIX + ("Quotas are described and altered on a PLAINTEXT "
                                       "listener: --command-config is not supported with "
                                       "users and clients")
    assert failed(configs(cluster, "--describe", "--entity-type", "users",
                          "--entity-type", "topics")
                  ) == ERROR_PREFIX + "Only users and clients may be combined as entity types"


def test_entity_and_value_formats() -> None:
    assert quota_entity(["users", "clients"], ["u", "c"], False) == [
        ("user", "u"), ("client-id", "c")]
    assert quota_entity(["clients", "users"], ["c"], True) == [
        ("client-id", "c"), ("user", None)]
    assert quota_entity(["users"], [], False) == []
    with pytest.raises(CommandError):
        quota_entity(["users"], ["a", "b"], False)
    with pytest.raises(CommandError):
        quota_entity(["users", "users"], [], False)
    assert java_double(1048576.0) == "1048576.0"
    assert java_double(10_000_000.0) == "1.0E7"
    assert java_double(12_345_678.0) == "1.2345678E7"
    assert java_double(0.0005) == "5.0E-4"
