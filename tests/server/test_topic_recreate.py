"""A topic deleted and created again at once, with confluent-kafka's AdminClient: the
creation waits (within the request's timeout) for the deletion to end, as a client that
sees the name gone from its metadata expects."""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, wait_until


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})


def _fill(b: BrokerProcess, topic: str) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 0})
    for i in range(50):
        p.produce(topic, b"x%d" % i, partition=i % 3)
    assert p.flush(30) == 0


def test_delete_then_create_as_the_python_suite_does(broker: BrokerProcess) -> None:
    admin, topic = _admin(broker), f"recreated-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(20)
    _fill(broker, topic)
    for f in admin.delete_topics([topic]).values():
        f.result(20)
    # The suite waits until the name is gone from the metadata, then creates it again.
    assert wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, 30)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    assert wait_until(lambda: len(admin.list_topics(timeout=5).topics[topic].partitions) == 1,
                      20)


def test_delete_and_create_at_once(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    for n in range(3):
        topic = f"again-{n}-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(20)
        _fill(broker, topic)
        admin.delete_topics([topic], operation_timeout=0)[topic].result(20)
        admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=20)[topic].result(30)
        assert wait_until(
            lambda t=topic: len(admin.list_topics(timeout=5).topics[t].partitions) == 2, 20)


def test_a_creation_that_may_not_wait_gets_kafkas_answer(broker: BrokerProcess) -> None:
    """With no time to wait (timeout 0), a creation while the old topic is still being
    deleted is TOPIC_ALREADY_EXISTS "Topic '...' is marked for deletion.", as Kafka answers
    it; the name is free once the deletion ended."""
    admin = _admin(broker)
    seen = []
    for n in range(5):  # the deletion outrunning the client is possible, if unlikely
        topic = f"busy-{n}-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        admin.delete_topics([topic], operation_timeout=0)[topic].result(20)
        try:
            admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=0)[topic].result(20)
        except KafkaException as e:
            err = e.args[0]
            assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err
            assert err.str() == f"Topic '{topic}' is marked for deletion.", err
            seen.append(topic)
            admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=20)[topic].result(30)
        if seen:
            break
    assert seen
