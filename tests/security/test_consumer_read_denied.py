"""A consumer allowed to Describe a topic but denied Read on it (the ACL authorizer with
`allow.everyone.if.no.acl.found=true`, SASL PLAIN users): a real confluent-kafka consumer
that subscribes hears TOPIC_AUTHORIZATION_FAILED once per partition, gets no record, and
does not make the broker re-ask (and log the denial) in a tight loop."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import admin as ck
from confluent_kafka.admin import AclBinding, AclPermissionType, AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.security.wire_principals import (
    PASSWORDS,
    SECURED_OVERRIDES,
    Login,
    WirePrincipals,
    delete_acls,
    override_args,
)

TOPIC, PARTITIONS = "read-denied", 3


def _login(user: str) -> dict[str, object]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user], "log_level": 0}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "b",
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        overrides=override_args({**SECURED_OVERRIDES, "allow.everyone.if.no.acl.found": "true"}),
    ).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.log_text()[-3000:]


def _prepare(address: str) -> None:
    """The topic with records in every partition, then Describe allowed and Read denied to
    every user (`User:*`), as librdkafka's consumer authorization test sets it up."""
    admin = AdminClient({"bootstrap.servers": address, **_login("admin")})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
    producer = Producer({"bootstrap.servers": address, **_login("admin")})
    for i in range(300):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    bindings = [
        AclBinding(ck.ResourceType.TOPIC, TOPIC, ck.ResourcePatternType.LITERAL, "User:*", "*",
                   ck.AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        AclBinding(ck.ResourceType.TOPIC, TOPIC, ck.ResourcePatternType.LITERAL, "User:*", "*",
                   ck.AclOperation.READ, AclPermissionType.DENY),
    ]
    for fut in admin.create_acls(bindings, request_timeout=10).values():
        fut.result(15)


def _denials(log: str) -> int:
    resource = f"on resource = Topic:LITERAL:{TOPIC}"
    return sum(1 for line in log.splitlines()
               if "Denied Operation = Read" in line and f"{resource} " in f"{line} ")


def test_consumer_denied_read_hears_it_once_per_partition(broker: BrokerProcess) -> None:
    address = broker.bootstrap
    _prepare(address)
    time.sleep(1.0)  # as the librdkafka test lets the ACLs settle
    consumer = Consumer({
        "bootstrap.servers": address, **_login("bob"), "group.id": "read-denied-group",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    })
    start = len(broker.output)
    errors: list[KafkaError] = []
    records = 0
    try:
        consumer.subscribe([TOPIC])
        first: float | None = None
        began = time.monotonic()
        deadline = began + 40
        # Consume until the errors came and then some seconds more (librdkafka's test: 15 s).
        while time.monotonic() < deadline:
            try:
                msg = consumer.poll(0.5)
            except KafkaException as e:
                errors.append(e.args[0])
                continue
            if msg is None:
                pass
            elif msg.error() is not None:
                errors.append(msg.error())
            else:
                records += 1
            if first is None and errors:
                first = time.monotonic()
            if first is not None and time.monotonic() - first > 8:
                break
    finally:
        consumer.close()
    codes = [e.code() for e in errors]
    assert records == 0
    assert codes == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * PARTITIONS, errors
    assert first is not None and first - began < 30
    log = "".join(broker.output[start:])
    # The client backs off (a second and more between fetches of a refused partition), and
    # repeated identical denials are logged once in a while with the number left out.
    assert 1 <= _denials(log) <= 5, _denials(log)


def test_a_fetch_session_keeps_answering_the_refusal(broker: BrokerProcess) -> None:
    """Fetch v12 in a session (as Java-protocol clients fetch): the refused partitions stay
    in the session and every incremental answer carries TOPIC_AUTHORIZATION_FAILED for
    them, as Kafka's; once Read is allowed they are read."""
    address = broker.bootstrap
    _prepare(address)
    wire = WirePrincipals()
    bob = Login.of("bob")
    try:
        def fetch(session_id: int, epoch: int, offsets: dict[int, int]) -> Any:
            return wire.call(address, bob, 1, 12, {
                "replica_id": -1, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": TOPIC, "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20,
                     "current_leader_epoch": -1, "log_start_offset": -1,
                     "last_fetched_epoch": -1} for p, o in offsets.items()]}] if offsets else [],
                "forgotten_topics_data": [], "rack_id": ""})

        def errors(resp: Any) -> dict[int, int]:
            return {int(p.partition_index): int(p.error_code)
                    for t in resp.responses for p in t.partitions}

        denied = {p: ErrorCode.topic_authorization_failed for p in range(PARTITIONS)}
        first = fetch(0, 0, dict.fromkeys(range(PARTITIONS), 0))
        assert first.error_code == ErrorCode.none and first.session_id != 0
        assert errors(first) == denied
        sid = first.session_id
        for epoch in (1, 2):  # named or not, the refusal is answered again
            assert errors(fetch(sid, epoch, {0: 0} if epoch == 1 else {})) == denied
        # Read allowed again (no ACL left on the topic: allowed to everyone): the session's
        # partitions are read.
        assert delete_acls(wire, address) == 2
        got = fetch(sid, 3, {})
        assert errors(got) == dict.fromkeys(range(PARTITIONS), ErrorCode.none)
        assert all(p.records for t in got.responses for p in t.partitions)
    finally:
        wire.close()
