"""A full log dir on a real `wherry server` (KIP-112), with confluent-kafka producers.

The broker has two log dirs: `good` (first: the embedded metadata store lives there) and an
8 MiB tmpfs. Partition 0 of the topic lands in `good`, partition 1 on the tmpfs. Filling the
tmpfs takes that dir offline: its producers get KAFKA_STORAGE_ERROR (never
UNKNOWN_SERVER_ERROR), partition 0 keeps taking records, `wherry log-dirs --describe` and the
metrics show the offline dir. After a kill -9 the broker starts on the still-full disk; once
the tmpfs is grown (space freed) and the broker restarted, every acknowledged record of both
partitions is read back."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, wait_until
from wherry.cli.main import main
from wherry.testing.tmpfs import fill_up
from wherry.testing.zookeeper import find_free_port

TOPIC = "fill"


@pytest.fixture
def tmpfs(small_disk: Callable[[int], Path]) -> Path:
    return small_disk(8 << 20)


def produce(bootstrap: str, count: int, partition: int, start: int = 0) -> tuple[list[int], dict]:
    """Send `count` numbered 1 KiB records to `partition` (acks=all, no retries): the numbers
    acknowledged and the errors by name."""
    acked: list[int] = []
    errors: dict[str, int] = {}

    def done(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked.append(int(msg.key()))  # type: ignore[attr-defined]
        else:
            errors[err.name()] = errors.get(err.name(), 0) + 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "retries": 0, "message.timeout.ms": 15000, "enable.idempotence": False})
    for i in range(start, start + count):
        p.produce(TOPIC, key=str(i).encode(), value=b"x" * 1024, partition=partition,
                  on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    return acked, errors


def read_keys(bootstrap: str, partition: int, end: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{partition}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(TOPIC, partition, 0)])
    keys: list[int] = []
    try:
        idle = 0
        while len(keys) < end and idle < 20:
            batch = c.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            for m in batch:
                if m.error() is None:
                    keys.append(int(m.key()))
    finally:
        c.close()
    return keys


def describe_log_dirs(bootstrap: str) -> dict[str, str | None]:
    out = CliRunner().invoke(main, ["log-dirs", "--bootstrap-server", bootstrap, "--describe"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output.strip().splitlines()[-1])
    return {d["logDir"]: d["error"] for b in doc["brokers"] for d in b["logDirs"]}


def test_full_log_dir_goes_offline_other_dir_serves_restart_reads_all(
    tmp_path: Path, tmpfs: Path
) -> None:
    good = tmp_path / "good"
    http_port = find_free_port("127.0.0.1")
    broker = BrokerProcess(
        Path(f"{good},{tmpfs}"),
        overrides=[f"http.listeners=http://127.0.0.1:{http_port}", "num.partitions=2"],
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        assert wait_until(
            lambda: (good / f"{TOPIC}-0").is_dir() and (tmpfs / f"{TOPIC}-1").is_dir()
        )
        acked1, errors1 = produce(broker.bootstrap, 12_000, partition=1)
        # The disk filled: KAFKA_STORAGE_ERROR (or, once the partition has no leader, time
        # outs / leader not available), never an unknown server error.
        assert errors1.get("KAFKA_STORAGE_ERROR", 0) > 0, errors1
        assert "UNKNOWN" not in errors1 and "UNKNOWN_SERVER_ERROR" not in errors1, errors1
        assert 0 < len(acked1) < 12_000
        log = broker.log_text()
        assert f"log dir {tmpfs} is offline" in log
        assert wait_until(lambda: "are in an offline log dir" in broker.log_text()), log
        assert log.count("is offline (wherry.log.dir_failure)") == 1  # once
        assert "Traceback" not in log
        # The other dir keeps serving.
        acked0, errors0 = produce(broker.bootstrap, 3_000, partition=0)
        assert errors0 == {} and len(acked0) == 3_000
        dirs = describe_log_dirs(broker.bootstrap)
        assert dirs[str(good)] is None
        assert dirs[str(tmpfs)] == "org.apache.kafka.common.errors.KafkaStorageException"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10)
        text = metrics.read().decode()
        assert "kafka_log_logmanager_offlinelogdirectorycount 1.0" in text
        # kill -9 with the disk still full: the broker starts again (the metadata store is on
        # the other disk; recovery cuts the partial batch).
        broker.kill()
        broker.start()
        acked0b, errors0b = produce(broker.bootstrap, 1_000, partition=0, start=3_000)
        assert errors0b == {} and len(acked0b) == 1_000
        # Space freed (the tmpfs grown), restarted: every acknowledged record is there.
        broker.stop()
        subprocess.run(["mount", "-o", "remount,size=32m", str(tmpfs)], check=True, timeout=30)
        broker.start()
        got1 = read_keys(broker.bootstrap, 1, len(acked1))
        assert set(acked1) <= set(got1), f"lost {len(set(acked1) - set(got1))} acknowledged"
        got0 = read_keys(broker.bootstrap, 0, 4_000)
        assert set(acked0 + acked0b) <= set(got0)
        more, errors_more = produce(broker.bootstrap, 500, partition=1, start=100_000)
        assert errors_more == {} and len(more) == 500
    finally:
        broker.kill()


def test_every_dir_failed_stops_the_broker_and_a_full_store_disk_is_one_line(
    tmp_path: Path, tmpfs: Path
) -> None:
    """One log dir, on the tmpfs, with the embedded metadata store in it (the default place):
    filling it stops the broker with one line; it starts again after that kill (recovery cuts
    the partial batch), and on a disk full to the last byte it starts or says in one `Error:`
    line that the store's disk is full, and where; with space freed every acknowledged record
    is there."""
    broker = BrokerProcess(tmpfs, overrides=["num.partitions=1"])
    broker.start()
    try:
        acked, errors = produce(broker.bootstrap, 12_000, partition=0)
        assert "UNKNOWN" not in errors and "UNKNOWN_SERVER_ERROR" not in errors, errors
        assert broker.proc is not None
        broker.proc.wait(30)
        assert broker.proc.returncode == 1
        assert wait_until(lambda: "have failed" in broker.log_text())
        log = broker.log_text()
        assert f"Shutdown broker because all log dirs in {tmpfs} have failed" in log
        assert "Traceback" not in log
        assert 0 < len(acked) < 12_000
        # The halt was a kill -9; on the disk as it is (recovery cuts the partial batch) the
        # broker starts. Filled to the last byte, it still starts where the store's WAL has
        # room for what opening writes; else it says in one line that the store's disk is
        # full, and where.
        broker.proc = None
        broker.start()
        broker.kill()
        filler = fill_up(tmpfs)
        broker.start_timeout_s = 20
        try:
            broker.start()
            broker.kill()
        except RuntimeError:
            out = broker.log_text()
            errors_lines = [line for line in out.splitlines() if line.startswith("Error:")]
            assert len(errors_lines) == 1, out
            assert "its disk is full" in errors_lines[0]
            assert str(tmpfs / "__meta" / "metadata.db") in errors_lines[0]
            assert "Traceback" not in out
        filler.unlink()
        subprocess.run(["mount", "-o", "remount,size=32m", str(tmpfs)], check=True, timeout=30)
        broker.start()
        got = read_keys(broker.bootstrap, 0, len(acked))
        assert set(acked) <= set(got), f"lost {len(set(acked) - set(got))} acknowledged"
    finally:
        broker.kill()
