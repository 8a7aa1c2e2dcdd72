"""The lean Produce request reader (`produce_request.decode_produce_request`) builds exactly
the entities kio's reader builds, for every Produce version the broker serves; what it does not
read exactly (tagged fields, truncation, bad lengths, bad UTF-8) goes to kio with the same
outcome as before; the records of a writable frame are views of it, which the log patches in
place and does not keep; real clients' records are stored as sent."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kio.serial import entity_reader

from tests.broker_process import BrokerProcess
from tests.helpers import poll_messages
from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.protocol.codec import (
    Request,
    RequestDecodeError,
    _read,
    decode_request,
    encode_request,
    load_request_schema,
)
from wherry.protocol.produce_request import (
    LEAN_MIN_FRAME_BYTES,
    MAX_VERSION,
    MIN_VERSION,
    decode_produce_request,
)
from wherry.protocol.records import build_batch, iter_batches, iter_records
from wherry.server.handlers import SUPPORTED_VERSIONS

SERVED = range(SUPPORTED_VERSIONS[0][0], SUPPORTED_VERSIONS[0][1] + 1)
T0 = 1_700_000_000_000


def test_the_lean_reader_covers_every_served_version() -> None:
    assert SERVED[0] >= MIN_VERSION and SERVED[-1] <= MAX_VERSION


def _random_body(rnd: random.Random, version: int) -> dict[str, Any]:
    def name() -> str:
        return rnd.choice(["", "t", "topic-ü", "x" * rnd.randint(1, 300)])

    def records() -> bytes | None:
        if rnd.random() < 0.2:
            return None
        if rnd.random() < 0.1:
            return b""
        n = rnd.randint(1, 5)
        return build_batch(
            [(rnd.randbytes(rnd.randint(0, 8)), rnd.randbytes(rnd.randint(0, 200)))
             for _ in range(n)],
            timestamp_ms=T0,
        )

    topics = []
    for _ in range(rnd.choice([0, 1, 1, 2, 5])):
        topic: dict[str, Any] = {
            "partition_data": [
                {"index": rnd.randint(-5, 2**31 - 1), "records": records()}
                for _ in range(rnd.choice([0, 1, 3, 12]))
            ]
        }
        if version >= 13:
            topic["topic_id"] = rnd.choice([uuid.UUID(int=rnd.getrandbits(128)), None])
        else:
            topic["name"] = name()
        topics.append(topic)
    return {
        "transactional_id": rnd.choice([None, "", "tx-1", "tränsaction" * 20]),
        "acks": rnd.choice([-1, 0, 1, 2, -32768, 32767]),
        "timeout": rnd.choice([0, 1, 30_000, -1, 2**31 - 1, -(2**31)]),
        "topic_data": topics,
    }


BIG_RECORDS = build_batch([(b"big", b"b" * LEAN_MIN_FRAME_BYTES)], timestamp_ms=T0)


def _with_big_records(body: dict[str, Any], version: int) -> dict[str, Any]:
    """`body` with a first topic whose records make the frame one `decode_request` reads
    with the lean reader."""
    topic: dict[str, Any] = {"partition_data": [{"index": 0, "records": BIG_RECORDS}]}
    if version >= 13:
        topic["topic_id"] = uuid.UUID(int=1)
    else:
        topic["name"] = "big"
    return {**body, "topic_data": [topic, *body["topic_data"]]}


def _frame(version: int, body: dict[str, Any], client_id: str | None) -> bytes:
    return encode_request(0, version, 12345, body, client_id=client_id)[4:]


def _kio(frame: bytes) -> tuple[Any, Any]:
    version = int.from_bytes(frame[2:4], "big")
    cls = load_request_schema(0, version)
    header, used = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, used)
    return header, body


def _plain(value: Any) -> Any:
    """An entity as nested tuples of (class, field values); records as bytes."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ((f.name, _plain(getattr(value, f.name))) for f in dataclasses.fields(value))
        return (type(value), *fields)
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, memoryview):
        return ("records", bytes(value))
    if isinstance(value, bytes):
        return ("records", value)
    return (type(value), value)


