"""Data and topics survive a clean restart and a kill -9 during a produce load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.broker_process import BrokerProcess, wait_until
from wherry.protocol.records import crc_ok, iter_batches, parse_header


def read_all(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0
) -> dict[tuple[int, int], bytes]:
    """(partition, offset) → value for everything up to each partition's high watermark."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    ends = {
        p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(partitions)
    }
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[tuple[int, int], bytes] = {}
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    if m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                raise AssertionError(m.error())
            out[(m.partition(), m.offset())] = m.value()
    finally:
        c.close()
    assert len(done) == partitions, f"did not reach the end: {ends} {len(out)}"
    return out


def validate_log_dir(data_dir: Path, topic: str) -> int:
    """Every batch of every segment has a valid CRC and offsets are contiguous."""
    total = 0
    for pdir in sorted(data_dir.glob(f"{topic}-*")):
        expected: int | None = None
        for seg in sorted(pdir.glob("*.log")):
            buf = seg.read_bytes()
            end = 0
            for pos, h in iter_batches(buf):
                assert crc_ok(buf, pos, h), f"bad CRC in {seg} at {pos}"
                if expected is not None:
                    assert h.base_offset == expected, f"gap in {seg}: {h.base_offset} != {expected}"
                expected = h.next_offset
                total += h.record_count
                end = pos + h.size_in_bytes
            assert end == len(buf), f"trailing bytes in {seg}"
    return total


def test_clean_restart_keeps_topics_configs_and_data(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker.start()
    topic = f"r-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "86400000"})])[topic].result(
        15
    )
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(900):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 3)
    assert p.flush(20) == 0
    assert b.stop() == 0
    assert (b.data_dir / ".kafka_cleanshutdown").exists()
    assert validate_log_dir(b.data_dir, topic) == 900

    b.start()
    assert not (b.data_dir / ".kafka_cleanshutdown").exists()
    assert "unclean" not in b.log_text()
    got = read_all(b.bootstrap, topic, 3)
    assert len(got) == 900
    assert got[(1, 0)] == b"v1"
    # the topic and its config survived; offsets continue where they stopped
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    cfg = next(iter(res.values())).result(10)
    assert cfg["retention.ms"].value == "86400000"
    p = Producer({"bootstrap.servers": b.bootstrap})
    offsets: list[int] = []
    p.produce(
        topic, value=b"after", partition=0, on_delivery=lambda err, m: offsets.append(m.offset())
    )
    assert p.flush(20) == 0
    assert offsets == [300]


PRODUCER_SCRIPT = r"""
import json, sys, time
from confluent_kafka import Producer
bootstrap, topic, acked_path, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
out = open(acked_path, "a", buffering=1)
p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1,
              "message.timeout.ms": 4000, "reconnect.backoff.max.ms": 200})
def done(err, msg):
    if err is None:
        out.write(json.dumps([msg.partition(), msg.offset(), msg.value().decode()]) + "\n")
i = 0
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        p.produce(topic, value=f"seq-{i}".encode(), partition=i % partitions, on_delivery=done)
        i += 1
    except BufferError:
        pass
    p.poll(0)
    if i % 200 == 0:
        time.sleep(0.005)
p.flush(5)
"""


@pytest.mark.parametrize("flush_messages", [None, 1], ids=["page-cache", "fsync-each"])
def test_kill_9_during_produce_loses_no_acknowledged_record(
    fresh_broker: BrokerProcess, tmp_path: Path, flush_messages: int | None
) -> None:
    b = fresh_broker.start()
    topic = f"k-{uuid.uuid4().hex[:8]}"
    config = {"segment.bytes": "65536"}
    if flush_messages is not None:
        config["flush.messages"] = str(flush_messages)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(15)
    acked_path = tmp_path / "acked.jsonl"
    prod = subprocess.Popen(
        [sys.executable, "-c", PRODUCER_SCRIPT, b.bootstrap, topic, str(acked_path), "2"]
    )
    try:
        assert wait_until(
            lambda: acked_path.exists() and acked_path.stat().st_size > 20_000, timeout_s=20
        )
        os.kill(b.pid, signal.SIGKILL)  # crash mid-load
        b.proc.wait(10)  # type: ignore[union-attr]
        b.proc = None
    finally:
        prod.send_signal(signal.SIGTERM)
        try:
            prod.wait(15)
        except subprocess.TimeoutExpired:
            prod.kill()
            prod.wait(5)
    acked = [json.loads(line) for line in acked_path.read_text().splitlines() if line.strip()]
    assert len(acked) > 100

    b.start()
    assert "unclean shutdown" in b.log_text()
    got = read_all(b.bootstrap, topic, 2)
    missing = [a for a in acked if got.get((a[0], a[1])) != a[2].encode()]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    values = list(got.values())
    assert len(values) == len(set(values)), "duplicates in the log"
    b.stop()
    assert validate_log_dir(b.data_dir, topic) == len(got)


def test_recovery_truncates_a_torn_tail(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker.start()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(100):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
        p.flush(10)
    b.kill()
    seg = sorted((b.data_dir / f"{topic}-0").glob("*.log"))[-1]
    data = seg.read_bytes()
    last_pos = [pos for pos, _ in iter_batches(data)][-1]
    h = parse_header(data, last_pos)
    # Tear the last batch in half and append garbage, as a crash mid-write could.
    seg.write_bytes(data[: last_pos + h.size_in_bytes // 2] + os.urandom(100))
    (seg.with_suffix(".index")).write_bytes(os.urandom(64))
    b.start()
    got = read_all(b.bootstrap, topic, 1)
    assert len(got) == h.base_offset  # everything before the torn batch
    b.stop()
    validate_log_dir(b.data_dir, topic)


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "kill-9"])
def test_producer_state_survives_restart(fresh_broker: BrokerProcess, crash: bool) -> None:
    from kio.schema.errors import ErrorCode

    from tests.kafka_wire import call, produce_body
    from wherry.protocol.records import build_batch

    b = fresh_broker.start()
    topic = f"ps-{uuid.uuid4().hex[:8]}"
    r = call(b.bootstrap, 19, 7, {"topics": [{"name": topic, "num_partitions": 1,
                                              "replication_factor": 1}], "timeout": 10_000})
    assert r.topics[0].error_code == ErrorCode.none
    pid = call(b.bootstrap, 22, 4, {"transactional_id": None, "transaction_timeout": 1000,
                                    "producer_id": -1, "producer_epoch": -1}).producer_id

    def send(seq: int) -> tuple[int, int]:
        batch = build_batch([(None, f"s{seq}".encode())], producer_id=pid, producer_epoch=0,
                            base_sequence=seq)
        resp = call(b.bootstrap, 0, 9, produce_body(topic, batch))
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    assert [send(s) for s in range(3)] == [(0, 0), (0, 1), (0, 2)]
    if crash:
        b.kill()
    else:
        b.stop()
    b.start()
    assert send(2) == (ErrorCode.none, 2)  # a retry after restart is still a duplicate
    assert send(5)[0] == ErrorCode.out_of_order_sequence_number
    assert send(3) == (ErrorCode.none, 3)
