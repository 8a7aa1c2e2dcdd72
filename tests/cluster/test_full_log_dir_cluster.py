"""A full log dir on a 3-broker RF 3 cluster (KIP-112): three `wherry server --zookeeper`
processes; broker 0 has two log dirs, the second an 8 MiB tmpfs. Broker 0 leads every
partition of an RF 3 topic with `min.insync.replicas=2`; half of them land on the tmpfs.

An idempotent acks=all confluent-kafka producer writes until and past the moment the tmpfs
fills: the partitions of the full dir move their leadership to broker 1 (the controller hears
of the failed dir through `/log_dir_event_notification` and broker 0's LeaderAndIsr answers)
and the producer carries on with no failed send; the partitions of broker 0's other dir stay
led by broker 0. Then the tmpfs is grown (space freed) and broker 0 restarted: it catches up,
every acknowledged record is read back and `wherry verify-replicas` finds the three replicas
of every partition identical."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from tests.helpers import create_topic
from wherry.cli.main import main
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

PARTITIONS = 4
RECORDS = 24_000  # 1 KiB each: ~12 MiB for the two partitions on the 8 MiB tmpfs


@pytest.fixture
def tmpfs(small_disk: Callable[[int], Path]) -> Path:
    return small_disk(8 << 20)


def leaders(cluster: ZkCluster, broker: int, topic: str) -> dict[int, int]:
    return {p: st.leader for p, st in cluster.metadata(broker, [topic]).partitions(topic).items()}


def isrs(cluster: ZkCluster, broker: int, topic: str) -> dict[int, tuple[int, ...]]:
    parts = cluster.metadata(broker, [topic]).partitions(topic)
    return {p: tuple(sorted(st.isr)) for p, st in parts.items()}


def read_all(bootstrap: str, topic: str, partition: int, want: int) -> set[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([CKTopicPartition(topic, partition, 0)])
    got: set[int] = set()
    try:
        idle = 0
        while len(got) < want and idle < 30:
            batch = c.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            got.update(int(m.key()) for m in batch if m.error() is None)  # type: ignore[arg-type]
    finally:
        c.close()
    return got


@pytest.mark.slow
def test_full_log_dir_moves_leadership_and_acks_all_carries_on(
    tmp_path: Path, tmpfs: Path, zookeeper: ZooKeeperServer
) -> None:
    cluster = ZkCluster(
        tmp_path / "cluster",
        zookeeper=zookeeper,
        chroot=f"/full-{uuid.uuid4().hex[:6]}",
        overrides={"auto.leader.rebalance.enable": "false", "replica.lag.time.max.ms": "5000"},
        log_dirs={0: [tmp_path / "cluster" / "broker-0", tmpfs]},
    ).start()
    topic = "full"
    try:
        create_topic(cluster.bootstrap, topic, [[0, 1, 2]] * PARTITIONS,
                     **{"min.insync.replicas": "2"})
        assert wait_until(lambda: set(leaders(cluster, 1, topic).values()) == {0}, 30)
        first = tmp_path / "cluster" / "broker-0"
        assert wait_until(lambda: all(
            (first / f"{topic}-{p}").is_dir() or (tmpfs / f"{topic}-{p}").is_dir()
            for p in range(PARTITIONS)
        ), 30)
        on_tmpfs = {p for p in range(PARTITIONS) if (tmpfs / f"{topic}-{p}").is_dir()}
        assert on_tmpfs and len(on_tmpfs) < PARTITIONS
        acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        failed: list[str] = []

        def done(err: KafkaError | None, msg: object) -> None:
            if err is None:
                acked[msg.partition()].append(int(msg.key()))  # type: ignore[attr-defined]
            else:
                failed.append(err.name())

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120_000, "log_level": 0})
        for i in range(RECORDS):
            producer.produce(topic, key=str(i).encode(), value=b"x" * 1024,
                             partition=i % PARTITIONS, on_delivery=done)
            producer.poll(0)
        assert producer.flush(180) == 0
        assert failed == [], f"{len(failed)} failed sends: {sorted(set(failed))}"
        out0 = cluster.output(0)
        assert f"log dir {tmpfs} is offline" in out0, out0[-3000:]
        assert "Traceback" not in out0
        assert cluster.is_running(0)  # its other dir still serves
        now = leaders(cluster, 1, topic)
        assert {now[p] for p in on_tmpfs} <= {1, 2}, now
        assert all(now[p] == 0 for p in range(PARTITIONS) if p not in on_tmpfs), now
        # Space freed (the tmpfs grown) and broker 0 restarted: it rejoins every ISR.
        cluster.stop_broker(0)
        subprocess.run(["mount", "-o", "remount,size=64m", str(tmpfs)], check=True, timeout=30)
        cluster.start_broker(0)
        assert wait_until(
            lambda: all(len(r) == 3 for r in isrs(cluster, 1, topic).values()), 90, 0.5
        ), isrs(cluster, 1, topic)
        for p in range(PARTITIONS):
            got = read_all(cluster.bootstrap, topic, p, len(acked[p]))
            lost = set(acked[p]) - got
            assert not lost, f"partition {p}: {len(lost)} acknowledged records lost"
        verified = CliRunner().invoke(
            main, ["verify-replicas", "--bootstrap-server", cluster.bootstrap,
                   "--topics-include", topic], catch_exceptions=False)
        assert verified.exit_code == 0, verified.output
        assert f"among {PARTITIONS} partitions" in verified.output
    finally:
        cluster.stop()