@pytest.mark.parametrize("version", SERVED)
def test_same_entities_as_kio(version: int) -> None:
    rnd = random.Random(version)
    for i in range(40):
        body = _random_body(rnd, version)
        if i % 4 == 0:
            body = _with_big_records(body, version)
        frame = _frame(version, body, rnd.choice([None, "", "client-é"]))
        expected_header, expected_body = _kio(frame)
        for given in (frame, memoryview(bytearray(frame)), memoryview(frame)):
            lean = decode_produce_request(given)
            assert lean is not None
            header, body = lean
            assert _plain(header) == _plain(expected_header)
            assert _plain(body) == _plain(expected_body)
            assert type(body.timeout) is datetime.timedelta
            req = decode_request(given, SUPPORTED_VERSIONS)
            assert isinstance(req, Request)
            assert req.client_id == expected_header.client_id
            assert _plain(req.body) == _plain(expected_body)
            assert req.size_bytes == len(frame)


def test_records_of_a_writable_frame_are_views_of_it() -> None:
    batch = BIG_RECORDS
    for version in SERVED:
        body = _with_big_records({"acks": 1, "timeout": 100, "topic_data": []}, version)
        buf = bytearray(_frame(version, body, "c"))
        assert len(buf) >= LEAN_MIN_FRAME_BYTES
        req = decode_request(memoryview(buf), SUPPORTED_VERSIONS)
        assert isinstance(req, Request)
        records = req.body.topic_data[0].partition_data[0].records
        assert type(records) is memoryview and not records.readonly
        assert records.obj is buf and bytes(records) == batch
        start = bytes(buf).index(batch)
        buf[start] ^= 0xFF  # the view sees the frame's own bytes
        assert records[0] == batch[0] ^ 0xFF
        # a read-only frame gives bytes
        ro = decode_produce_request(bytes(buf))
        assert ro is not None
        assert type(ro[1].topic_data[0].partition_data[0].records) is bytes
        # a small frame is kio's (cheaper there): its records are bytes
        small = {"acks": 1, "timeout": 100, "topic_data": [
            {"name": "t", "topic_id": uuid.UUID(int=1),
             "partition_data": [{"index": 0, "records": b"r"}]}]}
        small_req = decode_request(memoryview(bytearray(_frame(version, small, "c"))),
                                   SUPPORTED_VERSIONS)
        assert isinstance(small_req, Request)
        assert type(small_req.body.topic_data[0].partition_data[0].records) is bytes


def _outcome(frame: bytes | memoryview) -> Any:
    try:
        req = decode_request(frame, SUPPORTED_VERSIONS)
    except RequestDecodeError:
        return RequestDecodeError
    assert isinstance(req, Request)
    return (req.client_id, _plain(req.body))


def _kio_outcome(frame: bytes) -> Any:
    """What `decode_request` gave before the lean reader: kio's path."""
    try:
        version = int.from_bytes(frame[2:4], "big")
        cls = load_request_schema(0, version)
        header, used = _read(cls.__header_schema__, frame, 0)
        body, _ = _read(cls, frame, used)
    except RequestDecodeError:
        return RequestDecodeError
    return (header.client_id, _plain(body))


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_every_truncation_decodes_as_kio_does(version: int) -> None:
    body = _random_body(random.Random(100 + version), version)
    body["topic_data"] = body["topic_data"][:2] or [
        {"name": "t", "topic_id": uuid.uuid4(),
         "partition_data": [{"index": 1, "records": b"abc"}]}
    ]
    frame = _frame(version, _with_big_records(body, version), "cid")
    big_at = frame.index(BIG_RECORDS)
    big_end = big_at + len(BIG_RECORDS)
    # every cut but those inside the big records, of which every 4096th
    cuts = [*range(8, big_at + 1), *range(big_at + 1, big_end, 4096),
            *range(big_end, len(frame) + 1)]
    for cut in cuts:
        part = frame[:cut]
        expected = _kio_outcome(part)
        assert _outcome(memoryview(bytearray(part))) == expected, cut
        assert _outcome(part) == expected, cut
        if cut < len(frame):
            assert decode_produce_request(part) is None, cut


