"""Dynamic broker configs through real admin clients (KIP-73's throttle rates):
IncrementalAlterConfigs and AlterConfigs of BROKER resources write `/config/brokers/<id>` (or
`<default>`), the change notification reaches the broker's replication quotas, DescribeConfigs
lists them with their source; keys that cannot change at run time and bad values are refused
with Kafka's INVALID_REQUEST, bad throttled-replica topic configs with INVALID_CONFIG. (Every
other dynamic key: test_dynamic_config_table.py.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from tests.helpers import create_topic
from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.replication.quota import UNLIMITED_RATE
from wherry.server.broker_configs import DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG
from wherry.testing.cluster import DevCluster, wait_until

LEADER = "leader.replication.throttled.rate"
FOLLOWER = "follower.replication.throttled.rate"
BROKER = 4
ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 32, 44
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def _admin(c: DevCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})


def _incremental(
    admin: AdminClient, name: str, ops: list[tuple[str, str | None, AlterConfigOpType]]
) -> None:
    res = ConfigResource(
        ConfigResource.Type.BROKER,
        name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops],
    )
    for f in admin.incremental_alter_configs([res], request_timeout=10).values():
        f.result(15)


def _error_of(
    admin: AdminClient,
    rtype: ConfigResource.Type,
    name: str,
    ops: list[tuple[str, str | None, AlterConfigOpType]],
) -> int:
    res = ConfigResource(
        rtype,
        name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops],
    )
    (f,) = admin.incremental_alter_configs([res], request_timeout=10).values()
    with pytest.raises(KafkaException) as e:
        f.result(15)
    code: int = e.value.args[0].code()
    return code


def _describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.BROKER, name)
    entries: dict[str, ConfigEntry] = admin.describe_configs([res], request_timeout=10)[res].result(
        15
    )
    return entries


def _bounds(c: DevCluster, broker_id: int = 0) -> tuple[int, int]:
    def get() -> tuple[int, int]:
        dyn = c.broker(broker_id).dynamic_config
        return dyn.leader_quota.bound, dyn.follower_quota.bound

    return c.call(get)


def test_throttle_rates_set_described_and_applied(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    admin = _admin(c)
    before = _describe(admin, "0")
    assert before[LEADER].value == str(UNLIMITED_RATE)
    assert before[LEADER].source == ConfigSource.DEFAULT_CONFIG.value
    assert not before[LEADER].is_read_only
    assert before["broker.id"].is_read_only

    _incremental(admin, "0", [(LEADER, "1048576", SET), (FOLLOWER, "2097152", SET)])
    assert wait_until(lambda: _bounds(c) == (1_048_576, 2_097_152), 10)
    after = _describe(admin, "0")
    assert after[LEADER].value == "1048576"
    assert after[LEADER].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert after[FOLLOWER].value == "2097152"
    stored = c.run(c.broker(0).admin.broker_config(0))
    assert stored == {LEADER: "1048576", FOLLOWER: "2097152"}

    # Unset: unlimited again.
    _incremental(admin, "0", [(LEADER, None, DELETE), (FOLLOWER, None, DELETE)])
    assert wait_until(lambda: _bounds(c) == (UNLIMITED_RATE, UNLIMITED_RATE), 10)


def test_the_throttles_in_force_are_logged_in_words(
    wherry_broker: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Each (re)load logs the rates in force; no throttle reads "none", not Long.MAX."""
    c = wherry_broker
    caplog.set_level("INFO", logger="wherry.server.broker_configs")
    _incremental(_admin(c), "0", [(LEADER, "1048576", SET)])

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "replication throttles" in r.message]

    assert wait_until(
        lambda: "[Broker id=0] replication throttles: leader 1048576 B/s, follower none"
        in lines(),
        10,
    ), lines()
    assert not any(str(UNLIMITED_RATE) in line for line in lines())


