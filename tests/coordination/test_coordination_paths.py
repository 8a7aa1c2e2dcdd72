"""Node layout and JSON records (`wherry.coordination.paths`)."""

from __future__ import annotations

import json
import uuid

import pytest
from coord_helpers import StoreBackend, async_test

from wherry.coordination import paths
from wherry.coordination.paths import (
    BrokerRegistration,
    ControllerInfo,
    ListenerEndpoint,
    PartitionState,
    TopicAssignment,
)

TOPIC_ID = uuid.UUID("6a2f1f24-3c57-4a2e-9a63-3f0f0d4cb0c1")


def test_layout_helpers() -> None:
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.topic_path("orders") == "/brokers/topics/orders"
    assert paths.partition_state_path("orders", 7) == "/brokers/topics/orders/partitions/7/state"
    assert paths.topic_config_path("orders") == "/config/topics/orders"
    assert paths.broker_config_path(2) == "/config/brokers/2"
    assert paths.broker_config_path(None) == "/config/brokers/<default>"
    assert paths.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert (paths.CONTROLLER, paths.CONTROLLER_EPOCH) == ("/controller", "/controller_epoch")
    assert paths.CLUSTER_ID == "/cluster/id"
    for bad in ("", "a/b", ".", ".."):
        with pytest.raises(ValueError):
            paths.topic_path(bad)


