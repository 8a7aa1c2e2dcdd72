"""DescribeTopicPartitions (75) with its cursor and ListConfigResources (74), through
kafka-python 3.0.12's KafkaAdminClient and raw requests against a real broker process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient
from kafka.admin import ConfigResourceType
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from tests.broker_process import BrokerProcess
from tests.helpers import create_topic

DESCRIBE_TOPIC_PARTITIONS, LIST_CONFIG_RESOURCES = 75, 74


@pytest.fixture(scope="module")
def listing_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("listing"))).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def topics(listing_broker: BrokerProcess) -> dict[str, int]:
    """Three topics with 3, 1 and 4 partitions (created out of name order)."""
    made = {"dtp-c": 4, "dtp-a": 3, "dtp-b": 1}
    for name, count in made.items():
        create_topic(listing_broker.bootstrap, name, partitions=count)
    return made


@pytest.fixture
def admin(listing_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=listing_broker.bootstrap, request_timeout_ms=15000)
    try:
        yield a
    finally:
        a.close()


def _pages(admin: KafkaAdminClient, names: list[str], limit: int) -> list[dict[str, Any]]:
    pages = []
    cursor = None
    for _ in range(20):
        page = admin.describe_topic_partitions(names, response_partition_limit=limit,
                                               cursor=cursor)
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError("the cursor never ended")


def _flat(pages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(t["name"], p["partition_index"]) for page in pages for t in page["topics"]
            for p in t["partitions"]]


def test_describe_topic_partitions_pages_sorted_topics(
    admin: KafkaAdminClient, topics: dict[str, int]
) -> None:
    names = ["dtp-c", "dtp-a", "dtp-b"]
    expected = [(t, p) for t in sorted(names) for p in range(topics[t])]
    # One page holds everything: topics sorted by name, no cursor.
    (whole,) = _pages(admin, names, 2000)
    assert [t["name"] for t in whole["topics"]] == ["dtp-a", "dtp-b", "dtp-c"]
    assert _flat([whole]) == expected
    first = whole["topics"][0]
    assert first["error_code"] == 0 and first["topic_id"] != uuid.UUID(int=0)
    assert first["is_internal"] is False
    part = first["partitions"][0]
    assert part["leader_id"] == 0 and part["replica_nodes"] == [0] and part["isr_nodes"] == [0]
    assert part["leader_epoch"] >= 0 and part["offline_replicas"] == []
    # Pages of 2: a topic cut short ends the page; the cursor names the next partition.
    pages = _pages(admin, names, 2)
    assert _flat(pages) == expected
    assert pages[0]["next_cursor"] == {"topic_name": "dtp-a", "partition_index": 2}
    # dtp-a's last partition and all of dtp-b fill the second page exactly: the cursor then
    # points at the next topic's first partition.
    assert _flat([pages[1]]) == [("dtp-a", 2), ("dtp-b", 0)]
    assert pages[1]["next_cursor"] == {"topic_name": "dtp-c", "partition_index": 0}
    assert len(pages) == 4
    # Pages of 3 over every topic (an empty list): the same partitions in order, plus none of
    # anything else the broker may hold before "dtp-".
    every = _flat(_pages(admin, [], 3))
    assert [tp for tp in every if tp[0].startswith("dtp-")] == expected


def test_describe_topic_partitions_unknown_and_bad_cursor(
    admin: KafkaAdminClient, listing_broker: BrokerProcess, topics: dict[str, int]
) -> None:
    page = admin.describe_topic_partitions(["dtp-b", "dtp-missing", "bad/name"])
    by_name = {t["name"]: t for t in page["topics"]}
    assert [t["name"] for t in page["topics"]] == ["bad/name", "dtp-b", "dtp-missing"]
    assert by_name["dtp-missing"]["error_code"] == ErrorCode.unknown_topic_or_partition
    assert by_name["dtp-missing"]["partitions"] == []
    assert by_name["bad/name"]["error_code"] == ErrorCode.invalid_topic_exception
    assert by_name["dtp-b"]["error_code"] == 0
    # Every operation allowed (no authorizer): the topic's 8 operations are reported.
    assert bin(by_name["dtp-b"]["topic_authorized_operations"]).count("1") == 8
    # Topics before the cursor are left out; a cursor past a topic's end yields no partitions.
    page = admin.describe_topic_partitions(["dtp-a", "dtp-c"],
                                           cursor={"topic_name": "dtp-c", "partition_index": 3})
    assert _flat([page]) == [("dtp-c", 3)]
    # The cursor's topic must be among the named ones: INVALID_REQUEST for each.
    r = kafka_wire.call(listing_broker.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "dtp-a"}], "response_partition_limit": 10,
        "cursor": {"topic_name": "dtp-b", "partition_index": 0}})
    assert [(t.name, t.error_code) for t in r.topics] == [("dtp-a", ErrorCode.invalid_request)]
    assert r.next_cursor is None
    # A raw request sees the empty ELR lists a ZooKeeper-mode broker has.
    r = kafka_wire.call(listing_broker.bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": "dtp-b"}], "response_partition_limit": 10, "cursor": None})
    (p,) = r.topics[0].partitions
    assert p.eligible_leader_replicas == () and p.last_known_elr == ()


def test_list_config_resources(
    admin: KafkaAdminClient, listing_broker: BrokerProcess, topics: dict[str, int]
) -> None:
    # A classic group the coordinator holds.
    group = "lcr-group"
    producer = Producer({"bootstrap.servers": listing_broker.bootstrap})
    producer.produce("dtp-b", b"x")
    producer.flush(15)
    consumer = Consumer({"bootstrap.servers": listing_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "log_level": 0})
    try:
        consumer.subscribe(["dtp-b"])
        msg = None
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None
        consumer.commit(asynchronous=False)
        every = admin.list_config_resources()
    finally:
        consumer.close()
    assert set(topics) <= set(every["topic"])
    assert every["broker"] == ["0"] and every["broker_logger"] == ["0"]
    assert group in every["group"]
    assert "client_metrics" not in every
    assert admin.list_config_resources([ConfigResourceType.TOPIC]).keys() == {"topic"}
    assert admin.list_config_resources(["BROKER"]) == {"broker": ["0"]}
    # v0 (ListClientMetricsResources): client-metrics resources only, none here.
    r = kafka_wire.call(listing_broker.bootstrap, LIST_CONFIG_RESOURCES, 0, {})
    assert r.error_code == 0 and r.config_resources == ()
    # A type v1 does not list (UNKNOWN = 0, or 64) fails the whole request.
    for bad in ([0], [2, 64]):
        r = kafka_wire.call(listing_broker.bootstrap, LIST_CONFIG_RESOURCES, 1,
                            {"resource_types": bad})
        assert (r.error_code, r.config_resources) == (ErrorCode.unsupported_version, ())
