"""A share session keeps a partition of a topic the broker does not know yet.

A share consumer names each partition once, when it adds it to its share session, and counts
it in the session from then on (Kafka's client does; so does Kafka's broker, which keeps every
named partition in the session). A broker that has not yet learned of the topic -- just
restarted, or the topic just created -- answers UNKNOWN_TOPIC_ID, and must still fetch the
partition once it learns of it; otherwise the member's later ShareFetches, which name nothing
new, get nothing from that partition for as long as the session lasts.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.codec import decode_response, encode_request
from wherry.server.broker import Broker
from wherry.server.network import ConnectionInfo
from wherry.sim.wire import frame_bytes
from wherry.testing.cluster import AsyncDevCluster

SHARE_GROUP_HEARTBEAT = 76
SHARE_FETCH = 78
GROUP = "late-topic"
MEMBER = str(uuid.uuid4())
# this test's requests come in process, as from a connection no socket of the broker has
IN_PROCESS_CONNECTION = 1 << 40


async def _call(b: Broker, api_key: int, body: dict[str, Any]) -> Any:
    frame = encode_request(api_key, 1, 7, body)[4:]
    conn = ConnectionInfo("127.0.0.1:40000", "PLAINTEXT", IN_PROCESS_CONNECTION)
    answer = await frame_bytes(await b.handle_frame(conn, memoryview(bytearray(frame))))
    assert answer is not None
    return decode_response(api_key, 1, answer[4:])[1]


async def _join(b: Broker, topic: str) -> None:
    """The member joins the share group (its share sessions live as long as it does)."""
    r = await _call(b, SHARE_GROUP_HEARTBEAT, {
        "group_id": GROUP, "member_id": MEMBER, "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": [topic],
    })
    assert r.error_code == ErrorCode.none, r


async def _join_when_loaded(b: Broker, topic: str) -> None:
    """`_join`, once the group coordinator has loaded its partition."""
    async with asyncio.timeout(30):
        while True:
            try:
                return await _join(b, topic)
            except AssertionError:
                await asyncio.sleep(0.1)


async def _share_fetch(b: Broker, epoch: int, partitions: dict[uuid.UUID, list[int]]) -> Any:
    return await _call(b, SHARE_FETCH, {
        "group_id": GROUP,
        "member_id": MEMBER,
        "share_session_epoch": epoch,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 100,
        "batch_size": 100,
        "topics": [
            {"topic_id": tid, "partitions": [
                {"partition_index": p, "acknowledgement_batches": []} for p in ps]}
            for tid, ps in partitions.items()
        ],
        "forgotten_topics_data": [],
    })


def _partitions(r: Any) -> dict[int, Any]:
    return {int(p.partition_index): p for t in r.responses for p in t.partitions}


@pytest.mark.timeout(90)
def test_a_partition_named_before_its_topic_is_known_is_fetched_once_it_is(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with AsyncDevCluster(tmp_path, brokers=1, base_port=0) as cluster:
            b = cluster.brokers[0]
            topic = f"late-{uuid.uuid4().hex[:8]}"
            await _join_when_loaded(b, topic)
            await b.shares.settings(GROUP)  # the group's configs read (and kept) first
            created = await b.admin.create_topic(
                topic, num_partitions=1, replication_factor=1, configs={}
            )
            tid = created.topic_id
            # the topic is in the store; the broker's metadata has not caught up yet
            assert b.node.cache.topic_name(tid) is None
            first = await _share_fetch(b, 0, {tid: [0]})
            assert first.error_code == ErrorCode.none
            assert _partitions(first)[0].error_code == ErrorCode.unknown_topic_id

            tp = TopicPartition(topic, 0)
            async with asyncio.timeout(20):
                while b.replica_manager.get_partition(tp) is None:
                    await asyncio.sleep(0.02)

            def produce() -> None:
                from confluent_kafka import Producer

                p = Producer({"bootstrap.servers": f"127.0.0.1:{cluster.port(0)}"})
                for i in range(5):
                    p.produce(topic, f"r{i}".encode(), partition=0)
                assert p.flush(30) == 0

            # the share-partition starts at the end of the empty partition (latest): the
            # records come after a fetch that names nothing loaded it
            empty = await _share_fetch(b, 1, {})
            assert _partitions(empty).get(0) is None or not _partitions(empty)[0].acquired_records
            await asyncio.to_thread(produce)
            got = await _share_fetch(b, 2, {})
            assert got.error_code == ErrorCode.none
            assert 0 in _partitions(got), "the partition is not in the share session"
            part = _partitions(got)[0]
            assert part.error_code == ErrorCode.none
            acquired = [(r.first_offset, r.last_offset) for r in part.acquired_records]
            assert acquired == [(0, 4)]

    asyncio.run(main())
