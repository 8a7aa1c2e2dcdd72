"""Client quotas hold real clients to their rate: a confluent-kafka producer (and consumer)
whose client id has a 1 MiB/s quota moves 1 MiB/s ± 10 % over 10 s on a `wherry server`
process, librdkafka's statistics show the broker's throttle, and a client with another id on
the same broker, running at the same time, is not slowed."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from wherry.cli.quota_configs import alter

pytestmark = pytest.mark.slow

MIB = 1 << 20
WARMUP_S = 3.0
MEASURE_S = 10.0
VALUE = b"q" * 10_000
# Requests and fetches of at most 256 KiB: the rate over 10 s moves by one of them at most.
CHUNK = 256 * 1024


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        yield b
    finally:
        b.stop()


def _topic(bootstrap: str) -> str:
    name = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, 1)]).values():
        fut.result(30)
    return name


class Throttles:
    """librdkafka's per-broker `throttle` window statistics, every interval."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []

    def __call__(self, text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            if b.get("nodeid", -1) >= 0:
                self.samples.append(b["throttle"])

    def throttled(self) -> list[int]:
        return [int(s["avg"]) for s in self.samples if s["cnt"] > 0]


def _produce(bootstrap: str, topic: str, client_id: str, seconds: float,
             stats: Throttles | None = None) -> list[tuple[float, int]]:
    """Produce as fast as the client may for `seconds`; (time, bytes) of each delivery."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": client_id,
                            "linger.ms": 5, "queue.buffering.max.kbytes": 4096,
                            "batch.size": CHUNK}
    if stats is not None:
        conf.update({"statistics.interval.ms": 1000, "stats_cb": stats})
    p = Producer(conf)
    acked: list[tuple[float, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.purge()
    p.flush(10)
    return acked


def _consume(bootstrap: str, topic: str, client_id: str, seconds: float,
             stats: Throttles | None = None) -> list[tuple[float, int]]:
    """Consume for `seconds` (in fetches of a CHUNK when `stats` are asked for, else of
    librdkafka's defaults); (time, bytes) of each message."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": client_id,
                            "group.id": f"g-{client_id}", "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"}
    if stats is not None:
        conf.update({"statistics.interval.ms": 1000, "stats_cb": stats,
                     "fetch.max.bytes": CHUNK, "message.max.bytes": CHUNK,
                     "max.partition.fetch.bytes": CHUNK})
    c = Consumer(conf)
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[float, int]] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    got.append((time.monotonic(), len(m.value() or b"")))
    finally:
        c.close()
    return got


def _rate(events: list[tuple[float, int]], start: float, seconds: float) -> float:
    return sum(n for t, n in events if start <= t < start + seconds) / seconds


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    t.start()
    return t, out


def test_producer_byte_rate(broker: BrokerProcess) -> None:
    topic = _topic(broker.bootstrap)
    alter(broker.bootstrap, [("client-id", "throttled-producer")],
          {"producer_byte_rate": str(MIB)}, [], 10)
    stats = Throttles()
    started = time.monotonic()
    slow, slow_out = _in_thread(_produce, broker.bootstrap, topic, "throttled-producer",
                                WARMUP_S + MEASURE_S + 1, stats)
    time.sleep(WARMUP_S)
    free_start = time.monotonic()
    free = _produce(broker.bootstrap, topic, "free-producer", 4.0)
    slow.join(60)
    assert slow_out, "the throttled producer did not finish"
    rate = _rate(slow_out[0], started + WARMUP_S, MEASURE_S) / MIB
    print(f"throttled producer {rate:.3f} MiB/s, throttles {stats.throttled()}")
    assert 0.9 <= rate <= 1.1, f"throttled producer: {rate:.3f} MiB/s"
    assert stats.throttled() and max(stats.throttled()) > 100, stats.samples
    free_rate = _rate(free, free_start, 4.0) / MIB
    print(f"other client id {free_rate:.1f} MiB/s")
    assert free_rate > 3.0, f"the other client id was slowed: {free_rate:.2f} MiB/s"


def test_consumer_byte_rate(broker: BrokerProcess) -> None:
    topic = _topic(broker.bootstrap)
    # 24 MiB in batches of 64 KiB: enough for both consumers.
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                  "batch.size": 65536, "client.id": "loader"})
    for _ in range(24 * MIB // len(VALUE)):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    alter(broker.bootstrap, [("client-id", "throttled-consumer")],
          {"consumer_byte_rate": str(MIB)}, [], 10)
    stats = Throttles()
    started = time.monotonic()
    slow, slow_out = _in_thread(_consume, broker.bootstrap, topic, "throttled-consumer",
                                WARMUP_S + MEASURE_S + 1, stats)
    time.sleep(WARMUP_S)
    free_start = time.monotonic()
    free = _consume(broker.bootstrap, topic, "free-consumer", 4.0)
    slow.join(60)
    assert slow_out, "the throttled consumer did not finish"
    rate = _rate(slow_out[0], started + WARMUP_S, MEASURE_S) / MIB
    print(f"throttled consumer {rate:.3f} MiB/s, throttles {stats.throttled()}")
    assert 0.9 <= rate <= 1.1, f"throttled consumer: {rate:.3f} MiB/s"
    assert stats.throttled() and max(stats.throttled()) > 100, stats.samples
    free_rate = _rate(free, free_start, 4.0) / MIB
    print(f"other client id {free_rate:.1f} MiB/s")
    assert free_rate > 3.0, f"the other client id was slowed: {free_rate:.2f} MiB/s"
