"""What is not built answers at once and says so (issue 17, item 4), with real clients.

KIP-848: ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION, as Kafka does with its new group
coordinator off; a `group.protocol=consumer` consumer fails at once. (Transactions are built:
tests/e2e/test_transactions.py; idempotent producers keep working.)
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.kafka_wire import call
from wherry.server.handlers.consumer_group_heartbeat import MESSAGE as KIP848_MESSAGE


def test_idempotent_producer_still_works(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    topic = f"t-{uuid.uuid4().hex[:10]}"
    delivered: list[object] = []
    p.produce(topic, b"v", on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(15) == 0
    assert delivered == [None]


def test_consumer_group_heartbeat_is_unsupported_version_on_the_wire(
    broker: BrokerProcess,
) -> None:
    r = call(broker.bootstrap, 68, 0, {
        "group_id": "g848", "member_id": "", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ["x"],
        "server_assignor": None, "topic_partitions": []})
    assert r.error_code == ErrorCode.unsupported_version
    assert r.error_message == KIP848_MESSAGE


def test_kip848_consumer_fails_at_once(broker: BrokerProcess) -> None:
    errors: list[KafkaError] = []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g848-client",
                  "group.protocol": "consumer", "log_level": 0,
                  "error_cb": errors.append})
    try:
        c.subscribe([f"t-{uuid.uuid4().hex[:10]}"])
        t0 = time.monotonic()
        fatal: KafkaError | None = None
        while fatal is None and time.monotonic() - t0 < 5:
            try:
                m = c.poll(0.2)
            except KafkaException as e:  # some versions raise the fatal error from poll
                fatal = e.args[0]
                break
            err = m.error() if m is not None else None
            if err is not None and (err.fatal() or err.code() == KafkaError._FATAL):
                fatal = err
            fatal = fatal or next(
                (e for e in errors if e.fatal() or e.code() == KafkaError._FATAL), None)
        elapsed = time.monotonic() - t0
        assert fatal is not None, "the KIP-848 consumer did not fail"
        assert elapsed < 2.0, elapsed
        assert "ConsumerGroupHeartbeat" in fatal.str() and "not supported" in fatal.str()
    finally:
        c.close()
