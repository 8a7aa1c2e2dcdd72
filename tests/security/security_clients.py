"""Produce/consume round trips with the three client libraries over any security protocol,
for the security tests (real clients, real sockets)."""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.security.tls_material import ClientCert


@dataclass(frozen=True)
class ClientAuth:
    protocol: str = "PLAINTEXT"
    ca: Path | None = None
    cert: ClientCert | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def confluent_conf(bootstrap: str, auth: ClientAuth) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": auth.protocol}
    if auth.tls:
        assert auth.ca is not None
        conf["ssl.ca.location"] = str(auth.ca)
        if auth.cert is not None:
            conf["ssl.certificate.location"] = str(auth.cert.cert)
            conf["ssl.key.location"] = str(auth.cert.key)
    if auth.sasl:
        conf.update(
            {
                "sasl.mechanism": auth.mechanism,
                "sasl.username": auth.username,
                "sasl.password": auth.password,
            }
        )
    return conf


def _ssl_context(auth: ClientAuth) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(auth.ca))
    if auth.cert is not None:
        ctx.load_cert_chain(str(auth.cert.cert), str(auth.cert.key))
    return ctx


def kafka_python_kwargs(auth: ClientAuth) -> dict[str, Any]:
    kw: dict[str, Any] = {"security_protocol": auth.protocol}
    if auth.tls:
        kw["ssl_context"] = _ssl_context(auth)
    if auth.sasl:
        kw.update(
            sasl_mechanism=auth.mechanism,
            sasl_plain_username=auth.username,
            sasl_plain_password=auth.password,
        )
    return kw


def create_topic(
    bootstrap: str, auth: ClientAuth, topic: str, partitions: int = 1, replication_factor: int = 1
) -> None:
    admin = AdminClient(confluent_conf(bootstrap, auth))
    futures = admin.create_topics([NewTopic(topic, partitions, replication_factor)])
    futures[topic].result(30)


def roundtrip_confluent(
    bootstrap: str, auth: ClientAuth, topic: str, n: int = 20, acks: str = "all"
) -> list[bytes]:
    conf = confluent_conf(bootstrap, auth)
    producer = Producer({**conf, "acks": acks, "enable.idempotence": True})
    errors: list[Any] = []
    for i in range(n):
        producer.produce(
            topic,
            f"confluent-{i}".encode(),
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert not errors, errors
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    return got


def roundtrip_kafka_python(
    bootstrap: str, auth: ClientAuth, topic: str, n: int = 20
) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    kw = kafka_python_kwargs(auth)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **kw)
    try:
        for i in range(n):
            producer.send(topic, f"kafka-python-{i}".encode()).get(30)
    finally:
        producer.close(10)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4()}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **kw,
    )
    got: list[bytes] = []
    try:
        for m in consumer:
            got.append(m.value)
            if len(got) >= n:
                break
    finally:
        consumer.close()
    return got


def roundtrip_aiokafka(bootstrap: str, auth: ClientAuth, topic: str, n: int = 20) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    kw = kafka_python_kwargs(auth)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **kw)
        await producer.start()
        try:
            for i in range(n):
                await producer.send_and_wait(topic, f"aiokafka-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"g-{uuid.uuid4()}",
            auto_offset_reset="earliest",
            **kw,
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in consumer:
                    assert m.value is not None
                    got.append(m.value)
                    if len(got) >= n:
                        break
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


ROUNDTRIPS = {
    "confluent-kafka": roundtrip_confluent,
    "kafka-python": roundtrip_kafka_python,
    "aiokafka": roundtrip_aiokafka,
}
