"""The partition-leader side of transactions over the wire against a real broker: hand-built
transactional Produce batches, WriteTxnMarkers, read_committed Fetch / ListOffsets, real
clients reading read_committed, TxnOffsetCommit and the offsets it makes visible.

The batches belong to no transaction a coordinator knows, so the broker runs with
`transaction.partition.verification.enable=false` (the leader's check of each transaction's
first batch with its coordinator is tested in tests/txn/test_txn_v2_wire.py)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.kafka_wire import call, produce_body
from wherry.group.records import OFFSETS_TOPIC, partition_for
from wherry.protocol.records import build_batch, iter_batches, iter_records

NOW = int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("txn-leader"),
        overrides=["transaction.partition.verification.enable=false"],
    ).start()
    try:
        yield b
    finally:
        b.stop()


def create(bs: str, name: str) -> None:
    r = call(bs, 19, 7, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "configs": []}],
        "timeout": 10_000, "validate_only": False})
    assert r.topics[0].error_code == ErrorCode.none


def produce(bs: str, topic: str, data: bytes, *, txn_id: str | None = None) -> Any:
    body = produce_body(topic, data)
    body["transactional_id"] = txn_id
    return call(bs, 0, 9, body).responses[0].partition_responses[0]


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return build_batch([(b"k", v) for v in values], timestamp_ms=NOW, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def markers(bs: str, *items: tuple[int, int, bool, int, str, int]) -> list[Any]:
    """WriteTxnMarkers v1 with (pid, epoch, commit, coordinator epoch, topic, partition)."""
    body = {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
         "coordinator_epoch": coord, "topics": [{"name": t, "partition_indexes": [p]}]}
        for pid, epoch, commit, coord, t, p in items]}
    r = call(bs, 27, 1, body)
    return [m.topics[0].partitions[0].error_code for m in r.markers]


def fetch(bs: str, topic: str, offset: int, isolation: int) -> Any:
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    return call(bs, 1, 12, body).responses[0].partitions[0]


def latest(bs: str, topic: str, isolation: int) -> int:
    r = call(bs, 2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(r.topics[0].partitions[0].offset)


def data_offsets(records: bytes | None) -> list[int]:
    out = []
    for pos, h in iter_batches(records or b""):
        if not h.is_control:
            out.extend(r.offset for r in iter_records(records or b"", pos))
    return out


def test_markers_lso_and_read_committed(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create(bs, topic)
    a, b = random.randrange(10**9, 2 * 10**9), random.randrange(2 * 10**9, 3 * 10**9)
    assert produce(bs, topic, build_batch([(b"k", b"plain")], timestamp_ms=NOW)).error_code == 0
    assert produce(bs, topic, txn_batch(a, 1, 0, [b"a0", b"a1"]), txn_id="ta").base_offset == 1
    assert produce(bs, topic, txn_batch(b, 0, 0, [b"b0", b"b1"]), txn_id="tb").base_offset == 3

    # Both transactions open: read_committed stops at the LSO (1), read_uncommitted at the HW.
    rc = fetch(bs, topic, 0, 1)
    assert (rc.high_watermark, rc.last_stable_offset) == (5, 1)
    assert data_offsets(rc.records) == [0]
    assert rc.aborted_transactions == ()
    assert data_offsets(fetch(bs, topic, 0, 0).records) == [0, 1, 2, 3, 4]
    assert (latest(bs, topic, 1), latest(bs, topic, 0)) == (1, 5)

    errors = markers(bs, (a, 1, True, 0, topic, 0), (b, 0, False, 0, topic, 0))
    assert errors == [ErrorCode.none, ErrorCode.none]
    rc = fetch(bs, topic, 0, 1)
    assert (rc.high_watermark, rc.last_stable_offset) == (7, 7)
    assert data_offsets(rc.records) == [0, 1, 2, 3, 4]  # the reader filters with the list
    assert [(t.producer_id, t.first_offset) for t in rc.aborted_transactions] == [(b, 3)]
    assert fetch(bs, topic, 0, 0).aborted_transactions is None
    assert latest(bs, topic, 1) == 7
    # From its marker on, the aborted transaction still overlaps; past it, no entry.
    assert len(fetch(bs, topic, 6, 1).aborted_transactions) == 1
    produce(bs, topic, build_batch([(b"k", b"later")], timestamp_ms=NOW))  # offset 7
    assert fetch(bs, topic, 7, 1).aborted_transactions == ()

    # Fencing and errors.
    assert markers(bs, (a, 0, True, 0, topic, 0)) == [ErrorCode.invalid_producer_epoch]
    assert markers(bs, (b, 0, False, 5, topic, 0)) == [ErrorCode.none]
    assert markers(bs, (b, 0, False, 3, topic, 0)) == [ErrorCode.transaction_coordinator_fenced]
    assert markers(bs, (a, 1, True, 0, topic, 7)) == [ErrorCode.unknown_topic_or_partition]
    # A stale epoch on transactional data.
    assert produce(bs, topic, txn_batch(a, 0, 0, [b"x"]), txn_id="ta").error_code == (
        ErrorCode.invalid_producer_epoch
    )
    # A client may not write a marker itself.
    from wherry.protocol.records import build_control_batch

    forged = build_control_batch(commit=True, producer_id=a, producer_epoch=1, coordinator_epoch=9)
    assert produce(bs, topic, forged, txn_id="ta").error_code == ErrorCode.invalid_record

    # Real clients, read_committed: the plain record and a's commit, never b's aborted data.
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.assign([CkTopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.time() + 15
    while time.time() < deadline and len(got) < 4:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    # Nothing more arrives.
    extra = c.poll(1.0)
    c.close()
    assert got == [b"plain", b"a0", b"a1", b"later"]
    assert extra is None or extra.error() is not None

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    kc = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed",
                       enable_auto_commit=False, consumer_timeout_ms=3000,
                       auto_offset_reset="earliest")
    kc.assign([KpTopicPartition(topic, 0)])
    kp_values = [m.value for m in kc]
    kc.close()
    assert kp_values == [b"plain", b"a0", b"a1", b"later"]


def test_open_transaction_blocks_read_committed_clients(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create(bs, topic)
    pid = random.randrange(3 * 10**9, 4 * 10**9)
    produce(bs, topic, build_batch([(b"k", b"before")], timestamp_ms=NOW))
    produce(bs, topic, txn_batch(pid, 0, 0, [b"open"]), txn_id="to")
    produce(bs, topic, build_batch([(b"k", b"after")], timestamp_ms=NOW))
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([CkTopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 5
    while time.time() < deadline:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert got == [b"before"]  # stops at the LSO
    assert markers(bs, (pid, 0, True, 0, topic, 0)) == [ErrorCode.none]
    deadline = time.time() + 10
    while time.time() < deadline and len(got) < 3:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [b"before", b"open", b"after"]


def _find_coordinator(bs: str, group: str) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        r = call(bs, 10, 3, {"key": group, "key_type": 0})
        if r.error_code == ErrorCode.none:
            return
        time.sleep(0.2)
    raise AssertionError("no group coordinator")


def _txn_commit(bs: str, group: str, pid: int, topic: str, offset: int) -> int:
    r = call(bs, 28, 3, {
        "transactional_id": "t-offsets", "group_id": group, "producer_id": pid,
        "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": "m"}]}]})
    return int(r.topics[0].partitions[0].error_code)


def _offset(bs: str, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    deadline = time.time() + 10
    while True:
        r = call(bs, 9, 7, {"group_id": group, "require_stable": require_stable,
                            "topics": [{"name": topic, "partition_indexes": [0]}]})
        p = r.topics[0].partitions[0]
        if r.error_code != ErrorCode.coordinator_load_in_progress or time.time() > deadline:
            return int(p.committed_offset), int(p.error_code)
        time.sleep(0.2)


def test_txn_offset_commit_pending_until_marker(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create(bs, topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    _find_coordinator(bs, group)
    offsets_partition = partition_for(group, 50)
    pid = random.randrange(4 * 10**9, 5 * 10**9)

    assert _txn_commit(bs, group, pid, topic, 42) == ErrorCode.none
    assert _offset(bs, group, topic, True) == (-1, ErrorCode.unstable_offset_commit)
    assert _offset(bs, group, topic, False) == (-1, ErrorCode.none)
    assert markers(bs, (pid, 0, True, 0, OFFSETS_TOPIC, offsets_partition)) == [ErrorCode.none]
    assert _offset(bs, group, topic, True) == (42, ErrorCode.none)

    assert _txn_commit(bs, group, pid, topic, 99) == ErrorCode.none
    assert markers(bs, (pid, 0, False, 0, OFFSETS_TOPIC, offsets_partition)) == [ErrorCode.none]
    assert _offset(bs, group, topic, True) == (42, ErrorCode.none)
    # A stale epoch is refused by the offsets partition.
    r = call(bs, 28, 3, {
        "transactional_id": "t-offsets", "group_id": group, "producer_id": pid,
        "producer_epoch": -1 + 0, "generation_id": 5, "member_id": "nobody",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    assert r.topics[0].partitions[0].error_code == ErrorCode.unknown_member_id


def test_aiokafka_read_committed_skips_aborted(broker: BrokerProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    bs = broker.bootstrap
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create(bs, topic)
    a, b = random.randrange(5 * 10**9, 6 * 10**9), random.randrange(6 * 10**9, 7 * 10**9)
    produce(bs, topic, txn_batch(a, 0, 0, [b"kept"]), txn_id="ta")
    produce(bs, topic, txn_batch(b, 0, 0, [b"gone"]), txn_id="tb")
    assert markers(bs, (b, 0, False, 0, topic, 0), (a, 0, True, 0, topic, 0)) == [0, 0]
    produce(bs, topic, build_batch([(b"k", b"tail")], timestamp_ms=NOW))

    async def read() -> list[bytes]:
        c = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([AioTopicPartition(topic, 0)])
            got: list[bytes] = []
            for _ in range(20):
                batches = await c.getmany(timeout_ms=300)
                got.extend(m.value for ms in batches.values() for m in ms)
                if len(got) >= 2:
                    break
            return got
        finally:
            await c.stop()

    assert asyncio.run(read()) == [b"kept", b"tail"]
