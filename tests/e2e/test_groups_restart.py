"""Consumer groups across broker restarts (SIGTERM and kill -9), and the offsets topic's
replication factor on a single broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.e2e.test_groups import OVERRIDES, committed, consumer, drain, subscribed
from tests.kafka_wire import call
from wherry.group.records import OFFSETS_TOPIC

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_broker_restart_keeps_committed_offsets(tmp_path: Path, how: str) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start()
    try:
        bs = b.bootstrap
        topic, group, c = subscribed(bs, 2, 20, "durable", **{"enable.auto.commit": False})
        assert len(drain(c, 20)) == 20
        c.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 9)],
                 asynchronous=False)
        c.close()
        if how == "sigterm":
            assert b.stop() == 0
        else:
            b.kill()
        # A different offsets.topic.num.partitions must not move groups: like Kafka, the
        # coordinator places them by the existing topic's partition count (10).
        b.overrides = [o for o in OVERRIDES if "num.partitions" not in o]
        b.start()
        bs = b.bootstrap
        assert committed(bs, group, topic, 2) == {0: 7, 1: 9}
        assert "Finished loading offsets and group metadata" in b.log_text()
        c = consumer(bs, group)
        c.subscribe([topic])
        assert sorted(drain(c, 4)) == [14, 16, 18, 19]  # p0 holds evens, p1 odds
        c.close()
    finally:
        b.kill()


def test_offsets_topic_needs_enough_brokers_for_its_replication_factor(tmp_path: Path) -> None:
    """Kafka 3.9: no capping; the coordinator stays unavailable until enough brokers are up."""
    b = BrokerProcess(tmp_path / "rf3", overrides=["offsets.topic.replication.factor=3"]).start()
    try:
        for _ in range(5):
            r = call(b.bootstrap, 10, 3, {"key": "g", "key_type": 0})
            assert r.error_code == ErrorCode.coordinator_not_available
            time.sleep(0.1)
        md = call(b.bootstrap, 3, 1, {"topics": None})
        assert OFFSETS_TOPIC not in {t.name for t in md.topics}
        assert "invalid_replication_factor" in b.log_text()
    finally:
        b.kill()
