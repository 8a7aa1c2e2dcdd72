"""The static configs a broker's DescribeConfigs lists (server/static_configs.py): every key
the broker reads, with the value in force and its default, and every key it was given."""

from __future__ import annotations

import pytest

from wherry.log.config import ConfigType
from wherry.replication.fetcher import FETCHER_CONFIG_KEYS, FetcherConfig
from wherry.server import dynamic_keys as dk
from wherry.server.config import BrokerConfig
from wherry.server.config_keys import KNOWN_KEYS
from wherry.server.static_configs import static_configs


def test_every_known_key_is_listed_statically_or_dynamically() -> None:
    listed = static_configs(BrokerConfig())
    missing = sorted(k for k in KNOWN_KEYS if k not in listed and k not in dk.ALL_DYNAMIC)
    assert missing == []
    # A key the broker reads but DescribeConfigs would not show as anything is a gap:
    # the dynamic ones are listed by the dynamic side (server/broker_configs.py).


def test_given_values_defaults_and_types() -> None:
    cfg = BrokerConfig.from_props({
        "num.partitions": "4",
        "log.retention.hours": "24",
        "auto.create.topics.enable": "false",
        "listeners": "PLAINTEXT://127.0.0.1:19092",
        "replica.fetch.max.bytes": "2097152",
        "group.share.max.size": "50",
    })
    c = static_configs(cfg)
    assert (c["num.partitions"].value, c["num.partitions"].default) == ("4", "1")
    assert c["num.partitions"].type == ConfigType.INT
    assert (c["auto.create.topics.enable"].value, c["auto.create.topics.enable"].type) == (
        "false", ConfigType.BOOLEAN)
    assert c["listeners"].value == "PLAINTEXT://127.0.0.1:19092"
    assert c["listeners"].type == ConfigType.LIST
    # Kafka's defaults of the hour and minute names of the retention: hours holds it.
    assert (c["log.retention.hours"].value, c["log.retention.hours"].default) == ("24", "168")
    assert (c["log.retention.minutes"].value, c["log.retention.minutes"].default) == (None, None)
    assert c["log.roll.hours"].default == "168"
    assert c["log.roll.jitter.hours"].default == "0"
    # The value in force of the topic default the hours set.
    assert c["log.retention.ms"].value == str(24 * 3_600_000)
    assert (c["replica.fetch.max.bytes"].value, c["replica.fetch.max.bytes"].default) == (
        "2097152", "1048576")
    assert (c["group.share.max.size"].value, c["group.share.max.size"].default) == ("50", "200")
    assert c["log.retention.check.interval.ms"].type == ConfigType.LONG
    assert c["advertised.listeners"].value is None  # Kafka's null: the listeners are used
    assert c["advertised.listeners"].type == ConfigType.LIST
    # Only the passwords are sensitive when nothing unknown is given.
    assert sorted(k for k, x in c.items() if x.sensitive) == [
        "password.encoder.secret", "zookeeper.digest.password"]


def test_unknown_and_password_keys_are_sensitive() -> None:
    cfg = BrokerConfig.from_props({
        "some.plugin.secret": "hunter2",
        "zookeeper.digest.username": "broker",
        "zookeeper.digest.password": "hunter2",
    })
    c = static_configs(cfg)
    unknown = c["some.plugin.secret"]
    assert (unknown.type, unknown.sensitive, unknown.default) == (ConfigType.UNKNOWN, True, None)
    password = c["zookeeper.digest.password"]
    assert (password.type, password.sensitive) == (ConfigType.PASSWORD, True)
    assert not c["zookeeper.digest.username"].sensitive


def test_keys_asked_for() -> None:
    c = static_configs(BrokerConfig(), ["num.partitions", "no.such.key", "ssl.keystore.password"])
    # A key neither known with a default nor given is not listed (the dynamic side lists the
    # dynamic ones).
    assert list(c) == ["num.partitions"]


@pytest.mark.parametrize("name", sorted(FETCHER_CONFIG_KEYS))
def test_fetcher_config_reads_each_key(name: str) -> None:
    field = FETCHER_CONFIG_KEYS[name]
    got = FetcherConfig.from_properties({name: "12345"})
    assert getattr(got, field) == 12345
    assert got == FetcherConfig(**{field: 12345})