def _flexible_with_tags(header_tags: bool) -> tuple[bytes, bytes]:
    """(frame with one unknown tagged field in the header or the body, the same without)."""
    body = {"acks": 1, "timeout": 100,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"xyz"}]}]}
    frame = _frame(9, body, "cid")
    tag = b"\x01\x07\x02ab"  # one tagged field: tag 7, two bytes
    if header_tags:
        at = 8 + 2 + 3  # prefix, client_id length, "cid": the header's tagged fields
        assert frame[at] == 0
        return frame[:at] + tag + frame[at + 1 :], frame
    assert frame[-1] == 0
    return frame[:-1] + tag, frame


@pytest.mark.parametrize("header_tags", [True, False])
def test_tagged_fields_go_to_kio(header_tags: bool) -> None:
    tagged, plain = _flexible_with_tags(header_tags)
    assert decode_produce_request(tagged) is None
    assert _outcome(memoryview(bytearray(tagged))) == _outcome(plain) == _kio_outcome(tagged)


def _v3_frame(name_len: bytes, name: bytes, records_len: bytes, records: bytes) -> bytes:
    return (
        b"\x00\x00\x00\x03\x00\x00\x00\x07" + b"\x00\x01c"  # header v1, client "c"
        + b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x64"  # no transactional id, acks, timeout
        + b"\x00\x00\x00\x01" + name_len + name
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + records_len + records
    )


@pytest.mark.parametrize(
    "frame",
    [
        _v3_frame(b"\x00\x02", b"\xff\xfe", b"\x00\x00\x00\x01", b"r"),  # bad UTF-8 name
        _v3_frame(b"\xff\xff", b"", b"\x00\x00\x00\x01", b"r"),  # null topic name
        _v3_frame(b"\xff\xfe", b"", b"\x00\x00\x00\x01", b"r"),  # length -2
        _v3_frame(b"\x00\x01", b"t", b"\xff\xff\xff\xfe", b""),  # records length -2
        _v3_frame(b"\x00\x01", b"t", b"\x7f\xff\xff\xff", b"r"),  # records past the end
        # a topic array of 2**31 - 1 entries in a short frame
        b"\x00\x00\x00\x03\x00\x00\x00\x07\xff\xff\xff\xff\x00\x01\x00\x00\x00\x64\x7f\xff\xff\xff",
        # flexible: an overlong varint
        b"\x00\x00\x00\x09\x00\x00\x00\x07\xff\xff\x00\x00\x00\x01\x00\x00\x00\x64"
        + b"\xff" * 6 + b"\x01",
    ],
)
def test_bad_input_gets_kio_outcome(frame: bytes) -> None:
    assert decode_produce_request(frame) is None
    assert _outcome(memoryview(bytearray(frame))) == _kio_outcome(frame) == RequestDecodeError


@pytest.mark.parametrize(
    "frame",
    [
        # a null topic array (legacy length -1, compact length 0): kio would read it as None,
        # but the array is not nullable, so the decode guard refuses it as Kafka does
        b"\x00\x00\x00\x03\x00\x00\x00\x07\xff\xff\xff\xff\x00\x01\x00\x00\x00\x64"
        + b"\xff\xff\xff\xff",
        b"\x00\x00\x00\x09\x00\x00\x00\x07\xff\xff\x00\x00\x00\x01\x00\x00\x00\x64\x00\x00",
    ],
)
def test_null_arrays_are_left_to_kio_and_refused(frame: bytes) -> None:
    assert decode_produce_request(frame) is None
    outcome = _outcome(memoryview(bytearray(frame)))
    assert outcome == _kio_outcome(frame) == RequestDecodeError


