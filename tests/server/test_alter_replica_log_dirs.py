"""AlterReplicaLogDirs (34) and DescribeLogDirs' future replicas through kafka-python 3.0.12's
KafkaAdminClient, against a real broker process with two log dirs: the replica moves while
producers keep writing, every record survives, and a kill -9 in the middle of the copy
resumes the move at the next start without losing anything."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient
from kafka.errors import (
    LogDirNotFoundError,
    NoError,
    UnknownTopicOrPartitionError,
)
from kafka.structs import TopicPartitionReplica

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic, poll_messages

VALUE = b"v" * 1000


def _start(a: Path, b: Path, *overrides: str) -> BrokerProcess:
    return BrokerProcess(Path(f"{a},{b}"), overrides=list(overrides)).start()


def _produce(bootstrap: str, topic: str, keys: range) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in keys:
        p.produce(topic, VALUE, key=str(i).encode())
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def _consume_keys(bootstrap: str, topic: str, count: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "log_level": 0})
    try:
        c.subscribe([topic])
        msgs = poll_messages(c, count, 60)
    finally:
        c.close()
    return [int(m.key()) for m in msgs]


def _where(admin: KafkaAdminClient, topic: str) -> list[tuple[str, bool, int, int]]:
    """(log dir, is future, size, offset lag) of each replica of `topic`-0 on broker 0."""
    (broker,) = admin.describe_log_dirs()
    out = []
    for d in broker["log_dirs"]:
        for t in d["topics"]:
            if t["name"] == topic:
                out += [(d["log_dir"], p["is_future_key"], p["partition_size"], p["offset_lag"])
                        for p in t["partitions"] if p["partition_index"] == 0]
    return sorted(out)


def _moved_to(admin: KafkaAdminClient, topic: str, dest: Path) -> bool:
    where = _where(admin, topic)
    return len(where) == 1 and where[0][0] == str(dest) and not where[0][1]


def test_move_while_producing_and_the_errors(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker = _start(a, b, "replica.alter.log.dirs.io.max.bytes.per.second=300000")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        create_topic(broker.bootstrap, "mv")
        _produce(broker.bootstrap, "mv", range(0, 1500))
        ((src, future, _, _),) = _where(admin, "mv")
        assert not future
        dest = b if src == str(a) else a
        replica = TopicPartitionReplica("mv", 0, 0)
        errors = admin.alter_replica_log_dirs({
            replica: str(dest),
            ("mv", 1, 0): str(dest),  # no such partition
            ("nope", 0, 0): str(dest),
        })
        assert errors == {replica: NoError,
                          TopicPartitionReplica("mv", 1, 0): UnknownTopicOrPartitionError,
                          TopicPartitionReplica("nope", 0, 0): UnknownTopicOrPartitionError}
        # Producers keep writing while the copy runs; DescribeLogDirs shows the future replica.
        writer = threading.Thread(target=_produce, args=(broker.bootstrap, "mv", range(1500, 2000)))
        writer.start()
        seen: list[Any] = []

        def moving() -> bool:
            seen[:] = _where(admin, "mv")
            return any(f for _, f, _, _ in seen)

        assert wait_until(moving, 10), (seen, broker.log_text()[-3000:])
        (cur, fut) = seen
        assert cur[0] == src and not cur[1] and fut[0] == str(dest) and fut[1]
        assert fut[3] > 0  # the future's lag behind the current replica
        # A dir that is not one of log.dirs; the dir a replica is in (a no-op) once moved.
        assert admin.alter_replica_log_dirs({replica: str(tmp_path / "c")}) == {
            replica: LogDirNotFoundError}
        writer.join(60)
        assert wait_until(lambda: _moved_to(admin, "mv", dest), 30), _where(admin, "mv")
        assert admin.alter_replica_log_dirs({replica: str(dest)}) == {replica: NoError}
        assert _moved_to(admin, "mv", dest)
        assert _consume_keys(broker.bootstrap, "mv", 2000) == list(range(2000))
    finally:
        admin.close()
        broker.stop()


@pytest.mark.slow
def test_kill_during_the_copy_resumes_the_move(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker = _start(a, b, "replica.alter.log.dirs.io.max.bytes.per.second=300000")
    try:
        create_topic(broker.bootstrap, "mv")
        _produce(broker.bootstrap, "mv", range(3000))
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
        try:
            ((src, _, size, _),) = _where(admin, "mv")
            dest = b if src == str(a) else a
            replica = TopicPartitionReplica("mv", 0, 0)
            assert admin.alter_replica_log_dirs({replica: str(dest)}) == {replica: NoError}
            assert wait_until(
                lambda: any(f and 0 < s < size for _, f, s, _ in _where(admin, "mv")), 10)
        finally:
            admin.close()
        broker.kill()  # SIGKILL mid-copy
        futures = [p.name for p in dest.iterdir() if p.name.endswith("-future")]
        assert len(futures) == 1 and futures[0].startswith("mv-0.")
        assert (Path(src) / "mv-0").is_dir()
        broker = _start(a, b)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
        try:
            assert wait_until(lambda: _moved_to(admin, "mv", dest), 30), _where(admin, "mv")
        finally:
            admin.close()
        assert (dest / "mv-0").is_dir() and not (Path(src) / "mv-0").exists()
        assert _consume_keys(broker.bootstrap, "mv", 3000) == list(range(3000))
    finally:
        broker.kill()
