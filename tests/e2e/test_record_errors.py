"""KIP-467 per-record produce errors through a real broker: a batch with records the topic
cannot accept fails with INVALID_RECORD (or INVALID_TIMESTAMP), `record_errors` naming each
offending record and `error_message`, and nothing of the batch is written (as Kafka 3.9).

librdkafka 2.16 (rd_kafka_msgbatch_handle_Produce_result_record_errors) fails the records
named in `record_errors` with the broker's error and message and the other records of the
batch with the local error _INVALID_DIFFERENT_RECORD ("part of a batch which had one more
more invalid records"), which tells the application that re-producing them will succeed;
the Java producer and kafka-python 3.0 (sender `_record_exceptions_fn`) do the same: the
named records fail with the broker's error and message, the others with a generic
KafkaError of that wording.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.kafka_wire import call, fetch_body, produce_body
from wherry.protocol.records import RecordSpec, build_batch


def _topic(bs: str, config: dict[str, str]) -> str:
    topic = f"rec-err-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)
    return topic


def _log_end(bs: str, topic: str) -> int:
    resp = call(bs, 1, 12, fetch_body(topic))
    part = resp.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.high_watermark)


def test_confluent_kafka_sees_90_delivered_and_10_failed(broker: BrokerProcess) -> None:
    """100 records in one batch to a compacted topic, every tenth without a key."""
    bs = broker.bootstrap
    topic = _topic(bs, {"cleanup.policy": "compact"})
    producer = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 1000,  # all 100 records in one batch (one Produce request)
            "batch.num.messages": 1000,
            "acks": "all",
        }
    )
    # The connection and the partition's leader known first: a producer's first records can
    # go out before linger.ms while it connects, which would split the 100 into batches.
    producer.produce(topic, key=b"warm", value=b"warm", partition=0)
    assert producer.flush(30) == 0
    results: dict[int, KafkaError | None] = {}

    def produce(i: int) -> None:
        key = None if i % 10 == 0 else f"k{i}".encode()

        def done(err: KafkaError | None, _msg: object) -> None:
            results[i] = err

        producer.produce(topic, key=key, value=f"v{i}".encode(), partition=0, on_delivery=done)

    for i in range(100):
        produce(i)
    assert producer.flush(30) == 0
    failed = {i: e for i, e in results.items() if e is not None}
    assert len(results) == 100 and len(failed) == 100  # the broker wrote none of the batch
    invalid = {i for i, e in failed.items() if e.code() == KafkaError.INVALID_RECORD}
    assert invalid == set(range(0, 100, 10))
    others = {i for i, e in failed.items() if e.code() == KafkaError._INVALID_DIFFERENT_RECORD}
    assert others == set(range(100)) - invalid
    assert _log_end(bs, topic) == 1  # the first record only

    # What the client tells the application to do with the others: produce them again.
    results.clear()
    for i in sorted(others):
        produce(i)
    assert producer.flush(30) == 0
    delivered = [i for i, e in results.items() if e is None]
    assert sorted(delivered) == sorted(others) and len(delivered) == 90

    consumer = Consumer(
        {"bootstrap.servers": bs, "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen: list[bytes] = []
        for _ in range(100):
            for m in consumer.consume(100, timeout=0.5):
                assert m.error() is None
                seen.append(m.value())
            if len(seen) >= 91:
                break
    finally:
        consumer.close()
    assert sorted(seen) == sorted([b"warm", *(f"v{i}".encode() for i in others)])


def test_record_errors_on_the_wire(broker: BrokerProcess) -> None:
    """Produce v9 answers: the indices and messages of every invalid record, the partition
    error and error_message; timestamps out of range give INVALID_TIMESTAMP."""
    bs = broker.bootstrap
    topic = _topic(bs, {"cleanup.policy": "compact"})
    records = [(None if i in (3, 7, 42) else b"k", b"v") for i in range(50)]
    part = call(bs, 0, 9, produce_body(topic, build_batch(records))).responses[0]
    p = part.partition_responses[0]
    assert p.error_code == ErrorCode.invalid_record
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (i, f"Compacted topic cannot accept message without key in topic partition {topic}-0.")
        for i in (3, 7, 42)
    ]
    assert p.error_message is not None and "3 record errors" in p.error_message
    assert p.base_offset == -1
    assert _log_end(bs, topic) == 0

    # a valid batch after it is written at offset 0
    ok = call(bs, 0, 9, produce_body(topic, build_batch([(b"k", b"v")] * 5)))
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert ok.responses[0].partition_responses[0].record_errors == ()
    assert _log_end(bs, topic) == 5

    # timestamps: within a minute of the broker's clock, one record an hour early
    ts_topic = _topic(bs, {"message.timestamp.difference.max.ms": "60000"})
    now = int(time.time() * 1000)
    specs = [
        RecordSpec(b"k", b"v", timestamp_ms=now - (3_600_000 if i == 4 else 0)) for i in range(8)
    ]
    p = call(bs, 0, 9, produce_body(ts_topic, build_batch(specs))).responses[0]
    p = p.partition_responses[0]
    assert p.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in p.record_errors] == [4]
    assert "is out of range" in p.record_errors[0].batch_index_error_message
    assert _log_end(bs, ts_topic) == 0

    # Produce v7 has no record_errors field: the partition error alone
    p = call(bs, 0, 7, produce_body(topic, build_batch(records))).responses[0]
    assert p.partition_responses[0].error_code == ErrorCode.invalid_record
    assert _log_end(bs, topic) == 5
