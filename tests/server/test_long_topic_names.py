"""A topic of the longest legal name (249 characters) end to end: created on a 3-broker
cluster with replication factor 3, written and read back with confluent-kafka, deleted, and
every directory of it gone from every broker, with no traceback logged, also across a
restart. AlterReplicaLogDirs of such a topic gets Kafka's INVALID_TOPIC_EXCEPTION (its
future directory name cannot fit 255 bytes), while the longest topic that fits moves."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.errors import InvalidTopicError, NoError
from kafka.structs import TopicPartitionReplica

from tests.broker_process import BrokerProcess
from tests.broker_process import wait_until as wait_for
from tests.helpers import create_topic, poll_messages
from wherry.testing.cluster import DevCluster, wait_until

TOPIC = ("long-topic." + "x" * 249)[:249]
assert len(TOPIC) == 249
COUNT = 300


def _dirs_of(root: Path, prefix: str) -> list[Path]:
    """Every directory under `root` whose name starts with (a cut of) the topic's name."""
    # os.walk skips a directory renamed or removed while it is read (the broker is at work).
    return [Path(top) / name for top, dirs, _files in os.walk(root)
            for name in dirs if name.startswith(prefix[:40])]


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.exc_info is not None or "Traceback" in r.getMessage()
    ]


def test_longest_topic_name_lives_and_dies_on_three_brokers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    with DevCluster(tmp_path, brokers=3, timeout_s=60,
                    overrides={"offsets.topic.replication.factor": "3",
                               # the producer's metadata refreshes must not create it again
                               "auto.create.topics.enable": "false"}) as cluster:
        cluster.wait_for_controller(30)
        create_topic(cluster.bootstrap, TOPIC, partitions=3, replication_factor=3,
                     **{"file.delete.delay.ms": "1000", "min.insync.replicas": "2"})
        cluster.wait_for_topic(TOPIC, 3, timeout_s=30)
        for b in cluster.broker_ids:  # every broker holds every partition
            assert wait_until(
                lambda b=b: len(_dirs_of(tmp_path / f"broker-{b}", TOPIC)) == 3, 15
            ), _dirs_of(tmp_path / f"broker-{b}", TOPIC)

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "linger.ms": 5, "log_level": 0})
        for i in range(COUNT):
            producer.produce(TOPIC, value=b"v%d" % i, key=b"%d" % i, partition=i % 3)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "long",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "log_level": 0})
        try:
            consumer.subscribe([TOPIC])
            got = poll_messages(consumer, COUNT, 60)
        finally:
            consumer.close()
        assert sorted(int(m.key()) for m in got) == list(range(COUNT))
        assert {m.topic() for m in got} == {TOPIC}

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        admin.delete_topics([TOPIC], operation_timeout=30)[TOPIC].result(60)
        assert wait_until(
            lambda: TOPIC not in cluster.metadata(0).topics, 30
        )
        # Renamed `-delete` at once (the topic part shortened), removed once
        # file.delete.delay.ms has passed.
        deadline = time.monotonic() + 30
        while _dirs_of(tmp_path, TOPIC) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _dirs_of(tmp_path, TOPIC) == []
        for b in cluster.broker_ids:
            lm = cluster.broker(b).log_manager
            assert lm.pending_dir_deletions() == []
            assert all(tp.topic != TOPIC for tp in lm.topic_partitions())
        # A restart finds nothing of it and logs no error.
        cluster.stop_broker(0)
        cluster.start_broker(0)
        cluster.wait_for_controller(30)
        assert _dirs_of(tmp_path, TOPIC) == []
    assert _tracebacks(caplog) == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [
        r.getMessage()[:300] for r in caplog.records if r.levelno >= logging.ERROR
    ]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert "File name too long" not in out + err


