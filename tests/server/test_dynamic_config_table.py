"""Every key of Kafka 3.9's dynamic broker config set, through the real protocol and a real
client: accepted per broker through IncrementalAlterConfigs and AlterConfigs, and
cluster-wide (the `<default>` entity) where Kafka allows it (per-broker-only keys refused
there with Kafka's message); described with the right source and synonym chain (passwords
sensitive: no value); stored in `/config/brokers/...` and kept across a restart. Plus what
Kafka refuses (non-dynamic keys, key-store settings without a listener prefix, bad values,
thread pools more than doubled or halved) and librdkafka's own case (its admin test's
AlterConfigs of `sasl.kerberos.min.time.before.relogin`)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from wherry.coordination import paths
from wherry.log.config import LogConfig
from wherry.server import dynamic_keys as dk
from wherry.testing.cluster import DevCluster

BROKER = 4
ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 32, 44
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
SECRET = {"password.encoder.secret": "encoder-secret"}

# Values for keys without a default (any value of the right type is accepted).
_SAMPLES = {
    "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
    "ssl.keystore.location": "/nonexistent/keystore.pem",
    "ssl.truststore.location": "/nonexistent/truststore.pem",
    "ssl.provider": "SunJSSE",
    "ssl.secure.random.implementation": "SHA1PRNG",
    "ssl.engine.factory.class": "org.example.EngineFactory",
    "sasl.kerberos.service.name": "kafka",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    # thread pools: within double / half of the value in force
    "num.io.threads": "12",
    "num.network.threads": "5",
    "num.replica.fetchers": "2",
    "num.recovery.threads.per.data.dir": "2",
    "background.threads": "15",
    "log.cleaner.threads": "2",
    "max.connections": "100000",
    "max.connections.per.ip": "100000",
    "max.connections.per.ip.overrides": "127.0.0.1:100000",
    "sasl.kerberos.min.time.before.relogin": "58000",
}


def _value(key: dk.DynamicKey) -> str:
    if key.name in _SAMPLES:
        return _SAMPLES[key.name]
    if key.type == dk.T.PASSWORD:
        return f"pw-{key.name}"
    assert key.default is not None, key.name
    return key.default


def _names() -> dict[str, str]:
    """Every dynamic key (the key-store ones with a listener prefix) -> a valid value."""
    out: dict[str, str] = {}
    for name, key in dk.DYNAMIC_KEYS.items():
        wire_name = f"listener.name.plaintext.{name}" if name in dk.LISTENER_ONLY_KEYS else name
        out[wire_name] = _value(key)
    defaults = LogConfig()
    for name, topic_name in dk.LOG_KEYS.items():
        out[name] = defaults.value_of(topic_name)
    return out


ALL = _names()


def test_the_set_is_kafkas() -> None:
    # Kafka 3.9: 10 key-store + 30 more listener settings + 6 cleaner (its 7th,
    # message.max.bytes, is a log default) + 30 log defaults + 4 thread pools +
    # metric.reporters + 2 more socket server (its other 2 are listener settings) + 2 producer
    # state + 4 remote log, and the 3 throttles.
    assert len(ALL) == 10 + 30 + 6 + 30 + 4 + 1 + 2 + 2 + 4 + 3
    assert "sasl.kerberos.min.time.before.relogin" in ALL
    assert {"log.cleaner.threads", "log.cleaner.backoff.ms", "log.retention.ms"} <= set(ALL)
    assert "log.retention.hours" not in ALL  # Kafka: only the .ms form is dynamic
    assert "log.message.format.version" not in ALL


def _incremental(
    bs: str | socket.socket, name: str, configs: dict[str, str | None], op: int = 0
) -> Any:
    body = {
        "validate_only": False,
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": name,
                "configs": [
                    {"name": k, "config_operation": op, "value": v} for k, v in configs.items()
                ],
            }
        ],
    }
    (res,) = kafka_wire.call(bs, INCREMENTAL_ALTER_CONFIGS, 1, body).responses
    return res


def _alter(bs: str, name: str, configs: dict[str, str]) -> Any:
    body = {
        "validate_only": False,
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
    }
    (res,) = kafka_wire.call(bs, ALTER_CONFIGS, 1, body).responses
    return res


def _describe(bs: str, name: str) -> dict[str, Any]:
    body = {
        "resources": [{"resource_type": BROKER, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": False,
    }
    (res,) = kafka_wire.call(bs, DESCRIBE_CONFIGS, 4, body).results
    assert res.error_code == ErrorCode.none, res.error_message
    return {e.name: e for e in res.configs}


def _check_described(entries: dict[str, Any], expected: dict[str, str], source: int) -> None:
    for name, value in expected.items():
        entry = entries.get(name)
        assert entry is not None, name
        sensitive = dk.is_password(name)
        assert entry.is_sensitive is sensitive, name
        assert entry.value == (None if sensitive else value), name
        assert entry.config_source == source, name
        first = entry.synonyms[0]
        assert (first.name, first.value, first.source) == (
            name,
            None if sensitive else value,
            source,
        ), name


def _stored(c: DevCluster, broker_id: int | None) -> dict[str, str]:
    data, _ = c.run(c.broker(0).store.get(paths.broker_config_path(broker_id)))
    return paths.decode_config(data)


@pytest.mark.wherry(overrides=SECRET)
def test_every_key_per_broker_through_both_apis_and_a_restart(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    bs = c.bootstrap
    for name, value in ALL.items():  # one at a time: each key accepted on its own
        res = _incremental(bs, "0", {name: value})
        assert res.error_code == ErrorCode.none, (name, res.error_message)
    stored = _stored(c, 0)
    assert set(stored) == set(ALL)
    for name, value in stored.items():  # passwords encoded as Kafka encodes them
        if dk.is_password(name):
            assert value != ALL[name] and "encryptedPassword:" in value
        else:
            assert value == ALL[name]
    _check_described(_describe(bs, "0"), ALL, DYNAMIC_BROKER)

    # A listener override's chain goes on to its base key (here its built-in default).
    entry = _describe(bs, "0")["listener.name.plaintext.ssl.keystore.type"]
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("listener.name.plaintext.ssl.keystore.type", "JKS", DYNAMIC_BROKER),
        ("ssl.keystore.type", "JKS", DEFAULT),
    ]

    # Kept across a restart, in force again.
    c.stop_broker(0)
    c.start_broker(0)
    c.wait_for_controller(30)
    bs = c.bootstrap
    _check_described(_describe(bs, "0"), ALL, DYNAMIC_BROKER)

    # AlterConfigs replaces the entity: every key again in one request, then none.
    res = _alter(bs, "0", ALL)
    assert res.error_code == ErrorCode.none, res.error_message
    _check_described(_describe(bs, "0"), ALL, DYNAMIC_BROKER)
    assert _alter(bs, "0", {}).error_code == ErrorCode.none
    assert _stored(c, 0) == {}
    entry = _describe(bs, "0")["log.cleaner.backoff.ms"]
    assert (entry.value, entry.config_source) == ("15000", DEFAULT)


@pytest.mark.wherry(overrides=SECRET)
def test_every_cluster_wide_key_at_the_default_level(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    bs = c.bootstrap
    cluster_wide = {k: v for k, v in ALL.items() if not dk.is_per_broker(k)}
    per_broker = {k: v for k, v in ALL.items() if dk.is_per_broker(k)}
    assert "num.network.threads" in cluster_wide and "max.connections" in cluster_wide
    assert "listener.name.plaintext.max.connections" not in per_broker
    for name, value in cluster_wide.items():
        res = _incremental(bs, "", {name: value})
        assert res.error_code == ErrorCode.none, (name, res.error_message)
    for name, value in per_broker.items():
        res = _incremental(bs, "", {name: value})
        assert res.error_code == ErrorCode.invalid_request, name
        assert res.error_message == (
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: Set({name})"
        )
    # A per-listener connection limit may be cluster-wide.
    limit = {"listener.name.plaintext.max.connections": "5000"}
    assert _incremental(bs, "", limit).error_code == ErrorCode.none
    cluster_wide |= limit
    assert _stored(c, None) == cluster_wide
    described = _describe(bs, "")
    assert set(described) == set(cluster_wide)
    _check_described(described, cluster_wide, DYNAMIC_DEFAULT)
    # The broker's own view: each from the cluster default now.
    _check_described(_describe(bs, "0"), cluster_wide, DYNAMIC_DEFAULT)
    # AlterConfigs at the default level too.
    assert _alter(bs, "", cluster_wide).error_code == ErrorCode.none
    assert _stored(c, None) == cluster_wide
    c.stop_broker(0)
    c.start_broker(0)
    c.wait_for_controller(30)
    _check_described(_describe(c.bootstrap, ""), cluster_wide, DYNAMIC_DEFAULT)


@pytest.mark.wherry(overrides={"log.retention.hours": "100"})
def test_synonym_chain_of_a_log_default(wherry_broker: DevCluster) -> None:
    bs = wherry_broker.bootstrap
    assert _incremental(bs, "", {"log.retention.ms": "7200000"}).error_code == ErrorCode.none
    assert _incremental(bs, "0", {"log.retention.ms": "3600000"}).error_code == ErrorCode.none
    entry = _describe(bs, "0")["log.retention.ms"]
    assert (entry.value, entry.config_source) == ("3600000", DYNAMIC_BROKER)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "3600000", DYNAMIC_BROKER),
        ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
        ("log.retention.hours", "100", STATIC),
    ]


def test_what_kafka_refuses(wherry_broker: DevCluster) -> None:
    bs = wherry_broker.bootstrap

    def refused(name: str, configs: dict[str, str | None], op: int = 0) -> tuple[int, str]:
        res = _incremental(bs, name, configs, op)
        return res.error_code, res.error_message

    req = ErrorCode.invalid_request
    assert refused("0", {"log.retention.hours": "1"}) == (
        req, "Cannot update these configs dynamically: Set(log.retention.hours)"
    )
    assert refused("0", {"ssl.keystore.location": "/x.pem"}) == (
        req,
        "These security configs can be dynamically updated only per-listener using the "
        "listener prefix: Set(ssl.keystore.location)",
    )
    assert refused("0", {"log.cleaner.threads": "many"}) == (
        req, "Invalid value many for configuration log.cleaner.threads: Not a number of type INT"
    )
    assert refused("0", {"listener.name.plaintext.max.connections": "-1"}) == (
        req, "Invalid value -1 for configuration max.connections: Value must be at least 0"
    )
    assert refused("0", {"sasl.login.refresh.window.factor": "2"}) == (
        req,
        "Invalid value 2.0 for configuration sasl.login.refresh.window.factor: "
        "Value must be no more than 1.0",
    )
    assert refused("0", {"ssl.client.auth": "sometimes"}) == (
        req,
        "Invalid value sometimes for configuration ssl.client.auth: String must be one of: "
        "required, requested, none",
    )
    assert refused("0", {"num.io.threads": "17"}) == (
        req,
        "Invalid value org.apache.kafka.common.config.ConfigException: Dynamic thread count "
        "update validation failed for num.io.threads=17, value should not be greater than "
        "double the current value 8 for configuration Invalid dynamic configuration",
    )
    assert refused("0", {"num.io.threads": "3"})[1].endswith(
        "value should be at least half the current value 8 for configuration Invalid dynamic "
        "configuration"
    )
    listeners = "Advertised listeners 'OTHER://127.0.0.1:9" + "' must be a subset of listeners"
    code, message = refused("0", {"advertised.listeners": "OTHER://127.0.0.1:9"})
    assert code == req and message.startswith(
        "Invalid value org.apache.kafka.common.config.ConfigException: " + listeners
    )
    assert refused("0", {"listener.security.protocol.map": "PLAINTEXT:SSL"})[1].endswith(
        "Security protocol cannot be updated for existing listener PLAINTEXT for configuration "
        "Invalid dynamic configuration"
    )
    assert refused("", {"max.connections": "0"})[1] == (
        "Invalid value org.apache.kafka.common.config.ConfigException: Invalid "
        "max.connections 0 for configuration Invalid dynamic configuration"
    )
    assert refused("", {"num.network.threads": "7"})[1].endswith(
        "num.network.threads=7, value should not be greater than double the current value 3 "
        "for configuration Invalid dynamic configuration"
    )
    # Passwords need the broker's password.encoder.secret to be stored (Kafka's second
    # check, as it stores: INVALID_CONFIG).
    res = _incremental(bs, "0", {"listener.name.plaintext.ssl.key.password": "pw"})
    assert (res.error_code, res.error_message) == (
        ErrorCode.invalid_config,
        "Invalid config value for resource ConfigResource(type=BROKER, name='0'): Password "
        "encoder secret not configured",
    )
    assert _stored_or_empty(wherry_broker) == {}
    # What Kafka accepts that is not a config it knows: custom configs.
    assert _incremental(bs, "0", {"custom.plugin.setting": "x"}).error_code == ErrorCode.none
    entry = _describe(bs, "0")["custom.plugin.setting"]
    assert entry.is_sensitive and entry.value is None and entry.read_only


def _stored_or_empty(c: DevCluster) -> dict[str, str]:
    return c.run(c.broker(0).admin.broker_config(0))


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_librdkafka_admin_alter_configs_of_a_broker(wherry_broker: DevCluster) -> None:
    """librdkafka's 0081 AlterConfigs: `sasl.kerberos.min.time.before.relogin` on a BROKER
    resource is accepted (the legacy API, as the test sends it)."""
    admin = AdminClient({"bootstrap.servers": wherry_broker.bootstrap, "log_level": 0})
    res = ConfigResource(
        ConfigResource.Type.BROKER,
        "0",
        set_config={"sasl.kerberos.min.time.before.relogin": "58000"},
    )
    for f in admin.alter_configs([res], request_timeout=10).values():
        assert f.result(15) is None
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")])
    (f,) = described.values()
    entry = f.result(15)["sasl.kerberos.min.time.before.relogin"]
    assert entry.value == "58000"
    assert entry.source == DYNAMIC_BROKER
    assert not entry.is_read_only
