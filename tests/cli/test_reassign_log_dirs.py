"""`wherry reassign` moving replicas between log directories, against a real `wherry server`
process with two log dirs: execute with `--replica-alter-log-dirs-throttle` → the throttle is
set, the replica's files end in the other dir, verify reports the move in progress and then
completed and removes the throttle, or cancel keeps the replica where it is; a dir the broker
does not have gets its LOG_DIR_NOT_FOUND as an error (exit status 1). And, on a two-broker
cluster of processes, a replica moved to another broker and into a named dir there."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from tests.broker_process import BrokerProcess
from tests.helpers import create_topic
from wherry.cli.common import CommandError
from wherry.cli.main import main
from wherry.cli.reassign_log_dirs import start_moves
from wherry.testing.cluster import ZkCluster

CALL_TIMEOUT_S = 15.0
THROTTLE_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
RATE = 60_000  # B/s: the ~600 KB replica takes ~10 s to copy
RECORDS = 600
VALUE = b"v" * 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("reassign-dirs")
    proc = BrokerProcess(Path(f"{root / 'a'},{root / 'b'}")).start()
    try:
        yield proc
    finally:
        proc.stop()


def dirs(broker: BrokerProcess) -> list[Path]:
    return [Path(d) for d in str(broker.data_dir).split(",")]


def reassign(broker: BrokerProcess, command: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["reassign", command, "--bootstrap-server",
                                     broker.bootstrap, *args], catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def plan(tmp_path: Path, topic: str, log_dir: str) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [0], "log_dirs": [log_dir]}]}))
    return str(path)


def holder(broker: BrokerProcess, topic: str) -> Path:
    (where,) = [d for d in dirs(broker) if (d / f"{topic}-0").is_dir()]
    return where


def throttle(broker: BrokerProcess) -> tuple[str | None, bool]:
    """The broker's log-dir throttle: (value, whether it is a dynamic per-broker setting)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "0")
    entry = admin.describe_configs([res])[res].result(CALL_TIMEOUT_S)[THROTTLE_KEY]
    return entry.value, entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


def fill(bootstrap: str, topic: str, records: int = RECORDS) -> None:
    # Small batches: the mover copies whole batches, so one batch as large as the replica
    # would be copied (and the move finished) in one step, throttle or not.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(records):
        producer.produce(topic, VALUE, key=str(i).encode())
    assert producer.flush(CALL_TIMEOUT_S) == 0


def test_move_to_the_other_dir_throttled_then_verify(broker: BrokerProcess,
                                                    tmp_path: Path) -> None:
    topic = "mv-dirs"
    create_topic(broker.bootstrap, topic)
    fill(broker.bootstrap, topic)
    src = holder(broker, topic)
    dest = next(d for d in dirs(broker) if d != src)
    size = sum(f.stat().st_size for f in (src / f"{topic}-0").glob("*.log"))
    assert size > RECORDS * len(VALUE)
    json_file = plan(tmp_path, topic, str(dest))

    out = ok(reassign(broker, "execute", "--reassignment-json-file", json_file,
                      "--replica-alter-log-dirs-throttle", str(RATE)))
    assert "Warning: You must run --verify periodically" in out
    assert f"The replica-alter-dir throttle limit was set to {RATE} B/s\n" in out
    assert f"Successfully started partition reassignment for {topic}-0\n" in out
    assert out.endswith(f"Successfully started moving log directory to {dest} for replica "
                        f"{topic}-0 with broker 0 \n")
    assert throttle(broker) == (str(RATE), True)

    # At RATE the copy takes seconds: verify sees it under way and keeps the throttle.
    out = ok(reassign(broker, "verify", "--reassignment-json-file", json_file))
    assert out == ("Status of partition reassignment:\n"
                   f"Reassignment of partition {topic}-0 is completed.\n"
                   f"Reassignment of replica {topic}-0-0 is still in progress.\n")
    assert throttle(broker) == (str(RATE), True)

    result = reassign(broker, "verify", "--reassignment-json-file", json_file, "--wait",
                      "--wait-timeout-ms", "120000", "--poll-interval-ms", "500")
    out = ok(result)
    assert out.startswith("Status of partition reassignment:\n"
                          f"Reassignment of partition {topic}-0 is completed.\n"
                          f"Reassignment of replica {topic}-0-0 completed successfully.\n")
    assert "Clearing broker-level throttles on broker 0\n" in out
    assert "1 log-dir move in progress" in result.stderr
    value, dynamic = throttle(broker)
    assert not dynamic and value != str(RATE)
    # The files: the replica's log is in the new dir only, all of it.
    assert not (src / f"{topic}-0").exists()
    assert sum(f.stat().st_size for f in (dest / f"{topic}-0").glob("*.log")) == size
    assert not [p for p in dest.iterdir() if p.name.endswith("-future")]
    # Verify again: still completed, nothing else to say.
    out = ok(reassign(broker, "verify", "--reassignment-json-file", json_file,
                      "--preserve-throttles"))
    assert out.endswith(f"Reassignment of replica {topic}-0-0 completed successfully.\n")


