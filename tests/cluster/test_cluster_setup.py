"""Cluster settings (`zookeeper.*`, `controller.socket.timeout.ms`), `wherry server
--zookeeper` failing fast without ZooKeeper, and the pytest plugin's fixtures and marker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from tests.helpers import poll_messages
from wherry.server.config import BrokerConfigError, load_config
from wherry.testing.cluster import AsyncDevCluster, DevCluster
from wherry.testing.zookeeper import find_free_port


def test_zookeeper_settings_use_kafka_names_and_defaults() -> None:
    cfg = load_config(None, {})
    assert cfg.zookeeper_connect is None
    assert cfg.zookeeper_session_timeout_ms == 18_000
    assert cfg.zookeeper_connection_timeout == 18_000  # defaults to the session timeout
    assert cfg.controller_socket_timeout_ms == 30_000
    cfg = load_config(
        None,
        {
            "zookeeper.connect": "zk1:2181,zk2:2181/kafka",
            "zookeeper.session.timeout.ms": "4000",
            "zookeeper.connection.timeout.ms": "1500",
            "controller.socket.timeout.ms": "2000",
        },
    )
    assert cfg.zookeeper_connect == "zk1:2181,zk2:2181/kafka"
    assert cfg.zookeeper_session_timeout_ms == 4000
    assert cfg.zookeeper_connection_timeout == 1500
    assert cfg.controller_socket_timeout_ms == 2000
    with pytest.raises(BrokerConfigError):
        load_config(None, {"zookeeper.session.timeout.ms": "0"})


def test_dev_cluster_refuses_clashing_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="per broker"):
        AsyncDevCluster(tmp_path, overrides={"listeners": "PLAINTEXT://127.0.0.1:1"})
    with pytest.raises(ValueError, match="embedded"):
        AsyncDevCluster(tmp_path, overrides={"zookeeper.connect": "127.0.0.1:2181"})
    with pytest.raises(BrokerConfigError):
        AsyncDevCluster(tmp_path, overrides={"num.partitions": "0"})


def test_server_without_reachable_zookeeper_fails_within_the_connection_timeout(
    tmp_path: Path,
) -> None:
    nobody = f"127.0.0.1:{find_free_port()}"
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wherry",
            "server",
            "--zookeeper",
            nobody,
            "--broker-id",
            "3",
            "--listeners",
            "PLAINTEXT://127.0.0.1:0",
            "--log-dirs",
            str(tmp_path / "data"),
            "--override",
            "zookeeper.connection.timeout.ms=1000",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert time.monotonic() - started < 15
    assert "cannot connect to ZooKeeper" in proc.stderr
    assert "ready on" not in proc.stdout


@pytest.mark.wherry(brokers=2, overrides={"num.partitions": "4"})
def test_plugin_marker_sets_broker_count_and_configs(wherry_cluster: DevCluster) -> None:
    assert wherry_cluster.running == [0, 1]
    assert len(wherry_cluster.bootstrap.split(",")) == 2
    # num.partitions=4 applies to auto-created topics.
    p = Producer({"bootstrap.servers": wherry_cluster.bootstrap, "acks": 1, "log_level": 0})
    p.produce("auto-created", value=b"x")
    assert p.flush(20) == 0
    wherry_cluster.wait_for_topic("auto-created", 4)


def test_plugin_single_broker(wherry_broker: DevCluster) -> None:
    assert wherry_broker.running == [0]
    assert wherry_broker.controller_id == 0
    p = Producer({"bootstrap.servers": wherry_broker.bootstrap, "log_level": 0})
    for i in range(5):
        p.produce("single", value=str(i).encode())
    assert p.flush(20) == 0
    c = Consumer(
        {"bootstrap.servers": wherry_broker.bootstrap, "group.id": "g", "log_level": 0}
    )
    c.assign([CKTopicPartition("single", 0, 0)])
    try:
        got = [m.value() for m in poll_messages(c, 5, 15, skip_errors=True)]
    finally:
        c.close()
    assert got == [str(i).encode() for i in range(5)]
