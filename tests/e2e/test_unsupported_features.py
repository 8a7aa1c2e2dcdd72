"""What is not built answers at once and says so (issue 17, item 4), with real clients.

Transactions: FindCoordinator for a transactional id is refused with a message saying
transactions are not supported; a transactional producer fails in well under 2 s instead of
timing out. KIP-848: ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION, as Kafka does with its
new group coordinator off; a `group.protocol=consumer` consumer fails at once.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.kafka_wire import call
from wherry.server.handlers.consumer_group_heartbeat import MESSAGE as KIP848_MESSAGE
from wherry.server.handlers.find_coordinator import TRANSACTIONS_UNSUPPORTED


def test_find_coordinator_for_a_transactional_id_says_transactions_are_unsupported(
    broker: BrokerProcess,
) -> None:
    r = call(broker.bootstrap, 10, 4, {"key_type": 1, "coordinator_keys": ["tx-1"]})
    c = r.coordinators[0]
    assert c.error_code == ErrorCode.transactional_id_authorization_failed
    assert c.error_message == TRANSACTIONS_UNSUPPORTED
    assert "not supported" in TRANSACTIONS_UNSUPPORTED


def test_confluent_kafka_transactional_producer_fails_fast_and_clearly(
    broker: BrokerProcess,
) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-ck",
                  "log_level": 0})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as info:
        p.init_transactions(10)
    elapsed = time.monotonic() - t0
    err: KafkaError = info.value.args[0]
    assert elapsed < 2.0, elapsed
    assert err.fatal() and not err.retriable()
    assert "Transactions are not supported by wherry yet" in err.str()


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


def test_kafka_python_transactional_producer_fails_fast(broker: BrokerProcess) -> None:
    """kafka-python shows only the code (TransactionalIdAuthorizationFailedError, without the
    broker's message), but at once rather than after its timeout."""
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="tx-kp")
    try:
        t0 = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            p.init_transactions()
        assert time.monotonic() - t0 < 2.0
    finally:
        p.close(1)
