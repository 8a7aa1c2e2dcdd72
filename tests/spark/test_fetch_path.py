"""The source's two ways of reading a range from a real broker give the same Arrow rows: Fetch
requests of its own decoded into columns (`fetch_client`, `arrow_records`: PLAINTEXT and the
client settings it honours) and a librdkafka consumer (any other ``kafka.*`` setting). Every
codec, null and empty keys and values, headers, timestamps, ranges cut inside batches, and
read_committed over committed and aborted transactions. No Spark needed."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.spark.fetch_client import raw_fetch_possible
from wherry.spark.kafka_access import ClusterView, read_range
from wherry.spark.options import SourceOptions
from wherry.spark.planning import OffsetRange

LIBRDKAFKA = {"kafka.socket.keepalive.enable": "true"}
"""A librdkafka setting the own Fetch client does not take: the range goes to librdkafka."""


def topic(bs: str, partitions: int = 1) -> str:
    name = f"fetchpath-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def both(bs: str, t: str, rng: OffsetRange, **extra: str) -> tuple[pa.Table, pa.Table]:
    base: dict[str, Any] = {"kafka.bootstrap.servers": bs, "subscribe": t, **extra}
    own = SourceOptions.parse(base, streaming=False)
    rdk = SourceOptions.parse({**base, **LIBRDKAFKA}, streaming=False)
    assert raw_fetch_possible(own.kafka) and not raw_fetch_possible(rdk.kafka)
    return (
        pa.Table.from_batches(list(read_range(own, rng))),
        pa.Table.from_batches(list(read_range(rdk, rng))),
    )


def test_settings_choose_the_reader() -> None:
    assert raw_fetch_possible({})
    assert raw_fetch_possible({"isolation.level": "read_committed", "client.id": "x"})
    assert raw_fetch_possible({"security.protocol": "PLAINTEXT"})
    assert not raw_fetch_possible({"security.protocol": "SASL_SSL"})
    assert not raw_fetch_possible({"ssl.ca.location": "/x"})
    assert not raw_fetch_possible({"client.rack": "r1"})


def test_both_readers_give_the_same_rows_for_every_codec_and_shape(broker_bootstrap: str) -> None:
    bs = broker_bootstrap
    t = topic(bs)
    now = int(time.time() * 1000)  # recent: the session broker enforces retention by time
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "compression.type": codec})
        for i in range(1500):
            key = None if i % 7 == 0 else (b"" if i % 11 == 0 else b"k%d" % i)
            value = None if i % 13 == 0 else (b"" if i % 17 == 0 else b"v" * (i % 50))
            headers = [("h", b"x"), ("n", None)] if i % 5 == 0 else None
            p.produce(t, value, key, headers=headers, timestamp=now - i % 97)
            if i % 400 == 0:
                p.flush(30)  # several batches per codec
        assert p.flush(30) == 0
    for headers in ("false", "true"):
        for rng in (OffsetRange(t, 0, 0, 7500), OffsetRange(t, 0, 123, 4567)):
            own, rdk = both(bs, t, rng, includeHeaders=headers)
            assert own.num_rows == rng.end - rng.start
            assert own.schema == rdk.schema
            assert own.equals(rdk), (headers, rng)


def test_both_readers_skip_aborted_transactions_under_read_committed(
    broker_bootstrap: str,
) -> None:
    bs = broker_bootstrap
    t = topic(bs)
    plain = Producer({"bootstrap.servers": bs})
    txp = Producer({"bootstrap.servers": bs, "transactional.id": uuid.uuid4().hex})
    txp.init_transactions(30)
    committed: list[bytes] = []
    for round_ in range(6):
        txp.begin_transaction()
        values = [b"r%d-%d" % (round_, i) for i in range(50)]
        for v in values:
            txp.produce(t, v)
        plain.produce(t, b"plain-%d" % round_)
        plain.flush(30)
        committed.append(b"plain-%d" % round_)
        assert txp.flush(30) == 0
        if round_ % 2:
            txp.abort_transaction(30)
        else:
            txp.commit_transaction(30)
            committed.extend(values)
    end = ClusterView(
        SourceOptions.parse({"kafka.bootstrap.servers": bs, "subscribe": t}, streaming=False)
    ).latest([(t, 0)])[(t, 0)]
    rng = OffsetRange(t, 0, 0, end)
    own, rdk = both(bs, t, rng, **{"kafka.isolation.level": "read_committed"})
    assert own.equals(rdk)
    assert sorted(own.column("value").to_pylist()) == sorted(committed)
    # read_uncommitted: the aborted records too, never the transaction markers.
    own, rdk = both(bs, t, rng)
    assert own.equals(rdk)
    assert own.num_rows == 6 * 51


def test_an_unknown_partition_fails_the_read_at_once(broker_bootstrap: str) -> None:
    from wherry.spark.kafka_access import ConnectorError

    t = topic(broker_bootstrap)
    opts = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": broker_bootstrap,
            "subscribe": t,
            "kafkaConsumer.pollTimeoutMs": "60000",
        },
        streaming=False,
    )
    with pytest.raises(ConnectorError, match="no partition"):
        list(read_range(opts, OffsetRange(t, 5, 0, 10)))