def test_topic_id_text_forms() -> None:
    text = paths.format_topic_id(TOPIC_ID)
    assert len(text) == 22 and "=" not in text
    assert paths.parse_topic_id(text) == TOPIC_ID
    assert paths.parse_topic_id(str(TOPIC_ID)) == TOPIC_ID
    # Kafka prints Uuid(0, 1) as AAAAAAAAAAAAAAAAAAAAAQ
    assert paths.format_topic_id(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    with pytest.raises(ValueError):
        paths.parse_topic_id("not-a-uuid")


def test_topic_assignment_json() -> None:
    ta = TopicAssignment(TOPIC_ID, {1: [2, 3], 0: [1, 2]})
    obj = json.loads(ta.to_json())
    assert obj == {
        "version": 2,
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": paths.format_topic_id(TOPIC_ID),
    }
    assert TopicAssignment.from_json(ta.to_json()) == ta
    legacy = TopicAssignment.from_json(b'{"version":1,"partitions":{"0":[1]}}')
    assert legacy == TopicAssignment(uuid.UUID(int=0), {0: [1]})
    hex_form = f'{{"version":2,"partitions":{{"0":[1,2]}},"topic_id":"{TOPIC_ID}"}}'
    assert TopicAssignment.from_json(hex_form.encode()).topic_id == TOPIC_ID


def test_partition_state_json() -> None:
    ps = PartitionState(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
    assert ps.to_json() == (
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    )
    assert PartitionState.from_json(ps.to_json()) == ps
    kafka = b'{"controller_epoch":3,"leader":-1,"version":1,"leader_epoch":4,"isr":[2]}'
    assert PartitionState.from_json(kafka) == PartitionState(-1, 4, [2], 3)
    with pytest.raises(ValueError, match="leader_epoch"):
        PartitionState.from_json(b'{"leader":1,"isr":[],"controller_epoch":1}')
    with pytest.raises(ValueError):
        PartitionState.from_json(b"not json")


def test_broker_registration_json() -> None:
    reg = BrokerRegistration(broker_id=1, host="h1", port=9092, rack="r1", epoch=42)
    obj = json.loads(reg.to_json(timestamp_ms=1234))
    assert obj["version"] == 5
    assert (obj["host"], obj["port"], obj["rack"]) == ("h1", 9092, "r1")
    assert obj["endpoints"] == ["PLAINTEXT://h1:9092"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert obj["timestamp"] == "1234"
    assert BrokerRegistration.from_json(reg.to_json()) == reg
    assert "rack" not in json.loads(BrokerRegistration(2, "h", 1).to_json())

    # A registration written by Kafka itself (no id/epoch in the JSON, no PLAINTEXT listener).
    kafka = (
        b'{"listener_security_protocol_map":{"CLIENT":"SSL"},"endpoints":["CLIENT://h2:9093"],'
        b'"jmx_port":-1,"port":-1,"host":null,"timestamp":"1","version":5}'
    )
    client = ListenerEndpoint("CLIENT", "h2", 9093, "SSL")
    assert BrokerRegistration.from_json(kafka, broker_id=2) == BrokerRegistration(
        2, "h2", 9093, endpoints=(client,)
    )
    with pytest.raises(ValueError):
        BrokerRegistration.from_json(kafka)


def test_broker_registration_with_several_listeners() -> None:
    endpoints = (
        ListenerEndpoint("CLIENT", "h", 9093, "SASL_SSL"),
        ListenerEndpoint("REPLICATION", "h", 9094, "SSL"),
        ListenerEndpoint("PLAIN", "h", 9092, "PLAINTEXT"),
    )
    reg = BrokerRegistration(3, "h", 9093, endpoints=endpoints, epoch=7)
    obj = json.loads(reg.to_json())
    # Kafka's host/port fields are the PLAINTEXT endpoint's.
    assert (obj["host"], obj["port"]) == ("h", 9092)
    assert obj["endpoints"] == ["CLIENT://h:9093", "REPLICATION://h:9094", "PLAIN://h:9092"]
    assert obj["listener_security_protocol_map"] == {
        "CLIENT": "SASL_SSL",
        "REPLICATION": "SSL",
        "PLAIN": "PLAINTEXT",
    }
    back = BrokerRegistration.from_json(reg.to_json())
    assert back == reg
    assert back.address("REPLICATION") == ("h", 9094)
    assert back.address("MISSING") == ("h", 9093)


def test_controller_cluster_and_config_records() -> None:
    info = ControllerInfo(broker_id=3, timestamp_ms=99)
    assert json.loads(info.to_json()) == {"version": 1, "brokerid": 3, "timestamp": "99"}
    assert ControllerInfo.from_json(info.to_json()) == info
    assert paths.encode_controller_epoch(7) == b"7"
    assert paths.decode_controller_epoch(b"7") == 7
    with pytest.raises(ValueError):
        paths.decode_controller_epoch(b"x")
    assert json.loads(paths.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert paths.decode_cluster_id(paths.encode_cluster_id("abc")) == "abc"
    cfg = {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert json.loads(paths.encode_config(cfg)) == {"version": 1, "config": cfg}
    assert paths.decode_config(paths.encode_config(cfg)) == cfg
    assert paths.decode_config(b"") == {}


@async_test
async def test_ensure_persistent_paths(store_backend: StoreBackend) -> None:
    s = await store_backend.new_session()
    await paths.ensure_persistent_paths(s)
    await paths.ensure_persistent_paths(s)  # idempotent
    for p in paths.PERSISTENT_PATHS:
        stat = await s.exists(p)
        assert stat is not None and stat.ephemeral_owner == 0
    assert await s.get_children("/brokers") == ["ids", "seqid", "topics"]


@async_test
async def test_ensure_persistent_paths_creates_the_missing_ones(
    store_backend: StoreBackend,
) -> None:
    """Some containers exist (another broker, an older version): the others are created, in
    one transaction, and what existed is left as it was."""
    s = await store_backend.new_session()
    await s.create("/brokers/topics", b"kept", make_parents=True)
    await s.create("/cluster", b"")
    await paths.ensure_persistent_paths(s)
    for p in paths.PERSISTENT_PATHS:
        assert await s.exists(p) is not None, p
    data, _ = await s.get("/brokers/topics")
    assert data == b"kept"


@async_test
async def test_ensure_persistent_paths_with_a_first_cluster_id(
    store_backend: StoreBackend,
) -> None:
    """A first start's cluster id is created with the containers (one transaction); an id that
    exists already is kept, whether it was there before or another broker created it first."""
    s = await store_backend.new_session()
    await paths.ensure_persistent_paths(s, {paths.CLUSTER_ID: paths.encode_cluster_id("c-1")})
    data, _ = await s.get(paths.CLUSTER_ID)
    assert paths.decode_cluster_id(data) == "c-1"
    for p in paths.PERSISTENT_PATHS:
        assert await s.exists(p) is not None, p
    await paths.ensure_persistent_paths(s, {paths.CLUSTER_ID: paths.encode_cluster_id("c-2")})
    data, _ = await s.get(paths.CLUSTER_ID)
    assert paths.decode_cluster_id(data) == "c-1"

    other = await store_backend.new_session()  # the containers exist, the id does not
    await other.delete(paths.CLUSTER_ID)
    await s.create("/brokers/ids/7", b"", make_parents=True)  # the multi would not conflict
    await paths.ensure_persistent_paths(other, {paths.CLUSTER_ID: paths.encode_cluster_id("c-3")})
    data, _ = await s.get(paths.CLUSTER_ID)
    assert paths.decode_cluster_id(data) == "c-3"


def test_dot_names_are_sanitized_into_node_names() -> None:
    for name in (".", ".."):
        node = paths.sanitize(name)
        assert node not in (".", "..") and "/" not in node
        assert paths.desanitize(node) == name
    assert paths.sanitize("a.b") == "a.b"
