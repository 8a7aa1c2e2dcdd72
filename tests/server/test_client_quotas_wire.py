"""Client quotas through real brokers (a 2-broker `DevCluster` on one store): kafka-python's
DescribeClientQuotas / AlterClientQuotas messages, Kafka's errors, the store layout shared
with SCRAM credentials, the change notification reaching the other broker, and a throttled
client's answers carrying `throttle_time_ms` with its connection muted meanwhile."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from wherry.protocol.records import build_batch
from wherry.quotas.entities import DEFAULT, QuotaEntity
from wherry.security.scram_store import ScramUpsertion, alter_scram_credentials
from wherry.testing.cluster import DevCluster, wait_until

INVALID_REQUEST = int(ErrorCode.invalid_request)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(tmp_path / "c", brokers=2, base_port=0,
                   overrides={"group.initial.rebalance.delay.ms": "0"})
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def admin(cluster: DevCluster) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=cluster.address(0), request_timeout_ms=10_000)
    try:
        yield a
    finally:
        a.close()


def send(admin: KafkaAdminClient, request: Any) -> Any:
    async def call() -> Any:
        return await admin._manager.send(request)

    return admin._manager.run(call)


def alter(admin: KafkaAdminClient, entity: list[tuple[str, str | None]],
          ops: list[tuple[str, float, bool]], validate_only: bool = False) -> Any:
    resp = send(admin, AlterClientQuotasRequest(entries=[(entity, ops)],
                                                validate_only=validate_only))
    (entry,) = resp.entries
    return entry


def describe(admin: KafkaAdminClient, components: list[tuple[str, int, str | None]],
             strict: bool = False) -> Any:
    return send(admin, DescribeClientQuotasRequest(components=components, strict=strict))


def found(resp: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert resp.error_code == 0, resp
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values}
        for entry in resp.entries
    }


def node(cluster: DevCluster, path: str) -> dict[str, Any]:
    store = cluster.broker(0).store
    data, _ = cluster.run(store.get(path))
    return dict(json.loads(data))


def test_alter_and_describe_with_kafka_python(cluster: DevCluster,
                                              admin: KafkaAdminClient) -> None:
    # A SCRAM credential first: the quotas share its node and must leave it alone.
    scram = ScramUpsertion("alice", 1, 4096, b"salt", b"\x01" * 32)
    cluster.run(alter_scram_credentials(cluster.broker(0).store, [scram], []))
    for entity, ops in [
        ([("user", "alice")], [("producer_byte_rate", 1024.0, False),
                               ("request_percentage", 12.5, False)]),
        ([("client-id", "app")], [("consumer_byte_rate", 2048.0, False)]),
        ([("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 4096.0, False)]),
        ([("user", None)], [("producer_byte_rate", 8192.0, False)]),
        ([("client-id", None)], [("consumer_byte_rate", 100.0, False)]),
        ([("user", None), ("client-id", None)], [("request_percentage", 50.0, False)]),
    ]:
        entry = alter(admin, entity, ops)
        assert entry.error_code == 0, entry

    # Kafka's ZooKeeper layout; the user's SCRAM credential is still there.
    alice = node(cluster, "/config/users/alice")
    assert alice["config"]["producer_byte_rate"] == "1024"
    assert alice["config"]["request_percentage"] == "12.5"
    assert "SCRAM-SHA-256" in alice["config"]
    assert node(cluster, "/config/users/alice/clients/app")["config"] == {
        "producer_byte_rate": "4096"}
    assert node(cluster, "/config/clients/app")["config"] == {"consumer_byte_rate": "2048"}
    assert node(cluster, "/config/users/<default>")["config"] == {"producer_byte_rate": "8192"}
    assert node(cluster, "/config/users/<default>/clients/<default>")["config"] == {
        "request_percentage": "50.0"}  # a double as Java writes it
    assert node(cluster, "/config/clients/<default>")["config"] == {"consumer_byte_rate": "100"}

    everything = found(describe(admin, []))
    assert everything[(("user", "alice"),)] == {"producer_byte_rate": 1024.0,
                                               "request_percentage": 12.5}
    assert everything[(("client-id", "app"), ("user", "alice"))] == {
        "producer_byte_rate": 4096.0}
    assert len(everything) == 6
    # An exact user, strict: only the user entity; not strict: its clients too.
    assert set(found(describe(admin, [("user", 0, "alice")], strict=True))) == {
        (("user", "alice"),)}
    assert set(found(describe(admin, [("user", 0, "alice")]))) == {
        (("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    # The default user (match type 1), any client id (match type 2).
    assert set(found(describe(admin, [("user", 1, None)], strict=True))) == {
        (("user", None),)}
    assert set(found(describe(admin, [("client-id", 2, None)], strict=True))) == {
        (("client-id", "app"),), (("client-id", None),)}

    # The other broker applied every change from its notification.
    other = cluster.broker(1)
    wanted = {
        QuotaEntity("alice", None): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        QuotaEntity(None, "app"): {"consumer_byte_rate": 2048.0},
        QuotaEntity("alice", "app"): {"producer_byte_rate": 4096.0},
        QuotaEntity(DEFAULT, None): {"producer_byte_rate": 8192.0},
        QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 100.0},
        QuotaEntity(DEFAULT, DEFAULT): {"request_percentage": 50.0},
    }
    assert wait_until(lambda: cluster.call(lambda: dict(other.client_quotas.entities)) == wanted)
    assert cluster.call(lambda: other.client_quotas.produce.bound("alice", "app")) == 4096.0
    assert cluster.call(lambda: other.client_quotas.produce.bound("bob", "x")) == 8192.0
    assert cluster.call(lambda: other.client_quotas.fetch.bound("bob", "x")) == 100.0

    # Removal: the key goes, the entity leaves the description, SCRAM stays.
    assert alter(admin, [("user", "alice")], [("producer_byte_rate", 0.0, True),
                                              ("request_percentage", 0.0, True)]).error_code == 0
    assert (("user", "alice"),) not in found(describe(admin, []))
    assert "SCRAM-SHA-256" in node(cluster, "/config/users/alice")["config"]
    assert wait_until(lambda: QuotaEntity("alice", None) not in cluster.call(
        lambda: dict(other.client_quotas.entities)))


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ([("client-id", "a")], [("bogus_rate", 1.0, False)], "Invalid configuration key bogus_rate"),
    ([("client-id", "a")], [("producer_byte_rate", 1.5, False)],
     "Configuration producer_byte_rate must be a Long value"),
    ([], [("producer_byte_rate", 1.0, False)], "Invalid empty client quota entity"),
    ([("user", "")], [("producer_byte_rate", 1.0, False)], "Empty user not supported"),
    ([("group", "g")], [("producer_byte_rate", 1.0, False)],
     "Unhandled client quota entity type: group"),
    ([("ip", "1.2.3.4"), ("user", "u")], [("connection_creation_rate", 1.0, False)],
     "Invalid quota entity combination, IP entity should not be used with user/client ID "
     "entity."),
])
def test_alter_errors(admin: KafkaAdminClient, entity: list[tuple[str, str | None]],
                      ops: list[tuple[str, float, bool]], message: str) -> None:
    entry = alter(admin, entity, ops)
    assert (entry.error_code, entry.error_message) == (INVALID_REQUEST, message)


def test_validate_only_writes_nothing(cluster: DevCluster, admin: KafkaAdminClient) -> None:
    assert alter(admin, [("client-id", "v")], [("producer_byte_rate", 5.0, False)],
                 validate_only=True).error_code == 0
    assert found(describe(admin, [])) == {}
    assert cluster.run(cluster.broker(0).store.exists("/config/clients/v")) is None


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("user", 2, None), ("user", 0, "x")], INVALID_REQUEST,
     "Duplicate user filter component entity type"),
    ([("client-id", 7, None)], INVALID_REQUEST, "Unexpected match type: 7"),
    ([("", 2, None)], INVALID_REQUEST, "Unexpected empty filter component entity type"),
    ([("group", 2, None)], int(ErrorCode.unsupported_version),
     "Custom entity type 'group' not supported"),
])
def test_describe_errors(admin: KafkaAdminClient, components: list[tuple[str, int, str | None]],
                         code: int, message: str) -> None:
    resp = describe(admin, components)
    assert (resp.error_code, resp.error_message) == (code, message)


def _create_topic(cluster: DevCluster, topic: str) -> None:
    resp = kafka_wire.call(cluster.address(0), 19, 5, {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout": 10_000, "validate_only": False})
    assert resp.topics[0].error_code == 0
    cluster.wait_for_topic(topic, 1)


def _leader_address(cluster: DevCluster, topic: str) -> str:
    return cluster.address(cluster.metadata(0, [topic]).leaders(topic)[0])


def _request(sock: socket.socket, api_key: int, version: int, body: dict[str, Any],
             client_id: str, correlation_id: int = 1) -> Any:
    sock.sendall(kafka_wire.encode_request(api_key, version, body, correlation_id, client_id))
    return kafka_wire.read_response(sock, api_key, version)


def test_throttled_producer_is_answered_then_muted(cluster: DevCluster,
                                                   admin: KafkaAdminClient) -> None:
    """20 KB against 10 KB/s: answered at once with ~1 s of throttle, and the next request
    on that connection waits that long; another client id is not slowed."""
    topic = "quota-produce"
    _create_topic(cluster, topic)
    assert alter(admin, [("client-id", "tiny")],
                 [("producer_byte_rate", 10_000.0, False)]).error_code == 0
    assert wait_until(lambda: all(cluster.call(
        lambda b=b: cluster.broker(b).client_quotas.produce.enabled) for b in (0, 1)))
    address = _leader_address(cluster, topic)
    records = build_batch([(None, b"x" * 20_000)])
    with kafka_wire.connect(address) as slow, kafka_wire.connect(address) as free:
        started = time.monotonic()
        resp = _request(slow, 0, 9, kafka_wire.produce_body(topic, records), "tiny")
        assert time.monotonic() - started < 0.8  # answered at once (KIP-219)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == 0
        throttle_ms = resp.throttle_time.total_seconds() * 1000
        assert 500 <= throttle_ms <= 1500, throttle_ms
        # The muted connection: its next request waits for the throttle.
        sent = time.monotonic()
        meta = _request(slow, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False}, "tiny", 2)
        waited_ms = (time.monotonic() - sent) * 1000
        assert meta.brokers
        assert waited_ms >= throttle_ms - 150, (waited_ms, throttle_ms)
        # Another client id on the same broker: never throttled.
        for i in range(3):
            t0 = time.monotonic()
            other = _request(free, 0, 9, kafka_wire.produce_body(topic, records), "free", i)
            assert other.throttle_time.total_seconds() == 0
            assert time.monotonic() - t0 < 0.8


def test_throttled_consumer_gets_records_once_then_none(cluster: DevCluster,
                                                        admin: KafkaAdminClient) -> None:
    """A fetch that takes a client over its quota carries its records and the throttle; one
    sent while still over it (from a second connection, which no mute holds) carries none."""
    topic = "quota-fetch"
    _create_topic(cluster, topic)
    address = _leader_address(cluster, topic)
    with kafka_wire.connect(address) as sock:
        resp = _request(sock, 0, 9, kafka_wire.produce_body(
            topic, build_batch([(None, b"y" * 20_000)])), "writer")
        assert resp.responses[0].partition_responses[0].error_code == 0
    assert alter(admin, [("client-id", "reader")],
                 [("consumer_byte_rate", 10_000.0, False)]).error_code == 0
    assert wait_until(lambda: all(cluster.call(
        lambda b=b: cluster.broker(b).client_quotas.fetch.enabled) for b in (0, 1)))
    with kafka_wire.connect(address) as first, kafka_wire.connect(address) as second:
        resp = _request(first, 1, 12, kafka_wire.fetch_body(topic), "reader")
        assert resp.throttle_time.total_seconds() > 0.5
        assert len(resp.responses[0].partitions[0].records) > 20_000
        again = _request(second, 1, 12, kafka_wire.fetch_body(topic), "reader")
        assert again.throttle_time.total_seconds() > 0.5
        assert again.responses == ()


def test_quota_metrics(tmp_path: Path) -> None:
    """`/metrics` has Kafka's per-client quota metrics for a throttled producer."""
    from tests.observability.scrape import value

    with DevCluster(tmp_path / "m", brokers=1, base_port=0, http_base_port=0) as c:
        c.wait_for_controller()
        url = c.http_url(0)
        assert url is not None
        _create_topic(c, "quota-metrics")
        a = KafkaAdminClient(bootstrap_servers=c.address(0), request_timeout_ms=10_000)
        try:
            assert alter(a, [("client-id", "metered")],
                         [("producer_byte_rate", 10_000.0, False)]).error_code == 0
        finally:
            a.close()
        assert wait_until(lambda: c.call(lambda: c.broker(0).client_quotas.produce.enabled))
        with kafka_wire.connect(c.address(0)) as sock:
            resp = _request(sock, 0, 9, kafka_wire.produce_body(
                "quota-metrics", build_batch([(None, b"m" * 20_000)])), "metered")
        throttle = resp.throttle_time.total_seconds() * 1000
        assert throttle > 0
        labels = {"user": "", "client_id": "metered"}
        assert value(url, "kafka_server_produce_throttle_time", **labels) == throttle
        assert value(url, "kafka_server_produce_byte_rate", **labels) > 10_000


