"""Zero-copy consume through a real broker: Fetch answers on the PLAINTEXT listener (record
bytes sent from the segment files with os.sendfile) are byte for byte those of the SSL
listener (which copies), for raw Fetches of several versions across segment boundaries; real
clients read everything; a segment deleted by retention while its bytes are being sent still
gives the whole answer."""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.kafka_wire import call, encode_request, produce_body
from tests.security.tls_material import TlsMaterial, make_tls_material
from wherry.protocol.codec import decode_response
from wherry.protocol.records import build_batch, iter_batches


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("zc-tls"))


@pytest.fixture(scope="module")
def zc_broker(
    tmp_path_factory: pytest.TempPathFactory, tls: TlsMaterial
) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("zc-broker"),
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        overrides=[*tls.broker_overrides(), "log.retention.check.interval.ms=300"],
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _topic(bs: str, config: dict[str, str]) -> str:
    topic = f"zc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)
    return topic


def _fetch_body(topic: str, offset: int, max_bytes: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "topic_id": None,
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": offset,
                        "partition_max_bytes": max_bytes,
                        "current_leader_epoch": -1,
                        "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(1 << 20, n - len(out)))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def _frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    return _recv_exact(s, size)


def _connect(address: str, context: ssl.SSLContext | None = None, rcvbuf: int = 0) -> socket.socket:
    host, port = address.rsplit(":", 1)
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(30)
    raw.connect((host, int(port)))
    return context.wrap_socket(raw, server_hostname=host) if context is not None else raw


def _produce_mib(bs: str, topic: str, batches: int, record_bytes: int = 1024) -> None:
    per_batch = (1 << 20) // (record_bytes + 16)
    for i in range(batches):
        value = bytes([i % 256]) * record_bytes
        r = call(bs, 0, 9, produce_body(topic, build_batch([(None, value)] * per_batch)))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_plaintext_answers_equal_the_copying_tls_answers(
    zc_broker: BrokerProcess, tls: TlsMaterial
) -> None:
    plain, secure = zc_broker.addresses
    topic = _topic(plain, {"segment.bytes": str(300 * 1024)})
    for i in range(60):  # ~60 batches of ~50 KiB: a few per segment, ~10 segments
        r = call(plain, 0, 9, produce_body(topic, build_batch([(None, bytes([i]) * 1000)] * 50)))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.none
    context = ssl.create_default_context(cafile=str(tls.ca_pem))
    with _connect(plain) as p, _connect(secure, context) as t:
        compared = 0
        for version in (4, 11, 12):
            for offset in (0, 1, 149, 300, 1234, 2999, 3000):
                for max_bytes in (1, 60_000, 1 << 20, 8 << 20):
                    request = encode_request(1, version, _fetch_body(topic, offset, max_bytes))
                    p.sendall(request)
                    t.sendall(request)
                    a, b = _frame(p), _frame(t)
                    assert a == b, (version, offset, max_bytes)
                    compared += len(a) > 1000
        assert compared > 40


def test_consumer_reads_everything_across_segments(zc_broker: BrokerProcess) -> None:
    bs = zc_broker.bootstrap
    topic = _topic(bs, {"segment.bytes": str(1 << 20)})
    _produce_mib(bs, topic, 6)  # ~6 segments of one 1 MiB batch each
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    seen: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        per_batch = (1 << 20) // (1024 + 16)
        while sum(seen.values()) < 6 * per_batch and time.monotonic() < deadline:
            for m in consumer.consume(10_000, timeout=0.5):
                assert m.error() is None
                v = m.value()
                assert v == bytes([v[0]]) * 1024
                seen[v[0]] = seen.get(v[0], 0) + 1
    finally:
        consumer.close()
    assert seen == {i: per_batch for i in range(6)}


def test_a_segment_deleted_while_its_bytes_are_sent(zc_broker: BrokerProcess) -> None:
    bs = zc_broker.bootstrap
    topic = _topic(bs, {"segment.bytes": str(10 << 20), "file.delete.delay.ms": "0"})
    _produce_mib(bs, topic, 12)  # segment 0: ~10 batches of 1 MiB; then segment 1
    log_dir = Path(zc_broker.data_dir) / f"{topic}-0"
    first_segment = log_dir / f"{0:020d}.log"
    assert first_segment.exists() and len(list(log_dir.glob("*.log"))) >= 2
    request = encode_request(1, 12, _fetch_body(topic, 0, 32 << 20))
    with _connect(bs) as s:
        s.sendall(request)
        expected = _frame(s)
    resp = decode_response(1, 12, expected)[1]
    records = resp.responses[0].partitions[0].records
    assert len(records) > 8 << 20  # segment 0, whole
    next_offset = list(iter_batches(records))[-1][1].next_offset

    with _connect(bs, rcvbuf=16 << 10) as s:
        s.sendall(request)
        head = _recv_exact(s, 64)  # the answer started; most of it waits for the socket
        r = call(
            bs,
            21,
            2,
            {
                "timeout": 5000,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "offset": next_offset}]}
                ],
            },
        )
        assert r.topics[0].partitions[0].error_code == ErrorCode.none
        assert wait_until(lambda: not first_segment.exists(), 15)  # deleted by retention
        rest = _recv_exact(s, len(expected) + 4 - 64)
    assert head + rest == struct.pack(">i", len(expected)) + expected
