"""`wherry reassign` run as click commands against a real 4-broker `DevCluster`.

Checked: generate's output (Kafka's two JSON blocks, a balanced plan that moves few replicas),
execute's validation (nothing is submitted on bad input: the replicas stay as they were), and,
with the controller's reassignment API, execute → verify (--wait) → the new replicas, cancel,
list and the throttles set and cleared.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from wherry.cli.main import main
from wherry.cli.reassign_plan import counts
from wherry.controller.controller import Controller
from wherry.testing.cluster import DevCluster, wait_until

CALL_TIMEOUT_S = 15.0
BROKERS = [0, 1, 2, 3]

needs_controller_api = pytest.mark.skipif(
    not hasattr(Controller, "alter_partition_reassignments"),
    reason="the controller's reassignment API is not merged yet")
needs_broker_throttles = pytest.mark.skipif(
    importlib.util.find_spec("wherry.server.broker_configs") is None,
    reason="dynamic broker throttle configs are not merged yet")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("reassign") / "cluster", brokers=len(BROKERS),
                    base_port=0,
                    # The tests move leadership themselves: no rebalance behind their backs.
                    overrides={"auto.leader.rebalance.enable": "false"}) as c:
        c.wait_for_controller()
        yield c


@pytest.fixture
def topic() -> str:
    return f"re-{uuid.uuid4().hex[:8]}"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def reassign(cluster: DevCluster, command: str, *args: str) -> Result:
    return run("reassign", command, "--bootstrap-server", cluster.bootstrap, *args)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def failed(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith("Error: "), result.stderr
    return result.stderr


def create(cluster: DevCluster, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futs = admin.create_topics([NewTopic(topic, num_partitions=len(assignment),
                                        replica_assignment=assignment)],
                               request_timeout=CALL_TIMEOUT_S)
    for fut in futs.values():
        fut.result(CALL_TIMEOUT_S)
    cluster.wait_for_topic(topic, len(assignment))


def replicas(cluster: DevCluster, topic: str) -> dict[int, list[int]]:
    view = cluster.metadata(cluster.broker_ids[0], [topic])
    return {p: list(info.replicas) for p, info in view.partitions(topic).items()}


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def plan_file(tmp_path: Path, topic: str, plan: dict[int, list[int]]) -> str:
    return write(tmp_path, "plan.json", {"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in plan.items()]})


# --------------------------------------------------------------------------------------------
# generate


def test_generate_prints_current_and_a_balanced_proposal(cluster: DevCluster, topic: str,
                                                          tmp_path: Path) -> None:
    create(cluster, topic, [[0, 1], [1, 2], [2, 0], [0, 1], [1, 2], [2, 0]])
    topics = write(tmp_path, "topics.json", {"topics": [{"topic": topic}], "version": 1})
    out = ok(reassign(cluster, "generate", "--topics-to-move-json-file", topics,
                      "--broker-list", "0,1,2,3"))
    head, current_json, blank, proposed_head, proposed_json = out.rstrip("\n").split("\n")
    assert (head, blank, proposed_head) == (
        "Current partition replica assignment", "",
        "Proposed partition reassignment configuration")
    assert current_json == json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any", "any"]}
        for p, r in sorted(replicas(cluster, topic).items())]}, separators=(",", ":"))
    proposed = {(e["topic"], e["partition"]): e["replicas"]
                for e in json.loads(proposed_json)["partitions"]}
    assert counts(proposed, BROKERS) == {0: 3, 1: 3, 2: 3, 3: 3}
    assert max(counts(proposed, BROKERS, leaders_only=True).values()) == 2
    moved = sum(len(set(r) - set(replicas(cluster, topic)[p])) for (_, p), r in proposed.items())
    assert moved == 3  # broker 3's share, nothing more


def test_generate_errors(cluster: DevCluster, topic: str, tmp_path: Path) -> None:
    create(cluster, topic, [[0, 1, 2]])
    topics = write(tmp_path, "topics.json", {"topics": [{"topic": topic}]})
    err = failed(reassign(cluster, "generate", "--topics-to-move-json-file", topics,
                          "--broker-list", "0,1"))
    assert "Replication factor: 3 larger than available brokers: 2" in err
    missing = write(tmp_path, "missing.json", {"topics": [{"topic": "no-such-topic"}]})
    assert "Topic no-such-topic not found." in failed(reassign(
        cluster, "generate", "--topics-to-move-json-file", missing, "--broker-list", "0,1"))
    assert "Broker list contains duplicate entries: 1" in failed(reassign(
        cluster, "generate", "--topics-to-move-json-file", topics, "--broker-list", "0,1,1"))


# --------------------------------------------------------------------------------------------
# execute: validation before anything is submitted


@pytest.mark.parametrize("plan, message", [
    ({0: [0, 7]}, "Unknown broker id 7"),
    ({0: [0, 1], 5: [1, 2]}, "Unable to find partition: {topic}-5"),
    ({0: [1, 2, 1]}, "Partition replica lists may not contain duplicate entries: {topic}-0 "
                     "contains multiple entries for 1"),
    ({0: []}, "Partition replica list cannot be empty"),
])
def test_execute_rejects_bad_plans_and_submits_nothing(
        cluster: DevCluster, topic: str, tmp_path: Path, plan: dict[int, list[int]],
        message: str) -> None:
    create(cluster, topic, [[0, 1]])
    before = replicas(cluster, topic)
    err = failed(reassign(cluster, "execute", "--reassignment-json-file",
                          plan_file(tmp_path, topic, plan)))
    assert message.format(topic=topic) in err
    assert replicas(cluster, topic) == before


def test_execute_rejects_unknown_topics_bad_json_and_log_dirs(cluster: DevCluster,
                                                              tmp_path: Path) -> None:
    unknown = plan_file(tmp_path, "no-such-topic", {0: [0]})
    assert "Unable to find partition: no-such-topic-0" in failed(
        reassign(cluster, "execute", "--reassignment-json-file", unknown))
    bad = write(tmp_path, "bad.json", '{"version":1,"partitions":[')
    assert "The input string is not a valid JSON" in failed(
        reassign(cluster, "execute", "--reassignment-json-file", bad))
    relative = write(tmp_path, "relative.json", {"version": 1, "partitions": [
        {"topic": "no-such-topic", "partition": 0, "replicas": [0], "log_dirs": ["b"]}]})
    assert 'Invalid log dir "b" for replica 0 of partition no-such-topic-0' in failed(
        reassign(cluster, "execute", "--reassignment-json-file", relative,
                 "--replica-alter-log-dirs-throttle", "100"))


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path, unreachable_bootstrap: str
                                              ) -> None:
    plan = plan_file(tmp_path, "t", {0: [0]})
    result = run("reassign", "verify", "--bootstrap-server", unreachable_bootstrap,
                 "--reassignment-json-file", plan, "--timeout-ms", "1500")
    assert "Timed out after 1500 ms" in failed(result)


# --------------------------------------------------------------------------------------------
# execute → verify, cancel, list (the controller's reassignment API)


def produce(cluster: DevCluster, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5,
                         "log_level": 0})
    for i in range(n):
        producer.produce(topic, value=b"x" * 100, key=str(i).encode(), partition=i % 2)
    assert producer.flush(CALL_TIMEOUT_S) == 0


@needs_controller_api
def test_execute_then_verify_moves_the_replicas(cluster: DevCluster, topic: str,
                                                tmp_path: Path) -> None:
    create(cluster, topic, [[0, 1], [1, 0]])
    produce(cluster, topic, 200)
    plan = plan_file(tmp_path, topic, {0: [2, 3], 1: [3, 0]})
    out = ok(reassign(cluster, "execute", "--reassignment-json-file", plan))
    rollback = json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [0, 1], "log_dirs": ["any", "any"]},
        {"topic": topic, "partition": 1, "replicas": [1, 0], "log_dirs": ["any", "any"]}]},
        separators=(",", ":"))
    assert out == (f"Current partition replica assignment\n\n{rollback}\n\n"
                   "Save this to use as the --reassignment-json-file option during rollback\n"
                   f"Successfully started partition reassignments for {topic}-0,{topic}-1\n")
    result = reassign(cluster, "verify", "--reassignment-json-file", plan, "--wait",
                      "--wait-timeout-ms", "30000", "--poll-interval-ms", "200")
    out = ok(result)
    assert out.startswith("Status of partition reassignment:\n"
                          f"Reassignment of partition {topic}-0 is completed.\n"
                          f"Reassignment of partition {topic}-1 is completed.\n")
    assert "2/2 partitions completed" in result.stderr
    assert "Clearing broker-level throttles on brokers 0,1,2,3\n" in out
    assert f"Clearing topic-level throttles on topic {topic}\n" in out
    assert replicas(cluster, topic) == {0: [2, 3], 1: [3, 0]}
    assert ok(reassign(cluster, "list")) == "No partition reassignments found.\n"
    # a plan already reached: nothing to cancel
    assert ok(reassign(cluster, "cancel", "--reassignment-json-file", plan,
                       "--preserve-throttles")) == (
        "None of the specified partition reassignments are active.\n")


@needs_controller_api
def test_verify_reports_a_replica_set_that_differs(cluster: DevCluster, topic: str,
                                                   tmp_path: Path) -> None:
    create(cluster, topic, [[0, 1]])
    plan = plan_file(tmp_path, topic, {0: [2, 3]})
    out = ok(reassign(cluster, "verify", "--reassignment-json-file", plan,
                      "--preserve-throttles"))
    assert out == ("Status of partition reassignment:\n"
                   f"There is no active reassignment of partition {topic}-0, but replica set "
                   "is 0,1 rather than 2,3.\n")


@needs_controller_api
def test_cancel_with_nothing_active(
        cluster: DevCluster, topic: str, tmp_path: Path) -> None:
    create(cluster, topic, [[0, 1]])
    # nothing listed as active: cancel sends no AlterPartitionReassignments at all
    plan = plan_file(tmp_path, topic, {0: [0, 1]})
    assert "None of the specified partition reassignments are active." in ok(
        reassign(cluster, "cancel", "--reassignment-json-file", plan, "--preserve-throttles"))


@needs_controller_api
@needs_broker_throttles
def test_throttles_are_set_by_execute_and_cleared_by_verify(
        cluster: DevCluster, topic: str, tmp_path: Path) -> None:
    create(cluster, topic, [[0, 1]])
    produce(cluster, topic, 50)
    plan = plan_file(tmp_path, topic, {0: [2, 1]})
    out = ok(reassign(cluster, "execute", "--reassignment-json-file", plan,
                      "--throttle", "50000000"))
    assert "Warning: You must run --verify periodically" in out
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    ok(reassign(cluster, "verify", "--reassignment-json-file", plan, "--wait",
                "--preserve-throttles", "--wait-timeout-ms", "30000"))
    res = ConfigResource(ResourceType.TOPIC, topic)
    cfg = admin.describe_configs([res])[res].result(CALL_TIMEOUT_S)
    assert cfg["leader.replication.throttled.replicas"].value == "0:0,0:1"
    assert cfg["follower.replication.throttled.replicas"].value == "0:2"
    broker = ConfigResource(ResourceType.BROKER, "2")
    bcfg = admin.describe_configs([broker])[broker].result(CALL_TIMEOUT_S)
    assert bcfg["follower.replication.throttled.rate"].value == "50000000"
    ok(reassign(cluster, "verify", "--reassignment-json-file", plan))

    def cleared() -> bool:
        c = admin.describe_configs([res])[res].result(CALL_TIMEOUT_S)
        return not c["leader.replication.throttled.replicas"].value

    assert wait_until(cleared, 10.0)
