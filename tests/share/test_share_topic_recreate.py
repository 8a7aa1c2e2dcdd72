"""A topic deleted and created again under its name while a share consumer is subscribed, as
confluent-kafka-python's suite does it: the new topic is a new topic, so the consumer gets
only the records produced after the recreation, each at delivery count 1, and none of the
old ones again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, wait_until
from tests.share.share_harness import set_group_configs, share_consumer, suite_broker

FAST_METADATA = {"topic.metadata.refresh.interval.ms": "500",
                 "topic.metadata.propagation.max.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with suite_broker(tmp_path_factory.mktemp("share-recreate")) as b:
        yield b


def _produce(bs: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bs, **FAST_METADATA})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(20) == 0


def test_recreated_topic_delivers_only_its_new_records_once(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    u = uuid.uuid4().hex[:8]
    topic, group = f"recreate-t-{u}", f"recreate-g-{u}"
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    admin = AdminClient({"bootstrap.servers": bs, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    c = share_consumer(bs, group, topic, **FAST_METADATA)
    try:
        before = [b"before-%d" % i for i in range(10)]
        _produce(bs, topic, before)
        seen: set[bytes] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 10:
            seen.update(m.value() for m in c.poll(0.5) if m.error() is None)
        assert seen == set(before)
        for f in admin.delete_topics([topic]).values():
            f.result(20)
        assert wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, 30)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        time.sleep(2)
        after = [b"after-%d" % i for i in range(10)]
        _produce(bs, topic, after)
        first_count: dict[bytes, int] = {}
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not set(after) <= set(first_count):
            try:
                batch = c.poll(0.5)
            except KafkaException:
                continue  # the session recovering from the deletion
            for m in batch:
                if m.error() is None:
                    first_count.setdefault(m.value(), m.delivery_count())
    finally:
        c.close()
    assert set(after) <= set(first_count), sorted(set(after) - set(first_count))
    assert not [v for v in first_count if v.startswith(b"before-")], first_count
    assert all(first_count[v] == 1 for v in after), first_count
