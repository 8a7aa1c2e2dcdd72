"""`wherry configs` (kafka-configs.sh) against brokers in this process (`DevCluster`): broker
dynamic configs (per broker and the cluster default) and topic configs take effect without a
restart and survive one; bad values get Kafka's errors through real clients."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from wherry.cli.common import CommandError
from wherry.cli.configs import parse_add_config, parse_delete_config
from wherry.cli.main import main
from wherry.log.config import TOPIC_CONFIG_KEYS
from wherry.testing.cluster import DevCluster, wait_until

ERROR_PREFIX = "Error while executing config command : "
LEADER = "leader.replication.throttled.rate"
FOLLOWER = "follower.replication.throttled.rate"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def configs(bootstrap: str, *args: str) -> Result:
    return run("configs", "--bootstrap-server", bootstrap, *args)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def failed(result: Result, prefix: str = ERROR_PREFIX) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith(prefix), result.stderr
    return result.stderr[len(prefix):].strip()


# -------------------------------------------------------------------------------------------
# Offline


def test_parse_add_config() -> None:
    assert parse_add_config("a=1,b = 2") == {"a": "1", "b": "2"}
    assert parse_add_config("x=[0:1,1:2],y=3") == {"x": "0:1,1:2", "y": "3"}
    with pytest.raises(CommandError, match='must be in the format "key=val"'):
        parse_add_config("a=1,b")
    assert parse_delete_config(["a,b", "c"]) == ["a", "b", "c"]


@pytest.mark.parametrize(("args", "message"), [
    (("--entity-type", "topics", "--entity-name", "t"),
     "Command must include exactly one action: --describe, --alter"),
    (("--describe", "--alter", "--entity-type", "topics"),
     "Command must include exactly one action: --describe, --alter"),
    (("--alter", "--entity-type", "topics", "--add-config", "a=1"),
     "An entity name must be specified with --alter of topics"),
    (("--alter", "--entity-type", "topics", "--entity-name", "t"),
     "At least one of --add-config or --delete-config must be specified with --alter"),
    (("--describe", "--entity-type", "brokers", "--entity-name", "x"),
     "The entity name for brokers must be a valid integer broker id, but it is: x"),
    (("--describe", "--entity-type", "topics", "--entity-default"),
     "--entity-default is not supported for topics"),
    (("--describe", "--entity-type", "topics", "--add-config", "a=1"),
     "--add-config and --delete-config can only be used with --alter"),
    (("--alter", "--all", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a=1"),
     "--all can only be used with --describe"),
    (("--describe", "--entity-type", "broker-loggers"),
     "An entity name must be specified with --describe of broker-loggers"),
    (("--describe", "--entity-type", "broker-loggers", "--entity-default"),
     "--entity-default is not supported for broker-loggers"),
    (("--describe", "--entity-type", "broker-loggers", "--entity-name", "x"),
     "The entity name for broker-loggers must be a valid integer broker id, but it is: x"),
    (("--alter", "--entity-type", "groups", "--entity-default", "--add-config", "a=1"),
     "--entity-default is not supported for groups"),
])
def test_bad_arguments(unreachable_bootstrap: str, args: tuple[str, ...], message: str) -> None:
    assert failed(configs(unreachable_bootstrap, *args)) == message


# -------------------------------------------------------------------------------------------
# A cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "cluster", brokers=2,
                    overrides={"auto.leader.rebalance.enable": "false"}) as c:
        c.wait_for_controller()
        yield c


def bounds(c: DevCluster, broker: int) -> tuple[int, int]:
    def read() -> tuple[int, int]:
        dyn = c.broker(broker).dynamic_config
        return dyn.leader_quota.bound, dyn.follower_quota.bound
    return c.call(read)


def described(c: DevCluster, rtype: ResourceType, name: str) -> dict[str, str | None]:
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    (fut,) = admin.describe_configs([ConfigResource(rtype, name)],
                                    request_timeout=10).values()
    return {k: e.value for k, e in fut.result(15).items()}


def produce(c: DevCluster, topic: str, size: int) -> KafkaError | None:
    """Produce one `size`-byte record; its delivery error (None: delivered)."""
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "log_level": 0, "acks": "all",
                  "message.timeout.ms": 10_000, "message.max.bytes": 10_000_000})
    p.produce(topic, b"x" * size, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(20) == 0
    return errors[0]


@pytest.mark.slow
def test_broker_and_topic_configs_live_and_after_restart(cluster: DevCluster) -> None:
    c = cluster
    boot = c.bootstrap
    # A broker's own throttle rates: DescribeConfigs and its quota objects, no restart.
    out = ok(configs(boot, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                     "--add-config", f"{LEADER}=1000000,{FOLLOWER}=2000000"))
    assert out == "Completed updating config for broker 1.\n"
    assert wait_until(lambda: bounds(c, 1) == (1_000_000, 2_000_000), 10), bounds(c, 1)
    out = ok(configs(boot, "--describe", "--entity-type", "brokers", "--entity-name", "1"))
    assert out.splitlines() == [
        "Dynamic configs for broker 1 are:",
        f"  {FOLLOWER}=2000000 sensitive=false "
        f"synonyms={{DYNAMIC_BROKER_CONFIG:{FOLLOWER}=2000000}}",
        f"  {LEADER}=1000000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{LEADER}=1000000}}",
    ]
    # The cluster default reaches the broker without a value of its own.
    out = ok(configs(boot, "--alter", "--entity-type", "brokers", "--entity-default",
                     "--add-config", f"{FOLLOWER}=5000"))
    assert out == "Completed updating default config for brokers in the cluster.\n"
    assert wait_until(lambda: bounds(c, 0)[1] == 5000, 10), bounds(c, 0)
    out = ok(configs(boot, "--describe", "--entity-type", "brokers", "--entity-default"))
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        f"  {FOLLOWER}=5000 sensitive=false "
        f"synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{FOLLOWER}=5000}}",
        # Written at the cluster's first start, as Kafka 4.1+ holds it.
        "  min.insync.replicas=1 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}",
    ]
    assert bounds(c, 1) == (1_000_000, 2_000_000)  # its own value wins

    # A topic config: max.message.bytes refuses a bigger record at once.
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    ok(run("topics", "create", "--bootstrap-server", boot, "--topic", topic,
           "--replica-assignment", "1"))
    c.wait_for_topic(topic, 1)
    assert produce(c, topic, 1000) is None
    out = ok(configs(boot, "--alter", "--entity-type", "topics", "--entity-name", topic,
                     "--add-config", "max.message.bytes=500,retention.ms=3600000"))
    assert out == f"Completed updating config for topic {topic}.\n"
    assert wait_until(lambda: (err := produce(c, topic, 1000)) is not None
                      and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, 10)
    out = ok(configs(boot, "--describe", "--entity-type", "topics", "--entity-name", topic))
    lines = out.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  max.message.bytes=500 sensitive=false "
                               "synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=500, "
                               "DEFAULT_CONFIG:message.max.bytes="), lines
    assert lines[2].startswith("  retention.ms=3600000 sensitive=false "), lines

    # Broker 1 (the topic's leader, with the per-broker rates) restarts: all of it stays.
    c.stop_broker(1)
    c.start_broker(1)
    c.wait_for_topic(topic, 1)
    assert wait_until(lambda: bounds(c, 1) == (1_000_000, 2_000_000), 10), bounds(c, 1)
    assert described(c, ResourceType.BROKER, "1")[LEADER] == "1000000"
    topic_cfg = described(c, ResourceType.TOPIC, topic)
    assert (topic_cfg["max.message.bytes"], topic_cfg["retention.ms"]) == ("500", "3600000")
    err = produce(c, topic, 1000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    # Broker 0 restarts and still has the cluster default.
    c.stop_broker(0)
    c.start_broker(0)
    assert wait_until(lambda: bounds(c, 0)[1] == 5000, 10), bounds(c, 0)

    # Deleting the overrides undoes them, live.
    ok(configs(boot, "--alter", "--entity-type", "topics", "--entity-name", topic,
               "--delete-config", "max.message.bytes,retention.ms"))
    assert wait_until(lambda: produce(c, topic, 1000) is None, 10)
    ok(configs(boot, "--alter", "--entity-type", "brokers", "--entity-name", "1",
               "--delete-config", LEADER))
    ok(configs(boot, "--alter", "--entity-type", "brokers", "--entity-default",
               "--delete-config", FOLLOWER))
    assert wait_until(lambda: bounds(c, 0)[1] > 5000 and bounds(c, 1)[0] > 1_000_000, 10)
    assert ok(configs(boot, "--describe", "--entity-type", "topics", "--entity-name", topic)
              ) == f"Dynamic configs for topic {topic} are:\n"


@pytest.mark.slow
def test_bad_values_get_kafkas_errors(cluster: DevCluster) -> None:
    c = cluster
    boot = c.bootstrap
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    ok(run("topics", "create", "--bootstrap-server", boot, "--topic", topic))
    alter = ("--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config")
    # Every SPEC T1 topic config with a bad value, and Kafka's ConfigException text.
    cases = {
        "unclean.leader.election.enable=maybe": "Expected value to be either true or false",
        "delete.retention.ms=-1": "Value must be at least 0",
        "segment.jitter.ms=-1": "Value must be at least 0",
        "retention.ms=abc": "Not a number of type LONG",
        "flush.ms=-1": "Value must be at least 0",
        "segment.bytes=13": "Value must be at least 14",
        "flush.messages=0": "Value must be at least 1",
        "segment.ms=0": "Value must be at least 1",
        "retention.bytes=1.5": "Not a number of type LONG",
        "cleanup.policy=bogus": "String must be one of: compact, delete",
        "segment.index.bytes=3": "Value must be at least 4",
        "min.cleanable.dirty.ratio=2": "Value must be no more than 1",
        "max.message.bytes=99999999999": "Not a number of type INT",
        "file.delete.delay.ms=-1": "Value must be at least 0",
        "min.insync.replicas=0": "Value must be at least 1",
        "index.interval.bytes=-1": "Value must be at least 0",
    }
    for config, message in list(cases.items()):
        name, value = config.split("=")
        shown = "2.0" if name == "min.cleanable.dirty.ratio" else value  # parsed as a double
        cases[config] = f"Invalid value {shown} for configuration {name}: {message}"
    cases["foo.bar=1"] = "Unknown topic config name: foo.bar"
    for config, message in cases.items():
        assert failed(configs(boot, *alter, config)) == message, config
        # The same value at create time (kafka-topics).
        assert failed(run("topics", "create", "--bootstrap-server", boot, "--topic",
                          f"{topic}-x", "--config", config),
                      "Error while executing topic command : ") == message, config
    assert described(c, ResourceType.TOPIC, topic)["retention.ms"] == "604800000"
    assert failed(configs(boot, *alter[:4], "nope", "--add-config", "retention.ms=1")
                  ) == "The topic 'nope' does not exist."
    broker = ("--alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config")
    # Kafka's request pre-processing answers a broker alter it cannot validate with the
    # validation's own message (no resource prefix).
    assert failed(configs(boot, *broker, f"{LEADER}=-5")) == (
        f"Invalid value -5 for configuration {LEADER}: Value must be at least 0")
    assert failed(configs(boot, *broker, "num.partitions=5")) == (
        "Cannot update these configs dynamically: Set(num.partitions)")
    assert "Value must be at least 0" in failed(
        configs(boot, "--alter", "--entity-type", "brokers", "--entity-default",
                "--add-config", f"{FOLLOWER}=-1"))


def test_describe_all_lists_static_configs(tmp_path: Path) -> None:
    """`--all`: every config of a broker (what it was started with, the defaults, any key
    given that it does not know, without its value) or of a topic, as kafka-configs --all."""
    with DevCluster(tmp_path / "one", brokers=1, overrides={
        "num.partitions": "3", "some.plugin.secret": "hunter2",
    }) as c:
        c.wait_for_controller()
        boot = c.bootstrap
        out = ok(configs(boot, "--describe", "--all", "--entity-type", "brokers",
                         "--entity-name", "0"))
        assert "hunter2" not in out
        lines = out.splitlines()
        assert lines[0] == "All configs for broker 0 are:"
        names = [line.split("=", 1)[0].strip() for line in lines[1:]]
        assert names == sorted(names) and len(names) > 150
        for expected in (
            "  num.partitions=3 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=3, "
            "DEFAULT_CONFIG:num.partitions=1}",
            "  log.retention.hours=168 sensitive=false "
            "synonyms={DEFAULT_CONFIG:log.retention.hours=168}",
            "  replica.fetch.max.bytes=1048576 sensitive=false "
            "synonyms={DEFAULT_CONFIG:replica.fetch.max.bytes=1048576}",
            "  some.plugin.secret=null sensitive=true "
            "synonyms={STATIC_BROKER_CONFIG:some.plugin.secret=null}",
        ):
            assert expected in lines, (expected, out)

        # Without a name: each broker's dynamic configs, then the cluster default's.
        out = ok(configs(boot, "--describe", "--entity-type", "brokers"))
        assert out.splitlines() == [
            "Dynamic configs for broker 0 are:",
            "Default configs for brokers in the cluster are:",
            "  min.insync.replicas=1 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}",
        ]

        # The entries a client reads: static ones read only, dynamic ones not.
        admin = AdminClient({"bootstrap.servers": boot, "log_level": 0})
        (fut,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")],
                                        request_timeout=10).values()
        entries = fut.result(15)
        assert entries["num.partitions"].is_read_only
        assert not entries["message.max.bytes"].is_read_only
        assert entries["some.plugin.secret"].value is None
        assert entries["some.plugin.secret"].is_sensitive

        topic = f"cfg-{uuid.uuid4().hex[:8]}"
        ok(run("topics", "create", "--bootstrap-server", boot, "--topic", topic))
        c.wait_for_topic(topic, 3)
        out = ok(configs(boot, "--describe", "--all", "--entity-type", "topics",
                         "--entity-name", topic))
        lines = out.splitlines()
        assert lines[0] == f"All configs for topic {topic} are:"
        assert [line.split("=", 1)[0].strip() for line in lines[1:]] == sorted(TOPIC_CONFIG_KEYS)


def test_broker_loggers(tmp_path: Path) -> None:
    """`--entity-type broker-loggers`: a broker's log levels listed and changed while it runs,
    the request going to that broker (here broker 1 of two)."""
    name = f"wherry.test_cli_loggers_{uuid.uuid4().hex[:6]}"
    logging.getLogger(name).setLevel(logging.INFO)
    root = logging.getLogger().level
    try:
        with DevCluster(tmp_path / "two", brokers=2) as c:
            c.wait_for_controller()
            boot = c.bootstrap
            loggers = ("--entity-type", "broker-loggers", "--entity-name", "1")
            out = ok(configs(boot, "--describe", *loggers)).splitlines()
            assert out[0] == "Dynamic configs for broker-logger 1 are:"
            assert out[1].startswith("  root=") and out[1].endswith(" sensitive=false synonyms={}")
            assert f"  {name}=INFO sensitive=false synonyms={{}}" in out
            assert ok(configs(boot, "--alter", *loggers, "--add-config", f"{name}=DEBUG")) == (
                "Completed updating config for broker-logger 1.\n")
            assert logging.getLogger(name).level == logging.DEBUG
            assert f"  {name}=DEBUG sensitive=false synonyms={{}}" in ok(
                configs(boot, "--describe", *loggers)).splitlines()
            ok(configs(boot, "--alter", *loggers, "--delete-config", name))
            assert logging.getLogger(name).level == logging.NOTSET
            assert failed(configs(boot, "--alter", *loggers, "--add-config", "no.such.logger=DEBUG")
                          ) == "Logger no.such.logger does not exist!"
            assert failed(configs(boot, "--alter", *loggers, "--delete-config", "root")) == (
                "Removing the log level of the root logger is not allowed")
            assert failed(configs(boot, "--describe", "--entity-type", "broker-loggers",
                                  "--entity-name", "7")) == "Broker 7 is not in the cluster"
    finally:
        logging.getLogger(name).setLevel(logging.NOTSET)
        logging.getLogger().setLevel(root)


def test_group_configs(tmp_path: Path) -> None:
    """`--entity-type groups`: a group's own configs (a share group's `share.*`), as
    kafka-configs sets them; every group when no name is given."""
    with DevCluster(tmp_path / "g", brokers=1) as c:
        c.wait_for_controller()
        boot = c.bootstrap
        group = ("--entity-type", "groups", "--entity-name", "workers")
        assert ok(configs(boot, "--alter", *group, "--add-config",
                          "share.auto.offset.reset=earliest,share.delivery.count.limit=3")) == (
            "Completed updating config for group workers.\n")
        assert ok(configs(boot, "--describe", *group)).splitlines() == [
            "Dynamic configs for group workers are:",
            "  share.auto.offset.reset=earliest sensitive=false "
            "synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}",
            "  share.delivery.count.limit=3 sensitive=false "
            "synonyms={DYNAMIC_GROUP_CONFIG:share.delivery.count.limit=3, "
            "DEFAULT_CONFIG:group.share.delivery.count.limit=5}",
        ]
        every = ok(configs(boot, "--describe", "--all", *group)).splitlines()
        assert every[0] == "All configs for group workers are:"
        assert "  share.record.lock.duration.ms=30000 sensitive=false " \
               "synonyms={DEFAULT_CONFIG:share.record.lock.duration.ms=30000}" in every, every
        assert failed(configs(boot, "--alter", *group, "--add-config",
                              "share.delivery.count.limit=1")).startswith(
            "share.delivery.count.limit must be greater than or equal to")
        ok(configs(boot, "--alter", *group, "--delete-config", "share.auto.offset.reset"))
        assert ok(configs(boot, "--describe", *group)).splitlines()[1:] == [
            "  share.delivery.count.limit=3 sensitive=false "
            "synonyms={DYNAMIC_GROUP_CONFIG:share.delivery.count.limit=3, "
            "DEFAULT_CONFIG:group.share.delivery.count.limit=5}",
        ]

        # Without a name: every group of the cluster (here a consumer group with offsets).
        topic = f"cfg-{uuid.uuid4().hex[:8]}"
        ok(run("topics", "create", "--bootstrap-server", boot, "--topic", topic))
        c.wait_for_topic(topic, 1)
        consumer = Consumer({"bootstrap.servers": boot, "group.id": "readers",
                             "log_level": 0})
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        consumer.close()
        assert ok(configs(boot, "--describe", "--entity-type", "groups")).splitlines() == [
            "Dynamic configs for group readers are:",
        ]
