"""The Kafka clients the connector keeps between calls in one process (no Spark needed): the
driver's AdminClient serves every lookup of the same options; a range reader's client (its own
Fetch connections, or a librdkafka consumer when a setting asks for librdkafka) is kept for the
next range, reads a partition added after it learned the cluster, and is not kept after a
failed read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from wherry.spark import client_cache
from wherry.spark.kafka_access import ClusterView, ConnectorError, read_range
from wherry.spark.options import SourceOptions
from wherry.spark.planning import OffsetRange


def produce(bs: str, topic: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, str(i).encode(), partition=partition)
    assert p.flush(30) == 0


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    """Each test starts with no kept client: others of this process (its worker) may have
    filled the cache up to its bound."""
    client_cache.close_idle()
    yield
    client_cache.close_idle()


def values(opts: SourceOptions, rng: OffsetRange) -> list[bytes]:
    return [v for b in read_range(opts, rng) for v in b.column("value").to_pylist()]


@pytest.mark.parametrize(
    "reader",
    [{}, {"kafka.socket.keepalive.enable": "true"}],  # a setting only librdkafka takes
    ids=["own-fetch", "librdkafka"],
)
def test_kept_clients_serve_the_next_calls_and_learn_new_partitions(
    broker_bootstrap: str, reader: dict[str, str]
) -> None:
    bs = broker_bootstrap
    t = f"cache-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
    produce(bs, t, 0, 100)
    opts = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": bs,
            "subscribe": t,
            "kafka.client.id": uuid.uuid4().hex,
            **reader,
        },
        streaming=False,
    )
    view = ClusterView(opts)
    assert view._admin() is ClusterView(opts)._admin()  # one client for the same options
    assert view.latest([(t, 0)]) == {(t, 0): 100}

    _, idle = client_cache.kept()
    assert values(opts, OffsetRange(t, 0, 0, 40)) == [str(i).encode() for i in range(40)]
    assert client_cache.kept()[1] == idle + 1  # kept for the next range
    assert values(opts, OffsetRange(t, 0, 40, 100)) == [str(i).encode() for i in range(40, 100)]
    assert client_cache.kept()[1] == idle + 1  # the same one, given back again

    # A partition added after the kept consumer learned the cluster.
    admin.create_partitions([NewPartitions(t, 2)])[t].result(30)
    produce(bs, t, 1, 10)
    assert view.latest(view.partitions(require_topics=True)) == {(t, 0): 100, (t, 1): 10}
    assert values(opts, OffsetRange(t, 1, 0, 10)) == [str(i).encode() for i in range(10)]

    # A failed read (a partition that does not exist) closes its consumer, not kept.
    with pytest.raises(ConnectorError):
        values(opts, OffsetRange(t, 7, 0, 10))
    assert client_cache.kept()[1] == idle