def test_deletion_on_a_failing_dir_completes_and_the_directory_goes_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Broker 0's partition directories refuse renames while the topic is deleted (each is a
    mount point, so renaming it fails with EBUSY, while writes inside it and in the log dir
    work): the deletion completes in the cluster, broker 0 logs one warning per directory and
    retries, and once the directories can be renamed again they go."""
    caplog.set_level(logging.INFO)
    with DevCluster(tmp_path, brokers=3, timeout_s=60,
                    overrides={"offsets.topic.replication.factor": "3",
                               "auto.create.topics.enable": "false"}) as cluster:
        cluster.wait_for_controller(30)
        create_topic(cluster.bootstrap, TOPIC, partitions=2, replication_factor=3,
                     **{"file.delete.delay.ms": "0"})
        cluster.wait_for_topic(TOPIC, 2, timeout_s=30)
        b0 = tmp_path / "broker-0"
        assert wait_until(lambda: len(_dirs_of(b0, TOPIC)) == 2, 15)
        busy = _dirs_of(b0, TOPIC)
        for d in busy:
            r = subprocess.run(["mount", "--bind", str(d), str(d)], capture_output=True,
                               timeout=10)
            if r.returncode != 0:
                pytest.skip(f"bind mounts not possible here: {r.stderr.decode().strip()}")
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
            admin.delete_topics([TOPIC], operation_timeout=30)[TOPIC].result(60)
            # The cluster is done with it: gone from every broker's metadata, from the other
            # brokers' disks, and broker 0 holds no log of it any more.
            assert wait_until(lambda: all(
                TOPIC not in cluster.metadata(b).topics for b in cluster.broker_ids), 30)
            assert wait_until(lambda: _dirs_of(tmp_path / "broker-1", TOPIC) == []
                              and _dirs_of(tmp_path / "broker-2", TOPIC) == [], 30)
            lm = cluster.broker(0).log_manager
            assert wait_until(lambda: len(lm.pending_dir_deletions()) == 2, 30)
            assert all(tp.topic != TOPIC for tp in lm.topic_partitions())
            assert len(_dirs_of(b0, TOPIC)) == 2
            time.sleep(2.5)  # a few retries fail meanwhile
        finally:
            for d in busy:
                subprocess.run(["umount", str(d)], capture_output=True, timeout=10)
        assert wait_until(lambda: _dirs_of(b0, TOPIC) == [], 15), _dirs_of(b0, TOPIC)
        assert lm.pending_dir_deletions() == []
    warned = [r.getMessage() for r in caplog.records
              if r.levelno == logging.WARNING and "could not rename" in r.getMessage()]
    assert len(warned) == 2, warned  # once per directory, however many retries
    assert _tracebacks(caplog) == []


def test_alter_replica_log_dirs_of_long_topics(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker = BrokerProcess(Path(f"{a},{b}")).start()
    longest_movable = "m" * 213  # 255 - len("-0.<32 hex digits>-future")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        for topic in (TOPIC, longest_movable):
            create_topic(broker.bootstrap, topic)
            p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            for i in range(50):
                p.produce(topic, b"v%d" % i)
            assert p.flush(30) == 0

        def where(topic: str) -> Path:
            (found,) = [d for d in (a, b) if (d / f"{topic}-0").is_dir()]
            return found

        long_replica = TopicPartitionReplica(TOPIC, 0, 0)
        src = where(TOPIC)
        dest = b if src == a else a
        assert admin.alter_replica_log_dirs({long_replica: str(dest)}) == {
            long_replica: InvalidTopicError}
        assert where(TOPIC) == src

        movable = TopicPartitionReplica(longest_movable, 0, 0)
        src = where(longest_movable)
        dest = b if src == a else a
        assert admin.alter_replica_log_dirs({movable: str(dest)}) == {movable: NoError}
        assert wait_for(lambda: (dest / f"{longest_movable}-0").is_dir()
                        and not (src / f"{longest_movable}-0").exists(), 30)
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mv",
                      "auto.offset.reset": "earliest", "log_level": 0})
        try:
            c.subscribe([longest_movable])
            assert len(poll_messages(c, 50, 30)) == 50
        finally:
            c.close()
        assert "Traceback" not in broker.log_text()
    finally:
        admin.close()
        broker.stop()
