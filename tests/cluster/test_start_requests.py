"""Requests sent while a ZooKeeper-backed cluster starts are answered.

Three `wherry server --zookeeper` processes are started together; the moment every listener
accepts, confluent-kafka's AdminClient asks to create an RF 3 topic, asking again half a second
after INVALID_REPLICATION_FACTOR (fewer brokers registered yet, as Kafka answers). Every
request must be answered within 5 s. A broker answered Metadata before the controller's first
UpdateMetadata reached it with no brokers and no controller, and librdkafka's admin client
then waited for a controller until its request timed out (30 s).

The number of cluster starts is `WHERRY_START_RUNS` (3 by default; the full check is
`WHERRY_START_RUNS=50 python -m pytest -q tests/cluster/test_start_requests.py`).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.testing.cluster import ZkCluster
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("WHERRY_START_RUNS", "3"))
ANSWER_WITHIN_S = 5.0
LISTEN_TIMEOUT_S = 30.0


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def _create_until_created(bootstrap: str, topic: str) -> list[tuple[str, float]]:
    """(outcome, seconds) of each CreateTopics, retried after INVALID_REPLICATION_FACTOR."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    outcomes: list[tuple[str, float]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        started = time.monotonic()
        future = admin.create_topics(
            [NewTopic(topic, 3, 3)], operation_timeout=10, request_timeout=30
        )[topic]
        try:
            future.result(40)
        except KafkaException as e:
            err: KafkaError = e.args[0]
            outcomes.append((err.name(), time.monotonic() - started))
            if err.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                time.sleep(0.5)
                continue
            return outcomes
        outcomes.append(("created", time.monotonic() - started))
        return outcomes
    return outcomes


def _one_start(
    zookeeper: ZooKeeperServer, directory: Path
) -> tuple[float, list[tuple[str, float]]]:
    c = ZkCluster(
        directory, brokers=3, zookeeper=zookeeper, chroot=f"/wherry-{uuid.uuid4().hex[:8]}"
    )
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        for b in c.broker_ids:
            c.start_broker(b, wait=False)
        while not all(_accepts(c.address(b)) for b in c.broker_ids):
            assert time.monotonic() - t0 < LISTEN_TIMEOUT_S, "the listeners never accepted"
            assert all(c.is_running(b) for b in c.broker_ids), [
                c.output(b)[-2000:] for b in c.broker_ids
            ]
            time.sleep(0.005)
        listening = time.monotonic() - t0
        return listening, _create_until_created(c.bootstrap, f"start-{uuid.uuid4().hex[:6]}")
    finally:
        for b in c.broker_ids:  # by PID; each run has a chroot of its own
            c.kill(b)


def test_create_topics_during_the_start_is_answered(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    slow: list[str] = []
    for run in range(RUNS):
        listening, outcomes = _one_start(zookeeper, tmp_path / f"run-{run}")
        shown = ", ".join(f"{what} {s:.2f} s" for what, s in outcomes)
        print(f"run {run:2d}: listening after {listening:.2f} s; {shown}")
        if outcomes[-1][0] != "created" or any(s > ANSWER_WITHIN_S for _, s in outcomes):
            slow.append(f"run {run}: {shown}")
    assert not slow, slow
