"""Fetching from the closest replica (KIP-392) on three `wherry server --zookeeper` processes in
racks a, b and c with `replica.selector.class` RackAwareReplicaSelector: a confluent-kafka
consumer with `client.rack=b` is sent by the leader (rack a) to the rack-b follower, reads every
record from it -- its `/metrics` shows the consumer's fetches and bytes, the leader's and the
rack-c broker's show none --, and when the rack-b broker is stopped (controlled, or killed) it
moves on to another replica with nothing lost and nothing twice. Skipped without ZooKeeper."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from tests.observability.scrape import value
from wherry.replication.replica_selector import RACK_AWARE_SELECTOR
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

TOPIC = "near"
RACKS = {0: "a", 1: "b", 2: "c"}
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"


def _produce(c: ZkCluster, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5,
                  "log_level": 0})
    for i in range(start, start + count):
        p.produce(TOPIC, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0


def _consume(consumer: Consumer, seen: list[str], until: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(seen) < until and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        value_ = msg.value()
        assert value_ is not None
        seen.append(value_.decode())


@pytest.mark.parametrize("stop", ["controlled", "killed"])
def test_a_rack_b_consumer_reads_the_rack_b_replica_then_moves_on_when_it_stops(
    zookeeper: ZooKeeperServer, tmp_path: Path, stop: str
) -> None:
    with ZkCluster(
        tmp_path / "cluster",
        brokers=3,
        zookeeper=zookeeper,
        session_timeout_ms=10_000,
        chroot=f"/follower-fetching-{stop}",
        http=True,
        overrides={
            "replica.selector.class": RACK_AWARE_SELECTOR,
            "auto.leader.rebalance.enable": "false",
        },
        broker_overrides={b: {"broker.rack": r} for b, r in RACKS.items()},
    ) as c:
        url = {b: c.http_url(b) or "" for b in c.broker_ids}
        # The brokers' racks, as DescribeCluster and Metadata report them
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
        nodes = admin.describe_cluster().result(20).nodes
        assert {n.id: n.rack for n in nodes} == RACKS

        c.create_topic(TOPIC, {0: [0, 1, 2]})  # led in rack a
        assert wait_until(
            lambda: (s := c.partition_state(TOPIC, 0)) is not None and len(s.isr) == 3, 30
        )
        _produce(c, 0, 300)
        consumer = Consumer({
            "bootstrap.servers": c.address(0),
            "group.id": "near-readers",
            "client.rack": "b",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 0,
        })
        try:
            consumer.assign([KafkaTopicPartition(TOPIC, 0, 0)])
            seen: list[str] = []
            _consume(consumer, seen, 300, 60)
            assert seen == [f"v{i}" for i in range(300)]
            # The rack-b follower served the records; the leader only sent the client there.
            assert value(url[1], BYTES_OUT, topic=TOPIC) > 300 * 2
            assert value(url[1], REQUESTS, request="FetchConsumer") > 0
            assert value(url[0], BYTES_OUT, topic=TOPIC) == 0
            assert value(url[2], BYTES_OUT, topic=TOPIC) == 0

            served_before = value(url[0], BYTES_OUT, topic=TOPIC) + value(
                url[2], BYTES_OUT, topic=TOPIC
            )
            # The rack-b replica stops: a controlled shutdown, or a crash (its session
            # expires, the controller takes it out of the ISR and the live brokers).
            if stop == "controlled":
                c.stop_broker(1)
            else:
                c.kill(1)
            _produce(c, 300, 300)
            _consume(consumer, seen, 600, 90)
        finally:
            consumer.close()
        assert seen == [f"v{i}" for i in range(600)]  # nothing lost, nothing twice, in order
        served = value(url[0], BYTES_OUT, topic=TOPIC) + value(url[2], BYTES_OUT, topic=TOPIC)
        assert served - served_before > 300 * 2