def test_broker_config_alters_that_kafka_refuses(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    admin = _admin(c)
    broker = ConfigResource.Type.BROKER
    invalid_request = KafkaError.INVALID_REQUEST
    # Static (read-only) keys cannot change at run time.
    assert _error_of(admin, broker, "0", [("broker.id", "7", SET)]) == invalid_request
    assert _error_of(admin, broker, "0", [("log.dirs", "/tmp/x", SET)]) == invalid_request
    # Bad values of the dynamic keys.
    assert _error_of(admin, broker, "0", [(LEADER, "fast", SET)]) == invalid_request
    assert _error_of(admin, broker, "0", [(LEADER, "-1", SET)]) == invalid_request
    # Appending to a key that is no list: Kafka's InvalidConfigurationException.
    assert _error_of(admin, broker, "0", [(LEADER, "1", APPEND)]) == KafkaError.INVALID_CONFIG
    # Nothing was written.
    assert c.run(c.broker(0).admin.broker_config(0)) == {}
    # A key the broker does not know is a custom config, which Kafka stores as it is.
    _incremental(admin, "0", [("no.such.config", "1", SET)])
    assert c.run(c.broker(0).admin.broker_config(0)) == {"no.such.config": "1"}
    _incremental(admin, "0", [("no.such.config", None, DELETE)])
    assert _bounds(c) == (UNLIMITED_RATE, UNLIMITED_RATE)

    # The topic configs naming throttled replicas: `partition:broker` or `*`.
    topic = f"thr-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, [[0]])
    t = ConfigResource.Type.TOPIC
    key = "leader.replication.throttled.replicas"
    assert _error_of(admin, t, topic, [(key, "0-0", SET)]) == KafkaError.INVALID_CONFIG
    assert _error_of(admin, t, topic, [(key, "0:0,*", SET)]) == KafkaError.INVALID_CONFIG
    res = ConfigResource(
        t, topic, incremental_configs=[ConfigEntry(key, "0:0", incremental_operation=SET)]
    )
    admin.incremental_alter_configs([res])[res].result(15)

    def throttled() -> bool:
        q = c.broker(0).dynamic_config.leader_quota
        return q.is_throttled(TopicPartition(topic, 0)) and not q.is_throttled(
            TopicPartition(topic, 1)
        )

    assert wait_until(lambda: c.call(throttled), 10)


def test_kafka_python_alter_and_describe_broker_configs(wherry_broker: DevCluster) -> None:
    c = wherry_broker
    kp = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=10_000)
    try:
        res = KpConfigResource(ConfigResourceType.BROKER, "0", configs={LEADER: "3000000"})
        kp.alter_configs([res], incremental=False)
        assert wait_until(lambda: _bounds(c)[0] == 3_000_000, 10)
        described = kp.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "0", configs={LEADER: None})]
        )
        entry = described["broker"]["0"][LEADER]
        assert entry["value"] == "3000000"
        assert entry["config_source"] == "DYNAMIC_BROKER_CONFIG"
        assert entry["read_only"] is False
        res = KpConfigResource(ConfigResourceType.BROKER, "0", configs={FOLLOWER: "4000000"})
        kp.alter_configs([res], incremental=True)
        assert wait_until(lambda: _bounds(c) == (3_000_000, 4_000_000), 10)

    finally:
        kp.close()
    data, _ = c.run(c.broker(0).store.get(paths.broker_config_path(0)))
    assert paths.decode_config(data) == {LEADER: "3000000", FOLLOWER: "4000000"}


def _wire_alter(bootstrap: str, name: str, ops: list[tuple[str, str | None, int]]) -> Any:
    body = {
        "validate_only": False,
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, v, op in ops],
            }
        ],
    }
    (res,) = kafka_wire.call(bootstrap, INCREMENTAL_ALTER_CONFIGS, 1, body).responses
    return res


