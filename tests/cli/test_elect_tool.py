"""`wherry elect` run as a click command: option checks (no cluster needed) and, against a real
3-broker `DevCluster` with the controller's ElectLeaders, preferred elections after a broker
came back, "already elected" partitions and per-partition failures (exit status 1)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.cli.main import main
from wherry.controller.controller import Controller
from wherry.testing.cluster import DevCluster, wait_until

CALL_TIMEOUT_S = 15.0

needs_controller_api = pytest.mark.skipif(
    not hasattr(Controller, "elect_leaders"),
    reason="the controller's ElectLeaders API is not merged yet")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["elect", *args], catch_exceptions=False)


def failed(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    return result.stdout + result.stderr


# --------------------------------------------------------------------------------------------
# Options (checked before connecting: the address below is never used)


@pytest.mark.parametrize("args, message", [
    ([], "One and only one of the following options is required: topic, "
         "all-topic-partitions, path-to-json-file"),
    (["--all-topic-partitions", "--topic", "t", "--partition", "0"],
     "One and only one of the following options is required"),
    (["--topic", "t"], "Missing required option(s): partition"),
    (["--all-topic-partitions", "--partition", "0"],
     "Option partition is only allowed if topic is used"),
])
def test_option_errors(args: list[str], message: str, unreachable_bootstrap: str) -> None:
    result = run("--bootstrap-server", unreachable_bootstrap, "--election-type", "preferred",
                 *args)
    assert message in failed(result)


def test_election_type_is_required_and_checked(unreachable_bootstrap: str) -> None:
    result = run("--bootstrap-server", unreachable_bootstrap, "--all-topic-partitions")
    assert result.exit_code == 2 and "--election-type" in result.stderr
    result = run("--bootstrap-server", unreachable_bootstrap, "--all-topic-partitions",
                 "--election-type", "dirty")
    assert result.exit_code == 2 and "dirty" in result.stderr


def test_bad_json_file(tmp_path: Path, unreachable_bootstrap: str) -> None:
    path = tmp_path / "e.json"
    path.write_text('{"partitions":[{"topic":"a","partition":0},{"topic":"a","partition":0}]}')
    result = run("--bootstrap-server", unreachable_bootstrap, "--election-type", "preferred",
                 "--path-to-json-file", str(path))
    assert "Replica election data contains duplicate partitions: a-0" in failed(result)


# --------------------------------------------------------------------------------------------
# Against a cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("elect") / "cluster", brokers=3,
                    base_port=0,
                    # The tests move leadership themselves: no rebalance behind their backs.
                    overrides={"auto.leader.rebalance.enable": "false"}) as c:
        c.wait_for_controller()
        yield c


def leaders(cluster: DevCluster, topic: str) -> dict[int, int]:
    return cluster.metadata(cluster.running[0], [topic]).leaders(topic)


@needs_controller_api
def test_preferred_election_after_a_broker_returns(cluster: DevCluster, tmp_path: Path) -> None:
    topic = f"el-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=2,
                                        replica_assignment=[[1, 2], [2, 1]])])[topic]
    fut.result(CALL_TIMEOUT_S)
    cluster.wait_for_topic(topic, 2)
    cluster.stop_broker(1)
    assert wait_until(lambda: leaders(cluster, topic) == {0: 2, 1: 2}, 15.0)
    cluster.start_broker(1)

    def back_in_sync() -> bool:
        view = cluster.metadata(0, [topic])
        return all(set(p.isr) == {1, 2} for p in view.partitions(topic).values())

    assert wait_until(back_in_sync, 20.0)
    path = tmp_path / "elect.json"
    path.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0},
                                               {"topic": topic, "partition": 1}]}))
    result = run("--bootstrap-server", cluster.bootstrap, "--election-type", "PREFERRED",
                 "--path-to-json-file", str(path))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout == (
        f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
        f"Valid replica already elected for partitions {topic}-1\n")
    assert wait_until(lambda: leaders(cluster, topic) == {0: 1, 1: 2}, 10.0)
    again = run("--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
                "--topic", topic, "--partition", "0")
    assert again.exit_code == 0
    assert again.stdout == f"Valid replica already elected for partitions {topic}-0\n"


@needs_controller_api
def test_failed_partitions_are_reported_and_exit_1(cluster: DevCluster) -> None:
    result = run("--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
                 "--topic", "no-such-topic", "--partition", "3")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout.startswith(
        "Error completing leader election (PREFERRED) for partition: no-such-topic-3: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: ")
    assert "1 replica(s) could not be elected" in result.stderr


@needs_controller_api
def test_unclean_election_of_a_partition_with_a_leader_is_not_needed(
        cluster: DevCluster) -> None:
    topic = f"el-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(CALL_TIMEOUT_S)
    cluster.wait_for_topic(topic, 1)
    result = run("--bootstrap-server", cluster.bootstrap, "--election-type", "unclean",
                 "--topic", topic, "--partition", "0")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout == f"Valid replica already elected for partitions {topic}-0\n"