def test_request_percentage_throttles_any_request(cluster: DevCluster,
                                                  admin: KafkaAdminClient) -> None:
    """Handler time against a tiny request_percentage: a Metadata request is throttled, at
    most one quota window (1 s); other client ids are not."""
    assert alter(admin, [("client-id", "busy")],
                 [("request_percentage", 0.0001, False)]).error_code == 0
    assert wait_until(lambda: cluster.call(
        lambda: cluster.broker(0).client_quotas.request.enabled))
    body = {"topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}
    with kafka_wire.connect(cluster.address(0)) as busy, \
            kafka_wire.connect(cluster.address(0)) as idle:
        resp = _request(busy, 3, 12, body, "busy")
        assert resp.throttle_time.total_seconds() * 1000 == 1000  # capped at the window
        assert _request(idle, 3, 12, body, "idle").throttle_time.total_seconds() == 0


def test_names_are_sanitized_in_the_store(cluster: DevCluster, admin: KafkaAdminClient) -> None:
    user, client = "CN=a b,O=x", "c/d*"
    assert alter(admin, [("user", user), ("client-id", client)],
                 [("consumer_byte_rate", 7.0, False)]).error_code == 0
    store = cluster.broker(0).store
    assert cluster.run(store.get_children("/config/users")) == ["CN%3Da%20b%2CO%3Dx"]
    assert cluster.run(store.get_children("/config/users/CN%3Da%20b%2CO%3Dx/clients")) == [
        "c%2Fd%2A"]
    assert found(describe(admin, [("user", 0, user)])) == {
        (("client-id", client), ("user", user)): {"consumer_byte_rate": 7.0}}
    other = cluster.broker(1)
    assert wait_until(lambda: cluster.call(
        lambda: other.client_quotas.fetch.bound(user, client)) == 7.0)


def test_request_time_leaves_out_a_long_poll(cluster: DevCluster,
                                             admin: KafkaAdminClient) -> None:
    """A Fetch waiting 500 ms in the purgatory for records that never come is not busy
    meanwhile: a 5 % request quota does not throttle it."""
    topic = "quota-poll"
    _create_topic(cluster, topic)
    assert alter(admin, [("client-id", "poller")],
                 [("request_percentage", 5.0, False)]).error_code == 0
    assert wait_until(lambda: all(cluster.call(
        lambda b=b: cluster.broker(b).client_quotas.request.enabled) for b in (0, 1)))
    body = {**kafka_wire.fetch_body(topic), "max_wait": 500, "min_bytes": 1}
    with kafka_wire.connect(_leader_address(cluster, topic)) as sock:
        for i in range(3):
            started = time.monotonic()
            resp = _request(sock, 1, 12, body, "poller", i)
            assert time.monotonic() - started >= 0.45  # it did wait
            assert resp.throttle_time.total_seconds() == 0


def test_old_produce_versions_get_their_answer_late(cluster: DevCluster,
                                                    admin: KafkaAdminClient) -> None:
    """Produce v5 predates KIP-219 (its client does not throttle itself): Kafka holds the
    throttled answer back for the throttle time."""
    topic = "quota-old"
    _create_topic(cluster, topic)
    assert alter(admin, [("client-id", "old")],
                 [("producer_byte_rate", 10_000.0, False)]).error_code == 0
    assert wait_until(lambda: all(cluster.call(
        lambda b=b: cluster.broker(b).client_quotas.produce.enabled) for b in (0, 1)))
    records = build_batch([(None, b"o" * 20_000)])
    with kafka_wire.connect(_leader_address(cluster, topic)) as sock:
        started = time.monotonic()
        resp = _request(sock, 0, 5, kafka_wire.produce_body(topic, records), "old")
        waited_ms = (time.monotonic() - started) * 1000
    throttle_ms = resp.throttle_time.total_seconds() * 1000
    assert resp.responses[0].partition_responses[0].error_code == 0
    assert throttle_ms >= 500
    assert waited_ms >= throttle_ms - 50, (waited_ms, throttle_ms)
