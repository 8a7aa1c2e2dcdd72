"""Metadata answers written without kio: byte for byte kio's frame on every version, with
topics given as mappings or as parts written before; topic parts kept only while the topic's
stamp holds; and the metadata cache's stamps, which change exactly when a topic's answer may."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.protocol.kio_samples import kio_response_frame
from wherry.protocol.codec import encode_response
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.protocol.metadata_response import TopicParts, encode_metadata_body, encode_topic
from wherry.replication.metadata_cache import MetadataCache
from wherry.server.handlers import SUPPORTED_VERSIONS

LO, HI = SUPPORTED_VERSIONS[3]
VERSIONS = range(LO, HI + 1)


def _partition(rng: random.Random, index: int) -> dict[str, Any]:
    replicas = rng.sample(range(1, 6), rng.randint(0, 4))
    return {
        "error_code": rng.choice([ErrorCode.none, ErrorCode.leader_not_available, 9]),
        "partition_index": index,
        "leader_id": rng.choice([-1, *replicas]) if replicas else -1,
        "leader_epoch": rng.choice([-1, 0, 7, 2**31 - 1]),
        "replica_nodes": replicas,
        "isr_nodes": replicas[: rng.randint(0, len(replicas))],
        "offline_replicas": replicas[:1] if rng.random() < 0.3 else [],
    }


def _topic(rng: random.Random, version: int, i: int) -> dict[str, Any]:
    named = version < 12 or rng.random() < 0.8
    return {
        "error_code": rng.choice([ErrorCode.none, ErrorCode.unknown_topic_id, 29]),
        "name": f"topic-{i}-{'x' * rng.randint(0, 200)}" if named else None,
        "topic_id": rng.choice([None, uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))]),
        "is_internal": rng.random() < 0.2,
        "partitions": [_partition(rng, p) for p in range(rng.randint(0, 5))],
        "topic_authorized_operations": rng.choice([-(2**31), 0, 3064]),
    }


def _answer(rng: random.Random, version: int) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "throttle_time": rng.choice([0, 250, datetime.timedelta(milliseconds=17)]),
        "brokers": [
            {
                "node_id": b,
                "host": rng.choice(["127.0.0.1", "broker-é.example", "h" * 300]),
                "port": 9092 + b,
                "rack": rng.choice([None, "", "rack-a"]),
            }
            for b in range(rng.randint(0, 4))
        ],
        "cluster_id": rng.choice([None, "cluster-1"]),
        "controller_id": rng.choice([-1, 0, 3]),
        "topics": [_topic(rng, version, i) for i in range(rng.randint(0, 6))],
        "cluster_authorized_operations": rng.choice([-(2**31), 0, 1024]),
        "error_code": rng.choice([ErrorCode.none, ErrorCode.unknown_server_error]),
    }
    for key in ("cluster_authorized_operations", "error_code", "cluster_id"):
        if rng.random() < 0.2:
            del answer[key]  # a field the handler leaves out takes its default
    return answer


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_is_written_as_kio_writes_it(version: int) -> None:
    rng = random.Random(version)
    for n in range(60):
        data = _answer(rng, version)
        want = kio_response_frame(3, version, n, data)
        assert encode_response(3, version, n, data) == want
        # the same answer with some topics given as parts written before
        mixed = {
            **data,
            "topics": [
                encode_topic(version, t) if rng.random() < 0.5 else t for t in data["topics"]
            ],
        }
        assert encode_response(3, version, n, mixed) == want


def test_a_large_answer_is_the_parts_joined() -> None:
    rng = random.Random(7)
    data = _answer(rng, HI)
    data["topics"] = [_topic(rng, HI, i) for i in range(300)]
    parts = {**data, "topics": [encode_topic(HI, t) for t in data["topics"]]}
    assert encode_metadata_body(HI, parts) == encode_metadata_body(HI, data)
    assert encode_response(3, HI, 1, data) == kio_response_frame(3, HI, 1, data)


def test_a_value_out_of_range_is_refused() -> None:
    data = _answer(random.Random(1), HI)
    data["controller_id"] = 2**31
    with pytest.raises(ValueError):
        encode_metadata_body(HI, data)


def test_topic_parts_are_kept_while_the_stamp_holds() -> None:
    parts = TopicParts()
    built: list[str] = []

    def build(name: str, leader: int) -> Any:
        def topic() -> dict[str, Any]:
            built.append(name)
            return {
                "error_code": 0,
                "name": name,
                "topic_id": None,
                "is_internal": False,
                "partitions": [
                    {"error_code": 0, "partition_index": 0, "leader_id": leader,
                     "replica_nodes": [leader], "isr_nodes": [leader]}
                ],
            }

        return topic

    a1 = parts.get("a", (1, 1), 12, False, build("a", 1))
    assert parts.get("a", (1, 1), 12, False, build("a", 9)) is a1  # same stamp: kept
    assert built == ["a"]
    assert parts.get("a", (1, 1), 0, True, build("a", 1)) != a1  # another version: written
    a2 = parts.get("a", (2, 1), 12, False, build("a", 2))  # the topic changed
    assert a2 != a1 and built == ["a", "a", "a"]
    assert a2 == encode_topic(12, build("a", 2)())
    parts.get("b", (1, 1), 12, False, build("b", 1))
    assert len(parts) == 2
    parts.keep_only(lambda name: name != "a")
    assert len(parts) == 1
    parts.get("a", (2, 1), 12, False, build("a", 2))  # forgotten: written again
    assert built.count("a") == 5


def _state(topic: str, partition: int, leader: int, isr: tuple[int, ...]) -> Any:
    return UpdateMetadataPartitionState(
        topic_name=topic,
        partition_index=partition,
        controller_epoch=1,
        leader=leader,
        leader_epoch=1,
        isr=isr,
        zk_version=1,
        replicas=(1, 2),
    )


def _update(cache: MetadataCache, states: list[Any], brokers: tuple[int, ...] = (1, 2)) -> None:
    cache.update(
        UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            broker_epoch=-1,
            partition_states=tuple(states),
            live_brokers=tuple(BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in brokers),
        )
    )


def test_a_topics_stamp_changes_when_its_answer_may() -> None:
    cache = MetadataCache(1)
    _update(cache, [_state("a", 0, 1, (1, 2)), _state("b", 0, 2, (1, 2))])
    a, b = cache.topic_stamp("a"), cache.topic_stamp("b")
    _update(cache, [_state("a", 0, 2, (2,))])  # a's leader moved
    assert cache.topic_stamp("a") != a and cache.topic_stamp("b") == b
    a = cache.topic_stamp("a")
    _update(cache, [])  # nothing changed
    assert (cache.topic_stamp("a"), cache.topic_stamp("b")) == (a, b)
    _update(cache, [], brokers=(1,))  # broker 2 died: both answers change
    assert cache.topic_stamp("a") != a and cache.topic_stamp("b") != b
    b = cache.topic_stamp("b")
    _update(cache, [_state("b", 0, -2, (1,))], brokers=(1,))  # b deleted
    assert not cache.contains_topic("b") and cache.topic_stamp("b") != b