def test_valid_v3_frame_for_the_bad_input_table() -> None:
    frame = _v3_frame(b"\x00\x01", b"t", b"\x00\x00\x00\x01", b"r")
    lean = decode_produce_request(frame)
    assert lean is not None and _plain(lean[1]) == _plain(_kio(frame)[1])


def test_log_patches_a_writable_view_in_place_and_keeps_no_view(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), topic_partition=TopicPartition("t", 0),
                   now_ms=T0)
    try:
        log.append_as_leader(build_batch([(b"a", b"0")], timestamp_ms=T0),
                             leader_epoch=3, now_ms=T0)
        sent = build_batch([(b"k", b"v" * 100), (None, b"w")], timestamp_ms=T0,
                           producer_id=9, producer_epoch=0, base_sequence=0)
        frame = bytearray(b"head" + sent + b"tail")
        view = memoryview(frame)[4 : 4 + len(sent)]
        info = log.append_as_leader(view, leader_epoch=3, now_ms=T0)
        assert info.first_offset == 1
        stored = log.read(1, max_bytes=1 << 20)
        # the frame itself was patched: base offset 1, leader epoch 3
        assert bytes(view) == stored
        [(pos, header)] = list(iter_batches(stored))
        assert (header.base_offset, header.partition_leader_epoch) == (1, 3)
        assert [(r.key, r.value) for r in iter_records(stored, pos)] == [
            (b"k", b"v" * 100), (None, b"w")]
        view.release()
        frame.extend(b"!")  # no view of the frame outlives the append: it can be resized
        # producer state kept ints, not the frame: the retry is a duplicate
        again = log.append_as_leader(bytearray(sent), leader_epoch=3, now_ms=T0)
        assert again.duplicate and again.first_offset == 1
        # read-only bytes are copied, never written
        ro = build_batch([(b"x", b"y")], timestamp_ms=T0)
        copy = bytes(ro)
        log.append_as_leader(ro, leader_epoch=3, now_ms=T0)
        assert ro == copy
    finally:
        log.close()


def _new_topic(bootstrap: str) -> str:
    name = f"lean-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=10)[name].result(timeout=15)
    return name


def _consume(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CKTopicPartition(topic, p, 0) for p in range(2)])
    try:
        msgs = poll_messages(c, expected, 30.0)
    finally:
        c.close()
    return sorted(
        (m.partition(), m.key() or b"", m.value() or b"") for m in msgs  # type: ignore[misc]
    )


def test_real_clients_records_are_stored_as_sent(broker: BrokerProcess) -> None:
    """confluent-kafka (librdkafka 2.16: Produce v10) and kafka-python (v9) send flexible
    versions, aiokafka 0.14 a non-flexible one (at most v7)."""
    bs = broker.bootstrap
    rnd = random.Random(7)
    # batches large enough for frames of LEAN_MIN_FRAME_BYTES and more (the lean reader's)
    values = [rnd.randbytes(rnd.randint(0, 40_000)) for _ in range(80)]

    topic = _new_topic(bs)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, key=f"ck{i}".encode(), value=v, partition=i % 2)
    assert p.flush(30) == 0

    kp = KafkaProducer(bootstrap_servers=bs, acks=1, linger_ms=20, batch_size=512 << 10)
    try:
        for i, v in enumerate(values):
            kp.send(topic, key=f"kk{i}".encode(), value=v, partition=i % 2)
        kp.flush(timeout=30)
    finally:
        kp.close(timeout=10)

    async def aio() -> None:
        prod = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=20, max_batch_size=512 << 10)
        await prod.start()
        try:
            sends = [await prod.send(topic, key=f"ak{i}".encode(), value=v, partition=i % 2)
                     for i, v in enumerate(values)]
            await asyncio.wait_for(asyncio.gather(*sends), 30)
        finally:
            await prod.stop()

    asyncio.run(aio())

    sent = sorted(
        (i % 2, f"{prefix}{i}".encode(), v)
        for prefix in ("ck", "kk", "ak")
        for i, v in enumerate(values)
    )
    assert _consume(bs, topic, len(sent)) == sent
