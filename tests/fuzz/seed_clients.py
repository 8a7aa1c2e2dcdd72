"""Short sessions of real clients whose frames seed the fuzzer (`seed.py` records them):
each takes the PLAINTEXT and SASL_PLAINTEXT bootstrap addresses and is bounded in time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC = "fuzz-seed"


def confluent_admin(plain: str, sasl: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": plain})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("fuzz-other", 1, 1)]).values():
        f.result(30)
    admin.list_topics(timeout=10)
    for f in admin.describe_configs([ConfigResource("topic", TOPIC)]).values():
        f.result(10)
    for f in admin.create_partitions([NewPartitions("fuzz-other", 2)]).values():
        f.result(30)
    upserts = [
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(m, 4096), b"carol-secret")
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(30)
    admin.list_consumer_groups().result(10)
    for f in admin.delete_topics(["fuzz-other"]).values():
        f.result(30)


def confluent_produce(plain: str, sasl: str) -> None:
    from confluent_kafka import Producer

    for codec in CODECS:
        p = Producer({"bootstrap.servers": plain, "compression.type": codec, "linger.ms": 5,
                      "enable.idempotence": codec == "zstd"})
        for i in range(5):
            p.produce(TOPIC, key=b"k%d" % i, value=(b"value %d " % i) * 8,
                      headers=[("h", b"v")])
        assert p.flush(30) == 0
    t = Producer({"bootstrap.servers": plain, "transactional.id": "fuzz-txn"})
    t.init_transactions(30)
    t.begin_transaction()
    t.produce(TOPIC, b"in a transaction")
    t.commit_transaction(30)


def confluent_consume(plain: str, sasl: str) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": plain, "group.id": "fuzz-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.subscribe([TOPIC])
    got = 0
    for _ in range(40):
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
            if got >= 5:
                break
    c.commit(asynchronous=False)
    c.close()


def confluent_sasl(plain: str, sasl: str) -> None:
    from confluent_kafka import Producer

    for mech, user, pw in (("PLAIN", "alice", "alice-secret"),
                           ("SCRAM-SHA-256", "carol", "carol-secret"),
                           ("SCRAM-SHA-512", "carol", "carol-secret"),
                           ("PLAIN", "alice", "wrong")):
        p = Producer({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": mech, "sasl.username": user, "sasl.password": pw,
                      "message.timeout.ms": 3000, "log_level": 0})
        p.produce(TOPIC, b"sasl")
        p.flush(5)


def kafka_python(plain: str, sasl: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    for codec in ("gzip", "snappy", "lz4", "zstd", None):
        p = KafkaProducer(bootstrap_servers=plain, compression_type=codec,
                          request_timeout_ms=10000)
        for i in range(3):
            p.send(TOPIC, key=b"kp%d" % i, value=b"kafka-python %d" % i)
        p.flush(10)
        p.close(5)
    c = KafkaConsumer(TOPIC, bootstrap_servers=plain, group_id="fuzz-kp",
                      auto_offset_reset="earliest", consumer_timeout_ms=3000)
    for _ in c:
        pass
    c.close()
    a = KafkaAdminClient(bootstrap_servers=plain)
    a.list_topics()
    a.describe_consumer_groups(["fuzz-kp"])
    a.close()
    s = KafkaProducer(bootstrap_servers=sasl, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="carol",
                      sasl_plain_password="carol-secret", request_timeout_ms=10000)
    s.send(TOPIC, b"kafka-python sasl")
    s.flush(10)
    s.close(5)


def aiokafka_session(plain: str, sasl: str) -> None:
    async def run() -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=plain, compression_type="gzip")
        await p.start()
        try:
            await p.send_and_wait(TOPIC, b"aiokafka", key=b"ak")
        finally:
            await p.stop()
        c = AIOKafkaConsumer(TOPIC, bootstrap_servers=plain, group_id="fuzz-ak",
                             auto_offset_reset="earliest")
        await c.start()
        try:
            await asyncio.wait_for(c.getone(), 10)
            await c.commit()
        finally:
            await c.stop()
        s = AIOKafkaProducer(bootstrap_servers=sasl, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password="alice-secret")
        await s.start()
        try:
            await s.send_and_wait(TOPIC, b"aiokafka sasl")
        finally:
            await s.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


SESSIONS: list[tuple[str, Callable[[str, str], None]]] = [
    ("confluent-kafka admin", confluent_admin),
    ("confluent-kafka produce", confluent_produce),
    ("confluent-kafka consume", confluent_consume),
    ("confluent-kafka SASL", confluent_sasl),
    ("kafka-python", kafka_python),
    ("aiokafka", aiokafka_session),
]
