"""Transactional producers of confluent-kafka, kafka-python and aiokafka against a broker
process: commit visible to read_committed consumers, abort never; zombie fencing.

Both halves of transactions take part: the transaction coordinator, and the partition leader's
WriteTxnMarkers handler, LSO and read_committed Fetch.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from tests.broker_process import BrokerProcess
from tests.helpers import poll_messages


def _topic() -> str:
    return f"txn-{uuid.uuid4().hex[:10]}"


def _values(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    """The values a consumer of `isolation` reads: the `expected` ones (20 s at most), then
    whatever else comes within 2 s (nothing, if the broker filters right)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation,
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = poll_messages(c, expected, 20)
        got += poll_messages(c, 1, 2)
        return sorted(m.value() or b"" for m in got)
    finally:
        c.close()


def test_confluent_kafka_commit_visible_abort_never(broker: BrokerProcess) -> None:
    topic = _topic()
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"ck-{topic}"})
    p.init_transactions(20)
    p.begin_transaction()
    for v in (b"c1", b"c2", b"c3"):
        p.produce(topic, v)
    p.commit_transaction(20)
    p.begin_transaction()
    for v in (b"a1", b"a2"):
        p.produce(topic, v)
    assert p.flush(20) == 0  # written to the log before the abort (else never sent)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce(topic, b"c4")
    p.commit_transaction(20)
    assert _values(broker.bootstrap, topic, "read_committed", 4) == [b"c1", b"c2", b"c3", b"c4"]
    assert _values(broker.bootstrap, topic, "read_uncommitted", 6) == [
        b"a1", b"a2", b"c1", b"c2", b"c3", b"c4"]


def test_second_producer_fences_the_first(broker: BrokerProcess) -> None:
    topic = _topic()
    tid = f"zombie-{topic}"
    first = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    first.init_transactions(20)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(20)
    second = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    second.init_transactions(30)  # aborts the first's transaction, bumps the epoch
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(20)
    assert info.value.args[0].fatal()
    second.begin_transaction()
    second.produce(topic, b"ok")
    second.commit_transaction(20)
    assert _values(broker.bootstrap, topic, "read_committed", 1) == [b"ok"]


def test_kafka_python_transaction(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    topic = _topic()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{topic}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp1")
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-aborted").get(20)  # in the log before the abort
        p.abort_transaction()
    finally:
        p.close(5)
    assert _values(broker.bootstrap, topic, "read_committed", 1) == [b"kp1"]
    assert _values(broker.bootstrap, topic, "read_uncommitted", 2) == [b"kp-aborted", b"kp1"]


def test_aiokafka_transaction(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    topic = _topic()

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                             transactional_id=f"aio-{topic}")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio1")
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted")
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert _values(broker.bootstrap, topic, "read_committed", 1) == [b"aio1"]
    assert _values(broker.bootstrap, topic, "read_uncommitted", 2) == [b"aio-aborted", b"aio1"]
