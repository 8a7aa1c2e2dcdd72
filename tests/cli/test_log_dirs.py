"""`wherry log-dirs --describe` against a real 3-broker `DevCluster`: DescribeLogDirs (API 35)
answered by every broker, Kafka's output lines and JSON, the sizes equal to the segment files
on disk, `--broker-list` / `--topic-list` filtering, every version of the API, and bad input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.cli.main import main
from wherry.outbound.client import RequestClient
from wherry.outbound.connection import OutboundConnection
from wherry.testing.cluster import DevCluster, wait_until

CALL_TIMEOUT_S = 15.0
TOPIC = "ld-topic"
OTHER = "ld-other"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["log-dirs", *args], catch_exceptions=False)


def disk_size(root: Path, broker: int, partition: str) -> int:
    return sum(p.stat().st_size for p in (root / f"broker-{broker}" / partition).glob("*.log"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    root = tmp_path_factory.mktemp("logdirs") / "cluster"
    with DevCluster(root, brokers=3) as c:
        c.wait_for_controller()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        futs = admin.create_topics([
            NewTopic(TOPIC, num_partitions=2, replica_assignment=[[0, 1], [1, 2]]),
            NewTopic(OTHER, num_partitions=1, replica_assignment=[[2, 0]]),
        ])
        for fut in futs.values():
            fut.result(CALL_TIMEOUT_S)
        c.wait_for_topic(TOPIC, 2)
        c.wait_for_topic(OTHER, 1)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(30):
            p.produce(TOPIC, value=b"v" * (10 + i), partition=i % 2)
        p.produce(OTHER, value=b"other", partition=0)
        assert p.flush(CALL_TIMEOUT_S) == 0
        replicas = {f"{TOPIC}-0": (0, 1), f"{TOPIC}-1": (1, 2), f"{OTHER}-0": (2, 0)}

        def replicated() -> bool:
            return all(len({disk_size(root, b, tp) for b in bs}) == 1
                       for tp, bs in replicas.items())

        assert wait_until(replicated, 15.0)
        yield c


def root_of(cluster: DevCluster) -> Path:
    return Path(cluster.cluster.directory)


@pytest.mark.slow
def test_describe_all_brokers_sizes_match_the_disk(cluster: DevCluster) -> None:
    result = run("--bootstrap-server", cluster.bootstrap, "--describe")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0,1,2"]
    assert len(lines) == 3
    doc = json.loads(lines[2])
    assert lines[2].startswith('{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":')
    assert [b["broker"] for b in doc["brokers"]] == [0, 1, 2]
    root = root_of(cluster)
    seen: dict[int, set[str]] = {}
    for b in doc["brokers"]:
        (log_dir,) = b["logDirs"]
        assert log_dir["logDir"] == str((root / f"broker-{b['broker']}").absolute())
        assert log_dir["error"] is None
        ours = [p for p in log_dir["partitions"] if not p["partition"].startswith("__")]
        seen[b["broker"]] = {p["partition"] for p in ours}
        for p in ours:
            assert p["size"] == disk_size(root, b["broker"], p["partition"]) > 0
            assert p["offsetLag"] == 0 and p["isFuture"] is False
    assert seen == {0: {f"{TOPIC}-0", f"{OTHER}-0"}, 1: {f"{TOPIC}-0", f"{TOPIC}-1"},
                    2: {f"{TOPIC}-1", f"{OTHER}-0"}}


@pytest.mark.slow
def test_broker_and_topic_lists(cluster: DevCluster) -> None:
    result = run("--bootstrap-server", cluster.bootstrap, "--describe",
                 "--broker-list", "2,0", "--topic-list", OTHER)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[1] == "Received log directory information from brokers 0,2"
    doc = json.loads(lines[2])
    parts = {b["broker"]: [p["partition"] for d in b["logDirs"] for p in d["partitions"]]
             for b in doc["brokers"]}
    assert parts == {0: [f"{OTHER}-0"], 2: [f"{OTHER}-0"]}


@pytest.mark.slow
def test_unknown_broker_is_an_error(cluster: DevCluster) -> None:
    result = run("--bootstrap-server", cluster.bootstrap, "--describe", "--broker-list", "0,7")
    assert result.exit_code == 1
    assert result.stderr == ("Error: The given brokers do not exist from --broker-list: 7. "
                             "Current existent brokers: 0,1,2\n")


@pytest.mark.parametrize("args, message", [
    (["--broker-list", "0"], "Error: --describe is required"),
    (["--describe", "--broker-list", "a,b"], "Error: --broker-list must be a comma-separated"),
])
def test_bad_options(args: list[str], message: str) -> None:
    result = run("--bootstrap-server", "127.0.0.1:1", *args)
    assert result.exit_code == 1
    assert result.stderr.startswith(message)


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_version_of_the_api(cluster: DevCluster, version: int) -> None:
    """The handler at each advertised version, asked for one partition over a real socket."""
    host, port = cluster.address(1).rsplit(":", 1)

    async def ask() -> Any:
        conn = OutboundConnection(host, int(port), connect_timeout_s=CALL_TIMEOUT_S,
                                  request_timeout_s=CALL_TIMEOUT_S)
        client = RequestClient(conn.connect, client_id="test", peer=cluster.address(1))
        try:
            return await client.call(35, version, {"topics": [
                {"topic": TOPIC, "partitions": [1]}]})
        finally:
            await conn.close()

    response = asyncio.run(ask())
    (result,) = response.results
    assert result.log_dir == str((root_of(cluster) / "broker-1").absolute())
    (topic,) = result.topics
    assert topic.name == TOPIC
    (part,) = topic.partitions
    assert part.partition_index == 1
    assert part.partition_size == disk_size(root_of(cluster), 1, f"{TOPIC}-1")
    if version >= 4:
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
