"""KIP-848 consumer groups (`group.protocol=consumer`) with real confluent-kafka consumers on a
real broker: three members split six partitions 2/2/2 (uniform assignor), one leaves and the
others take its partitions over, and a produced stream is consumed exactly once across the
group (every record committed synchronously after it is processed)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, wait_until

OVERRIDES = [
    "offsets.topic.num.partitions=4",
    "group.consumer.heartbeat.interval.ms=300",
    "group.consumer.session.timeout.ms=10000",
    "log.retention.check.interval.ms=1000",
]
PARTITIONS = 6

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848"), overrides=OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def new_topic(bs: str, partitions: int) -> str:
    name = f"k-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(15)
    return name


def produce(bs: str, topic: str, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(20) == 0


class Member:
    """One KIP-848 consumer polling in its own thread; every record is committed
    synchronously once recorded."""

    def __init__(self, bs: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "client.id": name,
            }
        )
        self.consumer.subscribe([topic])
        self.seen: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.assignment: list[int] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def _run(self) -> None:
        c = self.consumer
        while not self._stop.is_set():
            try:
                m = c.poll(0.1)
                with self._lock:
                    self.assignment = sorted(tp.partition for tp in c.assignment())
                if m is None:
                    continue
                if m.error() is not None:
                    self.errors.append(str(m.error()))
                    continue
                c.commit(message=m, asynchronous=False)
                with self._lock:
                    self.seen.append((m.partition(), m.offset(), m.value()))
            except KafkaException as e:
                self.errors.append(str(e))

    def partitions(self) -> list[int]:
        with self._lock:
            return list(self.assignment)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def _values(members: list[Member]) -> list[bytes]:
    return [v for m in members for _, _, v in m.seen]


def test_three_members_split_six_partitions_and_take_over(kbroker: BrokerProcess) -> None:
    bs = kbroker.bootstrap
    topic = new_topic(bs, PARTITIONS)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    members = [Member(bs, group, topic, f"c{i}") for i in range(3)]
    try:
        # 2/2/2, disjoint
        ok = wait_until(
            lambda: sorted(len(m.partitions()) for m in members) == [2, 2, 2]
            and sorted(p for m in members for p in m.partitions()) == list(range(PARTITIONS)),
            timeout_s=40,
        )
        assert ok, [(m.name, m.partitions(), m.errors) for m in members]
        produce(bs, topic, 300)
        assert wait_until(lambda: len(_values(members)) >= 300, timeout_s=40), len(
            _values(members)
        )
        # one leaves; the two others take its partitions over (3/3)
        leaving = members.pop()
        leaving.close()
        ok = wait_until(
            lambda: sorted(len(m.partitions()) for m in members) == [3, 3]
            and sorted(p for m in members for p in m.partitions()) == list(range(PARTITIONS)),
            timeout_s=40,
        )
        assert ok, [(m.name, m.partitions(), m.errors) for m in members]
        produce(bs, topic, 300, start=300)
        everyone = [*members, leaving]
        assert wait_until(lambda: len(_values(everyone)) >= 600, timeout_s=40), len(
            _values(everyone)
        )
        time.sleep(1.0)  # anything delivered twice would show up now
        values = _values(everyone)
        positions = [(p, o) for m in everyone for p, o, _ in m.seen]
        assert len(positions) == len(set(positions)), "a record was delivered twice"
        assert sorted(int(v) for v in values) == list(range(600))
    finally:
        for m in members:
            m.close()


def _describe(bs: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bs})
    return admin.describe_consumer_groups([group])[group].result(15)


def test_describe_and_list_show_a_consumer_group(kbroker: BrokerProcess) -> None:
    bs = kbroker.bootstrap
    topic = new_topic(bs, PARTITIONS)
    group = f"kip848-d-{uuid.uuid4().hex[:8]}"
    members = [Member(bs, group, topic, f"d{i}") for i in range(2)]
    try:
        assert wait_until(
            lambda: sorted(len(m.partitions()) for m in members) == [3, 3], timeout_s=40
        )
        admin = AdminClient({"bootstrap.servers": bs})
        listed = admin.list_consumer_groups().result(15)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1
        assert str(getattr(mine[0], "type", "")).upper().endswith("CONSUMER")
        desc = _describe(bs, group)
        assert len(desc.members) == 2
        got = sorted(tp.partition for m in desc.members for tp in m.assignment.topic_partitions)
        assert got == list(range(PARTITIONS))
    finally:
        for m in members:
            m.close()
