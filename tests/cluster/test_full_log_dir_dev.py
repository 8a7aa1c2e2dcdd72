"""A full log dir in a `DevCluster` (what `wherry dev` runs: three brokers in one process, the
controller reaching them in process): broker 0's second log dir is an 8 MiB tmpfs; when it
fills, the partitions there move their leadership to another broker (the in-process
LeaderAndIsr answers say KAFKA_STORAGE_ERROR) and an idempotent acks=all producer carries on
with no failed send; broker 0 keeps leading the partitions of its other dir. Then the tmpfs
dir's partitions are stopped and broker 0's remaining dir is made to fail too: that broker
alone stops (not the process), the others keep serving."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from tests.helpers import create_topic
from wherry.testing.cluster import DevCluster, wait_until

PARTITIONS = 4


@pytest.fixture
def tmpfs(small_disk: Callable[[int], Path]) -> Path:
    return small_disk(8 << 20)


def produce(bootstrap: str, topic: str, count: int) -> tuple[int, list[str]]:
    acked: list[int] = []
    failed: list[str] = []

    def done(err: KafkaError | None, _msg: object) -> None:
        (failed.append(err.name()) if err is not None else acked.append(1))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 60_000, "log_level": 0})
    for i in range(count):
        p.produce(topic, key=str(i).encode(), value=b"x" * 1024, partition=i % PARTITIONS,
                  on_delivery=done)
        p.poll(0)
    assert p.flush(120) == 0
    return len(acked), failed


def test_dev_cluster_full_log_dir_moves_leadership(tmp_path: Path, tmpfs: Path) -> None:
    first = tmp_path / "cluster" / "broker-0"
    with DevCluster(tmp_path / "cluster", brokers=3,
                    overrides={"auto.leader.rebalance.enable": "false"},
                    log_dirs={0: [first, tmpfs]}) as c:
        topic = f"full-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, topic, [[0, 1, 2]] * PARTITIONS,
                     **{"min.insync.replicas": "2"})
        c.wait_for_topic(topic, PARTITIONS)
        assert wait_until(lambda: all(
            (first / f"{topic}-{p}").is_dir() or (tmpfs / f"{topic}-{p}").is_dir()
            for p in range(PARTITIONS)
        ), 30)
        on_tmpfs = {p for p in range(PARTITIONS) if (tmpfs / f"{topic}-{p}").is_dir()}
        assert on_tmpfs and len(on_tmpfs) < PARTITIONS
        acked, failed = produce(c.bootstrap, topic, 24_000)
        assert failed == [] and acked == 24_000, sorted(set(failed))
        assert c.call(lambda: c.broker(0).log_manager.is_dir_offline(tmpfs))
        leaders = c.metadata(1, [topic]).leaders(topic)
        assert {leaders[p] for p in on_tmpfs} <= {1, 2}, leaders
        assert all(leaders[p] == 0 for p in range(PARTITIONS) if p not in on_tmpfs), leaders
        # Broker 0's last dir fails too: broker 0 stops, the process and the others go on.
        c.call(lambda: c.broker(0).log_manager.dir_failure.maybe_add_offline(
            first, "a test's I/O error", OSError(5, "Input/output error")))
        assert wait_until(lambda: 0 not in c.running, 30)
        acked, failed = produce(c.bootstrap, topic, 2_000)
        assert failed == [] and acked == 2_000
