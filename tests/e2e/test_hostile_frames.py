"""Hostile request frames against a real `wherry server`: each is refused (the connection closed
with one log line), the broker lives, and a confluent-kafka producer and consumer on the same
listener are served right afterwards."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.kafka_wire import (
    call,
    connect,
    encode_request,
    fetch_body,
    is_closed,
    produce_body,
    read_response,
)
from tests.protocol.test_decode_guard import DESCRIBE_LOG_DIRS_79, METADATA_17
from wherry.protocol.compression import ZSTD
from wherry.protocol.records import build_batch


def _send_frame(bootstrap: str, frame: bytes) -> socket.socket:
    s = connect(bootstrap)
    s.sendall(struct.pack(">i", len(frame)) + frame)
    return s


def _hostile_frames() -> dict[str, bytes]:
    metadata = encode_request(3, 12, {"topics": [{"name": "a"}, {"name": "b"}]})[4:]
    produce = encode_request(
        0,
        9,
        {
            "acks": -1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * 8}]}],
        },
    )[4:]
    return {
        "metadata-17": METADATA_17,
        "describe-log-dirs-79": DESCRIBE_LOG_DIRS_79,
        # Metadata v12 with its topic count patched to 2**31 - 2 (compact) / a truncated body
        "metadata-count": metadata[:20] + b"\xff\xff\xff\xff\x07" + metadata[21:],
        "metadata-truncated": metadata[:-3],
        # Produce v9: a client id whose length is negative, or 32000 bytes
        "negative-client-id": produce[:8] + struct.pack(">h", -7) + produce[10:],
        "huge-client-id": produce[:8] + struct.pack(">h", 32000) + produce[10:],
        # ApiVersions v3 whose software name claims 2**31 bytes
        "api-versions-name": struct.pack(">hhih", 18, 3, 1, -1)
        + b"\x00\xff\xff\xff\xff\x07abc\x01\x00",
    }


PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_alice="alice-secret";'
)


def test_hostile_frames_then_real_clients(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides=[
            "sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
        ],
    )
    try:
        _hostile_frames_then_real_clients(broker.start())
    finally:
        broker.kill()


def _hostile_frames_then_real_clients(broker: BrokerProcess) -> None:
    bs, sasl_bs = broker.addresses
    # each frame on the PLAINTEXT listener and, unauthenticated, on the SASL one
    for name, frame in _hostile_frames().items():
        for address in (bs, sasl_bs):
            s = _send_frame(address, frame)
            assert is_closed(s, timeout_s=10.0), (name, address)
            s.close()
            assert broker.proc is not None and broker.proc.poll() is None, (
                name + ":\n" + broker.log_text()[-3000:]
            )
    log = broker.log_text()
    assert "Traceback" not in log
    assert "memory allocation" not in log
    refused = [line for line in log.splitlines() if "cannot parse request" in line]
    assert any("30360681639 items" in line for line in refused), log[-3000:]
    assert any("34359738366 items" in line for line in refused), log[-3000:]

    # a zstd batch of a few KiB whose record decompresses to 64 MiB: CORRUPT_MESSAGE
    topic = f"after-hostile-{uuid.uuid4().hex[:8]}"
    created = call(
        bs,
        19,
        7,
        {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
            "timeout": 10_000,
        },
    )
    assert created.topics[0].error_code == ErrorCode.none
    bomb = build_batch([(b"k", bytes(64 * 1024 * 1024))], compression=ZSTD)
    assert len(bomb) < 64 * 1024
    answer = call(bs, 0, 9, produce_body(topic, bomb))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message

    # valid requests that ask for billions of partitions: refused at once, nothing assigned
    for name, count in ((f"{topic}-huge", 2**31 - 1), (f"{topic}-10k", 10_000)):
        started = time.monotonic()
        huge = call(
            bs,
            19,
            7,
            {
                "topics": [{"name": name, "num_partitions": count, "replication_factor": 1}],
                "timeout": 10_000,
            },
        )
        assert huge.topics[0].error_code == ErrorCode.policy_violation, huge
        assert time.monotonic() - started < 5
    grow = call(
        bs,
        37,
        1,
        {"topics": [{"name": topic, "count": 2**31 - 1}], "timeout_ms": 10_000},
    )
    assert grow.results[0].error_code == ErrorCode.policy_violation, grow

    # the acceptance: a normal client on the same listener right afterwards
    producer = Producer({"bootstrap.servers": bs, "acks": "all", "message.timeout.ms": 20000})
    delivered: list[object] = []
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 10
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 45
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"v%d" % i for i in range(10)]
    finally:
        consumer.close()

    # valid requests with values a handler must not trip over (each found by the fuzzer)
    fetch = fetch_body(topic)
    fetch.update(min_bytes=1_000_000, max_wait=200)
    fetch["topics"][0]["partitions"][0]["partition_max_bytes"] = -65536
    answer = call(bs, 1, 12, fetch).responses[0].partitions[0]
    assert answer.error_code == ErrorCode.none and answer.records  # min one message
    _parked_fetch_of_a_bad_offset_is_answered(bs, topic)
    for name in ("", "a/b", ".."):
        grown = call(bs, 37, 1, {"topics": [{"name": name, "count": 3}], "timeout_ms": 1000})
        assert grown.results[0].error_code == ErrorCode.unknown_topic_or_partition, name
        gone = call(bs, 20, 4, {"topic_names": [name], "timeout": 1000})
        assert gone.responses[0].error_code == ErrorCode.unknown_topic_or_partition, name
    heartbeat = call(
        bs,
        68,
        0,
        {
            "group_id": "g-v0",
            "member_id": "",
            "member_epoch": 0,
            "rebalance_timeout": 30_000,
            "subscribed_topic_names": [topic],
            "topic_partitions": [],
        },
    )
    assert heartbeat.error_code in (ErrorCode.none, ErrorCode.unsupported_version), heartbeat

    # and an authenticated client on the SASL listener
    sasl = {
        "bootstrap.servers": sasl_bs,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    producer = Producer({**sasl, "acks": "all", "message.timeout.ms": 20000})
    delivered.clear()
    producer.produce(topic, value=b"over-sasl", on_delivery=lambda err, _m: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None]
    assert broker.proc is not None and broker.proc.poll() is None
    assert "Traceback" not in broker.log_text()


def _parked_fetch_of_a_bad_offset_is_answered(bs: str, topic: str) -> None:
    """A fetch session that holds a negative fetch offset, then an incremental fetch parked
    for bytes: a produce wakes it and it is answered OFFSET_OUT_OF_RANGE at once."""
    full = fetch_body(topic, offset=-(2**58))
    full["session_epoch"] = 0
    first = call(bs, 1, 12, full)
    assert first.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    incremental = fetch_body(topic)
    incremental.update(
        session_id=first.session_id, session_epoch=1, topics=[], min_bytes=10**6, max_wait=8000
    )
    s = connect(bs)
    try:
        s.sendall(encode_request(1, 12, incremental))
        time.sleep(0.3)
        started = time.monotonic()
        produced = call(bs, 0, 9, produce_body(topic, build_batch([(b"k", b"wake")])))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
        s.settimeout(10)
        answer = read_response(s, 1, 12)
        assert time.monotonic() - started < 5  # not at the end of its 8 s wait
        parts = [p for t in answer.responses for p in t.partitions]
        assert [p.error_code for p in parts] == [ErrorCode.offset_out_of_range]
    finally:
        s.close()
