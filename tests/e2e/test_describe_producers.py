"""DescribeProducers (KIP-664) against a `wherry server` that confluent-kafka producers wrote
to: an idempotent producer's last sequence and timestamp, a transactional producer's open
transaction (its first offset) until the commit's marker closes it, and the partition errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic
from wherry.testing.cluster import DevCluster

DESCRIBE_PRODUCERS = 61
TIMEOUT_S = 15.0

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(
        Path(tmp_path_factory.mktemp("describe-producers")),
        overrides=["transaction.state.log.replication.factor=1",
                   "transaction.state.log.min.isr=1"],
    ).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _describe(bootstrap: str, topic: str, partitions: list[int]) -> list[Any]:
    resp = kafka_wire.call(bootstrap, DESCRIBE_PRODUCERS, 0, {
        "topics": [{"name": topic, "partition_indexes": partitions}]})
    (answer,) = resp.topics
    assert answer.name == topic
    return list(answer.partitions)


def test_producers_of_a_partition(bootstrap: str) -> None:
    topic = f"dp-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    before = int(time.time() * 1000)

    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "linger.ms": 0})
    for i in range(3):
        idempotent.produce(topic, f"i{i}".encode(), partition=0, timestamp=before + i)
        assert idempotent.flush(TIMEOUT_S) == 0  # one batch each: sequences 0, 1, 2
    (p0,) = _describe(bootstrap, topic, [0])
    assert (p0.partition_index, p0.error_code, p0.error_message) == (0, ErrorCode.none, None)
    (state,) = p0.active_producers
    assert state.producer_id >= 0 and state.producer_epoch == 0
    assert (state.last_sequence, state.last_timestamp) == (2, before + 2)
    assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"dp-{topic}",
                    "linger.ms": 0})
    txn.init_transactions(TIMEOUT_S)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, f"t{i}".encode(), partition=1)
    assert txn.flush(TIMEOUT_S) == 0
    (p1,) = _describe(bootstrap, topic, [1])
    (open_txn,) = p1.active_producers
    assert open_txn.producer_id != state.producer_id
    assert open_txn.current_txn_start_offset == 0  # the transaction's first record

    txn.commit_transaction(TIMEOUT_S)

    def closed() -> bool:
        (p,) = _describe(bootstrap, topic, [1])
        return p.active_producers[0].current_txn_start_offset == -1

    assert wait_until(closed, TIMEOUT_S)
    (p1,) = _describe(bootstrap, topic, [1])
    assert p1.active_producers[0].coordinator_epoch >= 0  # the marker's

    p5, = _describe(bootstrap, topic, [5])
    assert (p5.partition_index, p5.error_code, list(p5.active_producers)) == (
        5, ErrorCode.unknown_topic_or_partition, [])
    (missing,) = _describe(bootstrap, "no-such-topic", [0])
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


def test_every_replica_describes(wherry_cluster: DevCluster) -> None:
    """The leader and a follower answer from their own logs; a broker holding no replica
    answers NOT_LEADER_OR_FOLLOWER."""
    c = wherry_cluster
    topic = f"dp-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, [[1, 2]])
    c.wait_for_topic(topic, 1)
    for broker, expected in ((1, ErrorCode.none), (2, ErrorCode.none),
                             (0, ErrorCode.not_leader_or_follower)):
        (p,) = _describe(c.address(broker), topic, [0])
        assert p.error_code == expected, broker
