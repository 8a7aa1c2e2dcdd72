"""The four clients, default settings, against a real broker process."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.helpers import poll_messages

# Record timestamps near now: older ones would fall to retention.ms (7 days) at once.
NOW_MS = int(time.time() * 1000)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)
    futs[name].result(timeout=15)
    return name


def consume_assigned(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 20.0
) -> list[Message]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        return poll_messages(c, expected, timeout_s)
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_produce_consume(broker: BrokerProcess, codec: str) -> None:
    bs = broker.bootstrap
    topic = new_topic(bs)
    p = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 5})
    delivered: list = []  # type: ignore[type-arg]
    for i in range(300):
        p.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"value-{i}".encode() * 3,
            headers=[("h", f"{i}".encode()), ("n", None)],
            partition=i % 3,
            timestamp=NOW_MS + i,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
    assert p.flush(20) == 0
    assert all(err is None for err, _ in delivered)
    msgs = consume_assigned(bs, topic, 3, 300)
    assert len(msgs) == 300
    by_key = {m.key(): m for m in msgs}
    m = by_key[b"k7"]
    assert m.value() == b"value-7" * 3
    assert m.partition() == 1
    assert m.timestamp()[1] == NOW_MS + 7
    assert m.headers() == [("h", b"7"), ("n", None)]
    # offsets are dense per partition
    for part in range(3):
        offs = sorted(x.offset() for x in msgs if x.partition() == part)
        assert offs == list(range(100))


def test_confluent_kafka_idempotent_producer(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = new_topic(bs, 2)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2})
    for i in range(2000):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    assert p.flush(20) == 0
    msgs = consume_assigned(bs, topic, 2, 2000)
    assert sorted(int(m.value()) for m in msgs) == list(range(2000))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produce_consume(broker: BrokerProcess, codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = broker.bootstrap
    topic = new_topic(bs, 2)
    prod = KafkaProducer(bootstrap_servers=bs, compression_type=codec, enable_idempotence=True)
    futs = [
        prod.send(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("h", b"x")],
            partition=i % 2,
            timestamp_ms=NOW_MS + i,
        )
        for i in range(200)
    ]
    prod.flush(20)
    metas = [f.get(timeout=20) for f in futs]
    assert {m.partition for m in metas} == {0, 1}
    prod.close()
    cons = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=5000)
    cons.assign([KTP(topic, 0), KTP(topic, 1)])
    cons.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 200 and time.monotonic() < deadline:
        for records in cons.poll(timeout_ms=500).values():
            got.extend(records)
    cons.close()
    assert len(got) == 200
    r = next(x for x in got if x.key == b"k5")
    assert r.value == b"v5" and r.headers == [("h", b"x")]
    assert r.timestamp == NOW_MS + 5


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_produce_consume(broker: BrokerProcess, codec: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    bs = broker.bootstrap
    topic = new_topic(bs, 2)

    async def run() -> list:  # type: ignore[type-arg]
        prod = AIOKafkaProducer(bootstrap_servers=bs, compression_type=codec)
        await prod.start()
        try:
            for i in range(100):
                await prod.send_and_wait(
                    topic,
                    key=f"k{i}".encode(),
                    value=f"v{i}".encode(),
                    partition=i % 2,
                    headers=[("h", b"y")],
                )
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
        await cons.start()
        got = []
        try:
            cons.assign([ATP(topic, 0), ATP(topic, 1)])
            await cons.seek_to_beginning()
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                res = await cons.getmany(timeout_ms=500)
                for records in res.values():
                    got.extend(records)
        finally:
            await cons.stop()
        return got

    got = asyncio.run(run())
    assert len(got) == 100
    r = next(x for x in got if x.key == b"k3")
    assert r.value == b"v3" and list(r.headers) == [("h", b"y")]


def test_aiokafka_idempotent_producer(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    bs = broker.bootstrap
    topic = new_topic(bs, 1)

    async def run() -> None:
        prod = AIOKafkaProducer(bootstrap_servers=bs, enable_idempotence=True)
        await prod.start()
        try:
            for i in range(50):
                await prod.send(topic, value=str(i).encode(), partition=0)
            await prod.flush()
        finally:
            await prod.stop()

    asyncio.run(run())
    assert sorted(int(m.value()) for m in consume_assigned(bs, topic, 1, 50)) == list(range(50))


KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_consume(broker: BrokerProcess, codec: str) -> None:
    bs = broker.bootstrap
    topic = new_topic(bs, 2)
    lines = "".join(f"key{i}:val{i}\n" for i in range(50))
    subprocess.run(
        [KCAT, "-b", bs, "-t", topic, "-P", "-K:", "-z", codec, "-p", "1", "-H", "hk=hv"],
        input=lines,
        text=True,
        check=True,
        timeout=30,
    )
    out = subprocess.run(
        [KCAT, "-b", bs, "-t", topic, "-C", "-p", "1", "-o", "beginning", "-e", "-f", "%k=%s|%h\n"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    rows = out.stdout.strip().splitlines()
    assert rows[0] == "key0=val0|hk=hv"
    assert len(rows) == 50
    meta = subprocess.run(
        [KCAT, "-b", bs, "-L", "-t", topic], capture_output=True, text=True, check=True, timeout=30
    )
    assert "2 partitions" in meta.stdout


def test_confluent_reads_what_kafka_python_wrote_with_every_codec(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    bs = broker.bootstrap
    topic = new_topic(bs, 1)
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        prod = KafkaProducer(bootstrap_servers=bs, compression_type=codec)
        for i in range(20):
            prod.send(topic, value=f"{codec}-{i}".encode(), partition=0)
        prod.flush(20)
        prod.close()
    msgs = consume_assigned(bs, topic, 1, 100)
    assert len(msgs) == 100
    assert msgs[-1].value() == b"zstd-19"
