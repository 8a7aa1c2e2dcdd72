"""KIP-848 consumer groups (`group.protocol=consumer`) with real confluent-kafka consumers on a
real broker: three members split six partitions 2/2/2 (uniform assignor), one leaves and the
others take its partitions over, and a produced stream is consumed exactly once across the
group (every record committed synchronously after it is processed)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.kafka_wire import call
from tests.kip848_members import EventLog, Member, start_from_committed

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


def test_three_members_split_six_partitions_and_take_over(kbroker: BrokerProcess) -> None:
    bs = kbroker.bootstrap
    topic = new_topic(bs, PARTITIONS)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    start_from_committed(bs, group, topic, PARTITIONS)
    log = EventLog()
    members = [Member(bs, group, topic, f"c{i}", log) for i in range(3)]
    try:
        # 2/2/2, disjoint
        ok = wait_until(
            lambda: sorted(len(m.partitions()) for m in members) == [2, 2, 2]
            and sorted(p for m in members for p in m.partitions()) == list(range(PARTITIONS)),
            timeout_s=40,
        )
        assert ok, [(m.name, m.partitions(), m.errors) for m in members]
        produce(bs, topic, 300)
        assert wait_until(lambda: len(log.values()) >= 300, timeout_s=40), len(log.values())
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
        assert wait_until(lambda: len(log.values()) >= 600, timeout_s=40), len(log.values())
        time.sleep(1.0)  # anything delivered twice would show up now
        assert log.redelivered_after_commit() == []
        positions = log.deliveries()
        assert len(positions) == len(set(positions)), "a record was delivered twice"
        assert sorted(int(v) for v in log.values()) == list(range(600))
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
    members = [Member(bs, group, topic, f"d{i}", EventLog()) for i in range(2)]
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


def test_regex_subscription_picks_up_a_new_topic(kbroker: BrokerProcess) -> None:
    bs = kbroker.bootstrap
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    first = f"{prefix}-a"
    admin.create_topics([NewTopic(first, 2, 1)], operation_timeout=10)[first].result(15)
    c = Consumer({
        "bootstrap.servers": bs, "group.id": f"kip848-rx-{prefix}", "group.protocol": "consumer",
        "group.remote.assignor": "range", "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 500,
    })
    try:
        c.subscribe([f"^{prefix}-.*"])

        def topics() -> set[str]:
            c.poll(0.1)
            return {tp.topic for tp in c.assignment()}

        assert wait_until(lambda: topics() == {first}, timeout_s=30)
        second = f"{prefix}-b"
        admin.create_topics([NewTopic(second, 3, 1)], operation_timeout=10)[second].result(15)
        assert wait_until(lambda: topics() == {first, second}, timeout_s=30)
        assert len(c.assignment()) == 5
    finally:
        c.close()


def test_classic_group_upgrades_when_empty_and_classic_members_join_it(
    kbroker: BrokerProcess,
) -> None:
    bs = kbroker.bootstrap
    topic = new_topic(bs, 2)
    group = f"kip848-up-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": bs})
    for i in range(20):
        p.produce(topic, value=str(i).encode(), partition=i % 2)
    assert p.flush(20) == 0
    base = {"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    # A classic consumer reads 10 records, commits and leaves: an empty classic group.
    classic = Consumer(dict(base))
    classic.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = classic.poll(0.2)
        if m is not None and m.error() is None:
            got.append(int(m.value() or b"0"))
            classic.commit(message=m, asynchronous=False)
    assert len(got) == 10
    classic.close()
    # A KIP-848 consumer takes the group over and goes on from the committed offsets.
    modern = Consumer({**base, "group.protocol": "consumer"})
    modern.subscribe([topic])
    rest: list[int] = []
    deadline = time.monotonic() + 30
    while len(rest) < 10 and time.monotonic() < deadline:
        m = modern.poll(0.2)
        if m is not None and m.error() is None:
            rest.append(int(m.value() or b"0"))
            modern.commit(message=m, asynchronous=False)
    try:
        assert sorted(got + rest) == list(range(20))
        # A classic consumer joining the consumer group becomes one of its members.
        late = Consumer({**base, "heartbeat.interval.ms": 500})
        late.subscribe([topic])
        try:

            def joined() -> bool:
                late.poll(0.2)
                modern.poll(0.05)
                return len(late.assignment()) == 1 and len(modern.assignment()) == 1

            assert wait_until(joined, timeout_s=30), (late.assignment(), modern.assignment())
            desc = _describe(bs, group)
            assert len(desc.members) == 2
        finally:
            late.close()
    finally:
        modern.close()


def _hb(bs: str, **fields: Any) -> Any:
    """One heartbeat, retried while the coordinator is not ready."""
    out: list[Any] = []

    def attempt() -> bool:
        r = _hb_once(bs, **fields)
        out.append(r)
        return r.error_code not in (
            ErrorCode.not_coordinator,
            ErrorCode.coordinator_load_in_progress,
            ErrorCode.coordinator_not_available,
        )

    wait_until(attempt, timeout_s=20, interval_s=0.1)
    return out[-1]


def _hb_once(bs: str, **fields: Any) -> Any:
    body = {"group_id": "kip848-wire", "member_id": "wire-member", "member_epoch": 0,
            "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
            "subscribed_topic_names": ["x"], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []}
    body.update(fields)
    return call(bs, 68, 1, body)


def test_bad_heartbeats_get_kafkas_errors_on_the_wire(kbroker: BrokerProcess) -> None:
    bs = kbroker.bootstrap
    # checked before the coordinator: INVALID_REQUEST whichever broker answers
    assert _hb_once(bs, group_id="").error_code == ErrorCode.invalid_request
    assert _hb_once(bs, member_id="").error_code == ErrorCode.invalid_request
    call(bs, 10, 4, {"key_type": 0, "coordinator_keys": ["kip848-wire"]})
    assert _hb(bs, group_id="").error_code == ErrorCode.invalid_request
    assert _hb(bs, member_id="").error_code == ErrorCode.invalid_request
    assert _hb(bs, member_epoch=-5).error_code == ErrorCode.invalid_request
    assert _hb(bs, rebalance_timeout=-1).error_code == ErrorCode.invalid_request
    assert _hb(bs, server_assignor="sticky").error_code == ErrorCode.unsupported_assignor
    r = _hb(bs, subscribed_topic_names=None, subscribed_topic_regex="[")
    assert r.error_code == ErrorCode.invalid_regular_expression
    assert _hb(bs, member_epoch=3, group_id="kip848-none").error_code == (
        ErrorCode.group_id_not_found
    )
    # nothing of the refused requests was stored: no such group
    d = call(bs, 69, 0, {"group_ids": ["kip848-wire"], "include_authorized_operations": False})
    assert d.groups[0].error_code == ErrorCode.group_id_not_found
    assert d.groups[0].group_state == "Dead"
    # a good join, then a fenced epoch
    ok = _hb(bs)
    assert ok.error_code == ErrorCode.none and ok.member_epoch == 1
    assert _hb(bs, member_epoch=7, topic_partitions=None).error_code == (
        ErrorCode.fenced_member_epoch
    )
    assert _hb(bs, member_epoch=-1, topic_partitions=None).error_code == ErrorCode.none


def _group_epoch(bs: str, group: str) -> tuple[int, dict[str, list[int]]]:
    d = call(bs, 69, 0, {"group_ids": [group], "include_authorized_operations": False})
    g = d.groups[0]
    return int(g.group_epoch), {
        str(m.instance_id): sorted(p for t in m.assignment.topic_partitions for p in t.partitions)
        for m in g.members
    }


def test_static_member_comes_back_without_a_rebalance(kbroker: BrokerProcess) -> None:
    bs = kbroker.bootstrap
    topic = new_topic(bs, 4)
    group = f"kip848-static-{uuid.uuid4().hex[:8]}"

    def static(instance: str) -> Consumer:
        c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                      "group.instance.id": instance, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        return c

    a, b = static("a"), static("b")

    def settled() -> bool:
        a.poll(0.05)
        b.poll(0.05)
        return len(a.assignment()) == 2 and len(b.assignment()) == 2

    try:
        assert wait_until(settled, timeout_s=30)
        epoch, before = _group_epoch(bs, group)
        b.close()  # a static member leaves for now (member epoch -2)
        assert _group_epoch(bs, group)[0] == epoch
        b = static("b")
        assert wait_until(settled, timeout_s=30)
        after_epoch, after = _group_epoch(bs, group)
        assert after_epoch == epoch and after == before
    finally:
        a.close()
        b.close()