def _wire_describe(bootstrap: str, name: str) -> Any:
    body = {
        "resources": [{"resource_type": BROKER, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": False,
    }
    (res,) = kafka_wire.call(bootstrap, DESCRIBE_CONFIGS, 4, body).results
    return res


def test_cluster_default_entity_and_broker_ids_on_the_wire(wherry_broker: DevCluster) -> None:
    """The empty resource name is the cluster-wide default (`/config/brokers/<default>`),
    which neither client library sends; a per-broker value wins over it."""
    c = wherry_broker
    bs = c.bootstrap
    res = _wire_alter(bs, "", [(FOLLOWER, "5000", 0)])
    assert res.error_code == ErrorCode.none, res.error_message
    assert wait_until(lambda: _bounds(c) == (UNLIMITED_RATE, 5000), 10)
    described = _wire_describe(bs, "")
    assert described.error_code == ErrorCode.none
    # (with the cluster-level min.insync.replicas every cluster holds from its first start)
    assert sorted((e.name, e.value, e.config_source) for e in described.configs) == [
        (FOLLOWER, "5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("min.insync.replicas", "1", DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    assert _wire_alter(bs, "0", [(FOLLOWER, "7000", 0)]).error_code == ErrorCode.none
    assert wait_until(lambda: _bounds(c) == (UNLIMITED_RATE, 7000), 10)
    (entry,) = [e for e in _wire_describe(bs, "0").configs if e.name == FOLLOWER]
    assert (entry.value, entry.config_source) == ("7000", DYNAMIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in entry.synonyms] == [
        ("7000", DYNAMIC_BROKER_CONFIG),
        ("5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    assert _wire_alter(bs, "0", [(FOLLOWER, None, 1)]).error_code == ErrorCode.none
    assert wait_until(lambda: _bounds(c) == (UNLIMITED_RATE, 5000), 10)
    # Static keys cannot be set at the default level either.
    bad = _wire_alter(bs, "", [("num.partitions", "3", 0)])
    assert bad.error_code == ErrorCode.invalid_request
    assert "Cannot update these configs dynamically" in bad.error_message
    # Another broker's resource, or a name that is no broker id.
    other = _wire_alter(bs, "7", [(LEADER, "1", 0)])
    assert other.error_code == ErrorCode.invalid_request
    assert other.error_message == "Unexpected broker id, expected 0, but received 7"
    assert _wire_alter(bs, "x", [(LEADER, "1", 0)]).error_code == ErrorCode.invalid_request
    dup = _wire_alter(bs, "0", [(LEADER, "1", 0), (LEADER, "2", 0)])
    assert dup.error_code == ErrorCode.invalid_request
    assert _bounds(c) == (UNLIMITED_RATE, 5000)


def test_alter_configs_replaces_the_broker_entity(wherry_broker: DevCluster) -> None:
    """AlterConfigs (key 33) replaces the whole entity: keys not given are unset."""
    c = wherry_broker
    bs = c.bootstrap

    def alter(configs: list[tuple[str, str | None]], validate_only: bool = False) -> Any:
        body = {
            "validate_only": validate_only,
            "resources": [
                {
                    "resource_type": BROKER,
                    "resource_name": "0",
                    "configs": [{"name": k, "value": v} for k, v in configs],
                }
            ],
        }
        (res,) = kafka_wire.call(bs, ALTER_CONFIGS, 1, body).responses
        return res

    assert alter([(LEADER, "1000"), (FOLLOWER, "2000")]).error_code == ErrorCode.none
    assert wait_until(lambda: _bounds(c) == (1000, 2000), 10)
    assert alter([(LEADER, "3000")], validate_only=True).error_code == ErrorCode.none
    assert alter([(LEADER, "3000")]).error_code == ErrorCode.none
    assert wait_until(lambda: _bounds(c) == (3000, UNLIMITED_RATE), 10)
    nulls = alter([(LEADER, None)])
    assert nulls.error_code == ErrorCode.invalid_request
    assert nulls.error_message == f"Null value not supported for : {LEADER}"
    fixed = alter([(LEADER, "1"), ("broker.id", "1")])
    assert fixed.error_code == ErrorCode.invalid_request
    assert fixed.error_message == "Cannot update these configs dynamically: Set(broker.id)"
    assert c.run(c.broker(0).admin.broker_config(0)) == {LEADER: "3000"}
