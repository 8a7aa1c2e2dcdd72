"""How many records one share-consumer poll gets, as Kafka gives them: the broker acquires
whole record batches, so a poll whose batch holds more than `max.poll.records` gets the
whole batch; with one record per batch the cap holds. Over the wire, ShareFetch v2's
`record_limit` mode acquires exactly `max_records`, its ranges as one, and an unknown acquire
mode is INVALID_REQUEST. confluent-kafka's ShareConsumer against a real `wherry server` with
the lock settings confluent-kafka's own suite runs with."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.helpers import create_topic
from tests.kafka_wire import call, connect
from tests.share.share_harness import set_group_configs, share_consumer, suite_broker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with suite_broker(tmp_path_factory.mktemp("share-poll")) as b:
        yield b


def _setup(bs: str) -> tuple[str, str]:
    u = uuid.uuid4().hex[:8]
    topic, group = f"poll-t-{u}", f"poll-g-{u}"
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    return topic, group


def _first_poll(c: ShareConsumer, timeout_s: float = 30.0) -> list[bytes]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = [m.value() for m in c.poll(0.5) if m.error() is None]
        if got:
            return got
    return []


def test_a_poll_gets_a_whole_batch_larger_than_max_poll_records(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic, group = _setup(bs)
    # one batch of 20 records: a long linger and one flush
    p = Producer({"bootstrap.servers": bs, "linger.ms": 1000, "batch.num.messages": 30})
    for i in range(20):
        p.produce(topic, value=b"m%d" % i, partition=0)
    assert p.flush(20) == 0
    c = share_consumer(bs, group, topic, **{"max.poll.records": "5"})
    try:
        first = _first_poll(c)
        assert sorted(first) == sorted(b"m%d" % i for i in range(20)), (
            f"the whole batch in one poll, not cut at max.poll.records=5: {len(first)}")
    finally:
        c.close()


def test_single_record_batches_are_capped_at_max_poll_records(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic, group = _setup(bs)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(10):  # one batch per record
        p.produce(topic, value=b"s%d" % i, partition=0)
        assert p.flush(20) == 0
    c = share_consumer(bs, group, topic, **{"max.poll.records": "5"})
    sizes: list[int] = []
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(values) < 10:
            got = [m.value() for m in c.poll(0.5) if m.error() is None]
            if got:
                sizes.append(len(got))
                values.extend(got)
    finally:
        c.close()
    assert sorted(values) == sorted(b"s%d" % i for i in range(10))
    assert all(n <= 5 for n in sizes) and len(sizes) >= 2, sizes


def _topic_id(bs: str, topic: str) -> uuid.UUID:
    md = call(bs, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return md.topics[0].topic_id  # type: ignore[no-any-return]


def _fetch_v2(sock: Any, group: str, member: str, epoch: int, tid: uuid.UUID, *,
              mode: int, max_records: int, batch_size: int) -> Any:
    return call(sock, 78, 2, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch,
        "max_wait": 3000, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
        "batch_size": batch_size, "share_acquire_mode": mode, "is_renew_ack": False,
        "topics": [{"topic_id": tid, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": []}]}],
        "forgotten_topics_data": [],
    })


def _ranges(r: Any) -> list[tuple[int, int, int]]:
    part = r.responses[0].partitions[0]
    assert r.error_code == ErrorCode.none and part.error_code == ErrorCode.none
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]


def test_share_fetch_acquire_modes_on_the_wire(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic, group = _setup(bs)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 1000})
    for b in range(3):  # three batches of 5 records: 0-4, 5-9, 10-14
        for j in range(5):
            p.produce(topic, value=b"w%d" % (b * 5 + j), partition=0)
        assert p.flush(20) == 0
    tid = _topic_id(bs, topic)
    sock = connect(bs)
    try:
        bad = _fetch_v2(sock, group, "w1", 0, tid, mode=7, max_records=6, batch_size=2)
        assert bad.error_code == ErrorCode.invalid_request
        # record_limit: exactly 6 records, one range, though 5-9 is one batch
        assert _ranges(_fetch_v2(sock, group, "w1", 0, tid, mode=1, max_records=6,
                                 batch_size=2)) == [(0, 5, 1)]
        # batch_optimized: whole batches, listed per batch (batch_size 2): 6-9 is what is
        # left of the batch 5-9, so 6 records asked for give 6-14
        got = _ranges(_fetch_v2(sock, group, "w2", 0, tid, mode=0, max_records=6,
                                batch_size=2))
        assert got == [(6, 9, 1), (10, 14, 1)]
    finally:
        sock.close()
