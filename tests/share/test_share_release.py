"""Records a share consumer holds go back to the group at once, not when their (here 60 s)
acquisition locks expire: when its connection drops (the share session belongs to the
connection), when its share session closes (epoch -1) -- after it left the group too, whose
heartbeat leaves the session to the consumer, as Kafka's does -- and when a ShareConsumer
closes without acknowledging. Real broker, raw wire requests for the exact
cases, confluent-kafka's ShareConsumer for the clean close."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic
from tests.kafka_wire import call, connect
from tests.share.share_harness import (
    BROKER_OVERRIDES,
    consume_until,
    produce,
    set_group_configs,
    share_consumer,
)

pytestmark = pytest.mark.slow
E = ErrorCode
LOCK = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-release"), overrides=BROKER_OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _setup(bs: str, n: int) -> tuple[str, str, uuid.UUID]:
    u = uuid.uuid4().hex[:8]
    topic, group = f"rel-t-{u}", f"rel-g-{u}"
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, LOCK)
    produce(bs, topic, [b"r%d" % i for i in range(n)])
    md = call(bs, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return topic, group, md.topics[0].topic_id


def _fetch(sock: Any, group: str, member: str, epoch: int, tid: uuid.UUID,
           wait_ms: int = 3000) -> list[tuple[int, int, int]]:
    r = call(sock, 78, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch,
        "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100,
        "batch_size": 100,
        "topics": [{"topic_id": tid, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": []}]}],
        "forgotten_topics_data": [],
    })
    assert r.error_code == E.none, r
    part = r.responses[0].partitions[0]
    assert part.error_code == E.none, part
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]


def _heartbeat(sock: Any, group: str, member: str, epoch: int, topic: str) -> Any:
    out: list[Any] = []

    def beat() -> bool:  # __consumer_offsets may be in the making
        out.append(call(sock, 76, 1, {
            "group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": [topic] if epoch == 0 else None}))
        return out[-1].error_code not in (E.coordinator_not_available,
                                          E.coordinator_load_in_progress)

    assert wait_until(beat, timeout_s=20, interval_s=0.2)
    return out[-1]


def test_dropped_connection_releases_its_records_at_once(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    _topic, group, tid = _setup(bs, 10)
    a = connect(bs)
    assert _fetch(a, group, "a", 0, tid) == [(0, 9, 1)]
    b = connect(bs)
    try:
        assert _fetch(b, group, "b", 0, tid, wait_ms=200) == []  # all held by a
        a.close()  # no ShareFetch/ShareAcknowledge with epoch -1: the connection just drops
        started = time.monotonic()
        got = _fetch(b, group, "b", 1, tid, wait_ms=10_000)
        assert got == [(0, 9, 2)]
        assert time.monotonic() - started < 10  # not the 60 s lock
    finally:
        b.close()


def _acknowledge(sock: Any, group: str, member: str, epoch: int, tid: uuid.UUID,
                 batches: list[tuple[int, int, int]]) -> Any:
    return call(sock, 79, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch,
        "topics": [{"topic_id": tid, "partitions": [{
            "partition_index": 0, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                for f, last, t in batches]}]}]})


def test_a_member_leaving_keeps_its_session_until_it_closes_it(broker: BrokerProcess) -> None:
    """As on Kafka, leaving the group does not end the member's share session: the last
    acknowledgements a closing consumer sends beside its leaving heartbeat still apply, and
    what it still holds goes back when the session ends (its epoch -1 request)."""
    bs = broker.bootstrap
    topic, group, tid = _setup(bs, 6)
    a = connect(bs)
    b = connect(bs)
    try:
        joined = _heartbeat(a, group, "a", 0, topic)
        assert joined.error_code == E.none and joined.member_epoch > 0
        assert _fetch(a, group, "a", 0, tid) == [(0, 5, 1)]
        left = _heartbeat(a, group, "a", -1, topic)
        assert left.error_code == E.none and left.member_epoch == -1
        assert _fetch(b, group, "b", 0, tid, wait_ms=300) == []  # a still holds them
        # a's last acknowledgements after its heartbeat: 0-2 accepted, the rest released
        final = _acknowledge(a, group, "a", -1, tid, [(0, 2, 1)])
        assert final.error_code == E.none
        assert final.responses[0].partitions[0].error_code == E.none
        assert _fetch(b, group, "b", 1, tid, wait_ms=5_000) == [(3, 5, 2)]
        # and the session is gone
        r = call(a, 78, 1, {
            "group_id": group, "member_id": "a", "share_session_epoch": 1, "max_wait": 0,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
            "topics": [], "forgotten_topics_data": []})
        assert r.error_code == E.share_session_not_found
    finally:
        a.close()
        b.close()


def test_consumer_closing_without_acknowledging_gives_its_records_to_others(
    broker: BrokerProcess,
) -> None:
    bs = broker.bootstrap
    topic, group, _tid = _setup(bs, 20)
    first = share_consumer(bs, group, topic, **{"share.acknowledgement.mode": "explicit"})
    held: list[int] = []
    try:
        consume_until(first, lambda: bool(held), lambda _c, m: held.append(m.offset()), 30)
    finally:
        first.close()  # nothing acknowledged
    closed_at = time.monotonic()
    assert held
    got: dict[int, int] = {}
    second = share_consumer(bs, group, topic)
    try:
        consume_until(second, lambda: set(held) <= set(got),
                      lambda _c, m: got.__setitem__(m.offset(), m.delivery_count()), 20)
        second.commit_sync(15)
    finally:
        second.close()
    assert set(held) <= set(got), (held, sorted(got))
    assert all(got[o] == 2 for o in held)
    assert time.monotonic() - closed_at < 20  # not the 60 s lock
