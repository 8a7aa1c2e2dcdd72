"""StopReplica changes replica state and completes parked requests on the event loop.

A fetch parked in the purgatory of a partition that StopReplica removes must be answered at
once, from the event loop's thread (the purgatory's completions resolve asyncio futures).
The loop runs in debug mode, where asyncio refuses `call_soon` from any other thread: a
completion from an executor thread would leave the fetch unanswered.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_wire import call
from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.protocol.interbroker import StopReplicaPartition, StopReplicaRequest
from wherry.testing.cluster import AsyncDevCluster

DELETE_EPOCH = -2  # StopReplica with deletion carries no leader epoch check


def fetch_body(topic: str, offset: int, *, max_wait: int, min_bytes: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": offset,
                        "partition_max_bytes": 1 << 20,
                        "current_leader_epoch": -1,
                        "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


@pytest.mark.timeout(90)  # before the fix the fetch hung, and the broker's stop with it
def test_stop_replica_answers_a_parked_fetch_from_the_event_loop(tmp_path: Path) -> None:
    async def main() -> None:
        asyncio.get_running_loop().set_debug(True)
        cluster = AsyncDevCluster(tmp_path, brokers=1, base_port=0)
        await cluster.start()
        try:
            b = cluster.brokers[0]
            topic = f"stop-{uuid.uuid4().hex[:8]}"
            tp = TopicPartition(topic, 0)
            await b.store.create(
                paths.topic_config_path(topic), paths.encode_config({}), make_parents=True
            )
            await b.store.create(
                paths.topic_path(topic),
                paths.TopicAssignment(uuid.uuid4(), {0: [0]}).to_json(),
                make_parents=True,
            )
            async with asyncio.timeout(10):
                while b.replica_manager.get_partition(tp) is None:
                    await asyncio.sleep(0.02)
            purgatory = b.replica_manager.fetch_purgatory

            # A consumer fetch that waits up to 30 s for 1 MiB of an empty partition.
            bootstrap = f"127.0.0.1:{cluster.port(0)}"
            body = fetch_body(topic, 0, max_wait=30_000, min_bytes=1 << 20)
            fetch = asyncio.ensure_future(asyncio.to_thread(call, bootstrap, 1, 12, body))
            async with asyncio.timeout(10):
                while purgatory.watched(tp) == 0:
                    await asyncio.sleep(0.01)

            req = StopReplicaRequest(
                controller_id=0,
                controller_epoch=b.fence.controller_epoch,
                broker_epoch=b.fence.broker_epoch,
                partitions=(StopReplicaPartition(topic, 0, DELETE_EPOCH, True),),
            )
            resp = await b.channel.stop_replica(0, req)
            assert resp is not None and resp.error_code == ErrorCode.none
            assert b.replica_manager.get_partition(tp) is None

            # Answered at once (not after its 30 s wait), for a partition no longer here.
            answer = await asyncio.wait_for(fetch, 5)
            [part] = answer.responses[0].partitions
            assert part.error_code in (
                ErrorCode.not_leader_or_follower,
                ErrorCode.unknown_topic_or_partition,
            )
            assert purgatory.watched(tp) == 0
            # The log is gone from the partition's directory.
            assert not (b.config.log_dirs[0] / tp.dir_name).exists()
        finally:
            await cluster.stop()

    asyncio.run(main())
