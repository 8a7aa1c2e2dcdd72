"""KIP-227 fetch sessions on the wire: a real broker process, raw Fetch v12 requests, and
real clients (kafka-python uses sessions when the broker gives it an id; confluent-kafka and
aiokafka fetch their own way) reading everything exactly once."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.kafka_wire import call, connect, encode_request, produce_body, read_response
from wherry.protocol.records import build_batch


def create(bs: str, name: str, partitions: int) -> None:
    t = call(bs, 19, 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "configs": []}], "timeout": 10_000, "validate_only": False}).topics[0]
    assert t.error_code == ErrorCode.none


def produce(bs: str, topic: str, partition: int, values: list[bytes]) -> None:
    body = produce_body(topic, build_batch([(None, v) for v in values]), partition=partition)
    r = call(bs, 0, 9, body).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.none


def fetch(session_id: int, epoch: int, parts: dict[tuple[str, int], int], *,
          forgotten: dict[str, list[int]] | None = None, max_wait: int = 0,
          max_bytes: int = 1 << 20) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), offset in parts.items():
        by_topic.setdefault(t, []).append(
            {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
             "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1})
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                      for t, ps in (forgotten or {}).items()],
            "rack_id": ""}


def answered(resp: Any) -> dict[tuple[str, int], Any]:
    return {(str(t.topic), int(p.partition_index)): p for t in resp.responses
            for p in t.partitions}


def test_sessions_answer_only_what_changed(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    t = f"fs-{uuid.uuid4().hex[:8]}"
    create(bs, t, 2)
    produce(bs, t, 0, [b"a", b"b"])
    s = connect(bs)
    try:
        def send(body: dict[str, Any]) -> Any:
            s.sendall(encode_request(1, 12, body))
            return read_response(s, 1, 12)

        first = send(fetch(0, 0, {(t, 0): 0, (t, 1): 0}))
        assert first.error_code == ErrorCode.none and first.session_id != 0
        sid = first.session_id
        got = answered(first)
        assert set(got) == {(t, 0), (t, 1)} and got[(t, 0)].high_watermark == 2
        # nothing changed: an incremental fetch answers no partition
        r = send(fetch(sid, 1, {(t, 0): 2}))
        assert r.error_code == ErrorCode.none and r.session_id == sid
        assert answered(r) == {}
        # new records on partition 1 (still at offset 0 in the session): only it comes back
        produce(bs, t, 1, [b"c"])
        r = send(fetch(sid, 2, {}))
        got = answered(r)
        assert set(got) == {(t, 1)} and got[(t, 1)].records and got[(t, 1)].high_watermark == 1
        # a repeated epoch is refused, the session survives
        r = send(fetch(sid, 2, {}))
        assert r.error_code == ErrorCode.invalid_fetch_session_epoch and r.session_id == 0
        assert answered(r) == {}
        # forget partition 0: its new records are no longer answered
        r = send(fetch(sid, 3, {(t, 1): 1}, forgotten={t: [0]}))
        assert answered(r) == {}
        produce(bs, t, 0, [b"d"])
        assert answered(send(fetch(sid, 4, {}))) == {}
        # a parked incremental fetch wakes as soon as a partition of its session gets data
        result: list[Any] = []
        th = threading.Thread(target=lambda: result.append(send(fetch(sid, 5, {}, max_wait=8000))))
        started = time.monotonic()
        th.start()
        time.sleep(0.3)
        produce(bs, t, 1, [b"e"])
        th.join(10)
        assert result and time.monotonic() - started < 5
        got = answered(result[0])
        assert set(got) == {(t, 1)} and got[(t, 1)].high_watermark == 2
        # an unknown session id
        r = send(fetch(sid + 1 if sid < 0x7FFFFFFF else 1, 1, {}))
        assert r.error_code == ErrorCode.fetch_session_id_not_found
        # the final epoch closes the session; the fetch is answered in full without one
        r = send(fetch(sid, -1, {(t, 0): 0}))
        assert r.error_code == ErrorCode.none and r.session_id == 0
        assert set(answered(r)) == {(t, 0)}
        assert send(fetch(sid, 6, {})).error_code == ErrorCode.fetch_session_id_not_found
    finally:
        s.close()


def test_a_partition_left_out_of_a_full_response_comes_next(broker: BrokerProcess) -> None:
    """Records the response had no room for are read at the next incremental fetch, though
    the client's position did not move (nothing else changed on that partition)."""
    bs = broker.bootstrap
    t = f"fs-full-{uuid.uuid4().hex[:8]}"
    create(bs, t, 2)
    produce(bs, t, 0, [b"x" * 500])
    produce(bs, t, 1, [b"y" * 500])
    s = connect(bs)
    try:
        def send(body: dict[str, Any]) -> Any:
            s.sendall(encode_request(1, 12, body))
            return read_response(s, 1, 12)

        first = send(fetch(0, 0, {(t, 0): 0, (t, 1): 0}, max_bytes=100))
        got = answered(first)
        with_records = [k for k, p in got.items() if p.records]
        assert len(with_records) == 1  # only the first batch fitted (min one message)
        [left] = [k for k in got if k not in with_records]
        nxt = send(fetch(first.session_id, 1, {with_records[0]: 1}, max_bytes=1 << 20))
        got = answered(nxt)
        assert set(got) == {left} and got[left].records
    finally:
        s.close()


def _produce_waves(bs: str, topic: str, partitions: int, waves: int, per: int) -> list[bytes]:
    values: list[bytes] = []
    for w in range(waves):
        for p in range(partitions):
            batch = [f"{w}-{p}-{i}".encode() for i in range(per)]
            produce(bs, topic, p, batch)
            values += batch
        time.sleep(0.15)
    return values


def test_kafka_python_reads_everything_once_through_an_incremental_session(
    broker: BrokerProcess,
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    bs = broker.bootstrap
    t = f"fs-kp-{uuid.uuid4().hex[:8]}"
    create(bs, t, 3)
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, fetch_max_wait_ms=100,
                      auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(t, p) for p in range(3)])
        sent: list[bytes] = []
        th = threading.Thread(target=lambda: sent.extend(_produce_waves(bs, t, 3, 8, 25)))
        th.start()
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (th.is_alive() or len(seen) < len(sent)):
            for recs in c.poll(timeout_ms=200).values():
                seen += [r.value for r in recs]
        th.join(5)
        assert sorted(seen) == sorted(sent) and len(sent) == 600
        handlers = c._fetcher._session_handlers
        assert handlers, "kafka-python kept no fetch session"
        meta = next(iter(handlers.values())).next_metadata
        assert meta.session_id != 0 and meta.epoch > 2  # incremental fetches happened
    finally:
        c.close()


def test_confluent_and_aiokafka_read_everything_once(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from confluent_kafka import Consumer

    bs = broker.bootstrap
    t = f"fs-cf-{uuid.uuid4().hex[:8]}"
    create(bs, t, 3)
    sent = _produce_waves(bs, t, 3, 3, 20)
    c = Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([t])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(sent) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.value())
        time.sleep(0.5)
        m = c.poll(0.2)
        assert m is None or m.error() is not None
        assert sorted(seen) == sorted(sent)
    finally:
        c.close()

    async def aio() -> list[bytes]:
        ac = AIOKafkaConsumer(t, bootstrap_servers=bs, auto_offset_reset="earliest",
                              enable_auto_commit=False)
        await ac.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < len(sent):
                    for recs in (await ac.getmany(timeout_ms=200)).values():
                        out += [r.value for r in recs if r.value is not None]
            return out
        finally:
            await ac.stop()

    assert sorted(asyncio.run(aio())) == sorted(sent)