def test_cancel_keeps_the_replica_where_it_is(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = "mv-cancel"
    create_topic(broker.bootstrap, topic)
    fill(broker.bootstrap, topic)
    src = holder(broker, topic)
    dest = next(d for d in dirs(broker) if d != src)
    json_file = plan(tmp_path, topic, str(dest))
    ok(reassign(broker, "execute", "--reassignment-json-file", json_file,
                "--replica-alter-log-dirs-throttle", str(RATE)))
    assert [p for p in dest.iterdir() if p.name.endswith("-future")]
    out = ok(reassign(broker, "cancel", "--reassignment-json-file", json_file))
    assert out == ("None of the specified partition reassignments are active.\n"
                   f"Successfully started moving log directory to {src} for replica {topic}-0 "
                   "with broker 0 \n"
                   "Clearing broker-level throttles on broker 0\n"
                   f"Clearing topic-level throttles on topic {topic}\n")
    assert throttle(broker)[1] is False
    out = ok(reassign(broker, "verify", "--reassignment-json-file", json_file,
                      "--preserve-throttles"))
    assert out.endswith(f"Partition {topic}-0 on broker 0 is not being moved from log dir "
                        f"{src} to {dest}.\n")
    assert holder(broker, topic) == src
    assert not [p for p in dest.iterdir() if p.name.endswith("-future")]
    # nothing left to cancel
    out = ok(reassign(broker, "cancel", "--reassignment-json-file", json_file,
                      "--preserve-throttles"))
    assert out.endswith("None of the specified partition moves are active.\n")


def test_a_dir_the_broker_does_not_have(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = "mv-nodir"
    create_topic(broker.bootstrap, topic)
    src = holder(broker, topic)
    missing = tmp_path / "not-a-log-dir"
    result = reassign(broker, "execute", "--reassignment-json-file",
                      plan(tmp_path, topic, str(missing)))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr == (
        f"Error: Failed to alter dir for {topic}-0-0: org.apache.kafka.common.errors."
        "LogDirNotFoundException: The user-specified log directory is not found in the "
        "broker config.\n")
    assert holder(broker, topic) == src
    assert not missing.exists()
    # verify says where the replica is instead
    out = ok(reassign(broker, "verify", "--reassignment-json-file",
                      plan(tmp_path, topic, str(missing)), "--preserve-throttles"))
    assert out.endswith(f"Partition {topic}-0 on broker 0 is not being moved from log dir "
                        f"{src} to {missing}.\n")


def test_a_relative_log_dir_is_refused_before_anything_is_sent(broker: BrokerProcess,
                                                               tmp_path: Path) -> None:
    result = reassign(broker, "execute", "--reassignment-json-file",
                      plan(tmp_path, "mv-rel", "data/b"))
    assert result.exit_code == 1
    assert result.stderr.startswith('Error: Invalid log dir "data/b" for replica 0 of '
                                    "partition mv-rel-0")


def test_a_replica_moving_to_another_broker_lands_in_the_named_dir(tmp_path: Path) -> None:
    """The log-dir move of a replica the reassignment creates on a new broker: asked again
    until that broker holds it, then it is in the named dir there."""
    root = tmp_path / "cluster"
    log_dirs = {b: [root / f"b{b}-x", root / f"b{b}-y"] for b in (0, 1)}
    with ZkCluster(root, brokers=2, log_dirs=log_dirs) as cluster:
        topic = "mv-broker"
        create_topic(cluster.bootstrap, topic, [[0]])
        fill(cluster.bootstrap, topic, 100)
        dest = log_dirs[1][1]
        # Kafka's retry: a replica its broker does not hold (REPLICA_NOT_AVAILABLE) is asked
        # for again until the time is up.
        addresses = {b: (cluster.host, cluster.ports[b]) for b in (0, 1)}
        asked: list[float] = []

        def sleep(seconds: float) -> None:
            asked.append(seconds)
            time.sleep(seconds)

        with pytest.raises(CommandError) as e:
            start_moves(addresses, {(topic, 0, 1): str(dest)}, CALL_TIMEOUT_S, 1.0,
                        print, sleep=sleep)
        assert str(e.value) == ("Timed out before log directory move could be started for: "
                                f"{topic}-0-1")
        assert len(asked) >= 3
        path = tmp_path / "plan.json"
        path.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [1], "log_dirs": [str(dest)]}]}))
        args = ["--bootstrap-server", cluster.bootstrap, "--reassignment-json-file", str(path)]
        result = CliRunner().invoke(main, ["reassign", "execute", *args],
                                    catch_exceptions=False)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert result.stdout.endswith(
            f"Successfully started moving log directory to {dest} for replica {topic}-0 "
            "with broker 1 \n")
        result = CliRunner().invoke(main, ["reassign", "verify", *args, "--wait",
                                           "--wait-timeout-ms", "60000"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert result.stdout.startswith(
            "Status of partition reassignment:\n"
            f"Reassignment of partition {topic}-0 is completed.\n"
            f"Reassignment of replica {topic}-0-1 completed successfully.\n")
        assert (dest / f"{topic}-0").is_dir()
        assert not (log_dirs[1][0] / f"{topic}-0").exists()
        assert sum(f.stat().st_size for f in (dest / f"{topic}-0").glob("*.log")) > 100_000
