"""Bad input gets the right error or a clean close; the broker keeps serving; data is intact."""

from __future__ import annotations

import os
import socket
import struct
import uuid

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
from wherry.protocol.records import build_batch


def _create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    resp = call(
        bootstrap,
        19,
        7,
        {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
            "timeout": 10_000,
        },
    )
    assert resp.topics[0].error_code == ErrorCode.none, resp


def _produce(bootstrap: str, topic: str, records: bytes) -> object:
    return call(bootstrap, 0, 9, produce_body(topic, records))


def _fetch_all(bootstrap: str, topic: str) -> bytes:
    part = call(bootstrap, 1, 12, fetch_body(topic)).responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return bytes(part.records or b"")


def _serving(bootstrap: str) -> bool:
    resp = call(bootstrap, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
    return resp.error_code == ErrorCode.none


def test_bad_input_is_rejected_and_stored_data_unaffected(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = f"bad-{uuid.uuid4().hex[:8]}"
    _create_topic(bs, topic)
    good = build_batch([(b"k", b"v1"), (b"k", b"v2")])
    assert _produce(bs, topic, good).responses[0].partition_responses[0].error_code == 0
    before = _fetch_all(bs, topic)
    assert before

    # 1. random bytes: a frame whose content is garbage → clean close
    s = connect(bs)
    s.sendall(struct.pack(">i", 64) + os.urandom(64))
    assert is_closed(s)
    s.close()

    # 2. an oversized frame → closed before the body is read
    s = connect(bs)
    s.sendall(struct.pack(">i", 200 * 1024 * 1024))
    assert is_closed(s)
    s.close()

    # 3. a truncated frame: the client goes away mid-request; nothing happens to the broker
    s = connect(bs)
    s.sendall(
        encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"})[:9]
    )
    s.close()

    # 4. unknown API key, unsupported version → close
    for key, ver in ((999, 0), (0, 99), (4, 0)):
        s = connect(bs)
        s.sendall(struct.pack(">ihhi", 10, key, ver, 1) + b"\xff\xff")
        assert is_closed(s), (key, ver)
        s.close()

    # 5. ApiVersions at an unknown version → a v0 response with UNSUPPORTED_VERSION
    s = connect(bs)
    s.sendall(struct.pack(">ihhi", 10, 18, 77, 5) + b"\xff\xff")
    resp = read_response(s, 18, 0)
    assert resp.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 0 for k in resp.api_keys)
    s.close()

    # 6. a batch with a bad CRC → CORRUPT_MESSAGE
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    r = _produce(bs, topic, bytes(bad)).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.corrupt_message

    # 7. magic 1 message set → INVALID_RECORD (v2 batches only)
    legacy = bytearray(good)
    legacy[16] = 1
    r = _produce(bs, topic, bytes(legacy)).responses[0].partition_responses[0]
    assert r.error_code in (ErrorCode.invalid_record, ErrorCode.corrupt_message)

    # 8. two batches in one partition's records → INVALID_RECORD
    r = _produce(bs, topic, good + good).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.invalid_record

    # 9. a batch over max.message.bytes → MESSAGE_TOO_LARGE
    big = build_batch([(None, os.urandom(1_100_000))])
    r = _produce(bs, topic, big).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.message_too_large

    # 10. produce to an unknown topic → UNKNOWN_TOPIC_OR_PARTITION (no auto-creation on produce)
    r = _produce(bs, f"nope-{uuid.uuid4().hex[:6]}", good).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.unknown_topic_or_partition

    # 11. invalid acks → INVALID_REQUIRED_ACKS
    resp = call(
        bs,
        0,
        9,
        {
            "acks": 5,
            "timeout": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": good}]}],
        },
    )
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks

    # The broker still serves, and what was stored is exactly what it was.
    assert _serving(bs)
    assert _fetch_all(bs, topic) == before
    assert "Closing connection" in broker.log_text()


def test_many_connections_while_one_misbehaves(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    slow = connect(bs)
    slow.sendall(struct.pack(">i", 1000) + b"\x00" * 10)  # never completes its frame
    others = [connect(bs) for _ in range(20)]
    for s in others:
        s.sendall(
            encode_request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        )
    for s in others:
        assert read_response(s, 18, 3).error_code == ErrorCode.none
        s.close()
    slow.close()


def test_pipelined_requests_answered_in_order(broker: BrokerProcess) -> None:
    s = connect(broker.bootstrap)
    s.sendall(
        b"".join(
            encode_request(
                3,
                12,
                {
                    "topics": [],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
                correlation_id=i,
            )
            for i in range(50)
        )
    )
    for i in range(50):
        (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        raw = s.recv(size, socket.MSG_WAITALL)
        assert struct.unpack_from(">i", raw)[0] == i
    s.close()
