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

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_wire import call, fetch_body
from wherry.common.topic_partition import TopicPartition
from wherry.protocol.interbroker import StopReplicaPartition, StopReplicaRequest
from wherry.testing.cluster import AsyncDevCluster

DELETE_EPOCH = -2  # StopReplica with deletion carries no leader epoch check


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
            await b.admin.create_topic(topic, num_partitions=1, replication_factor=1, configs={})
            async with asyncio.timeout(10):
                while b.replica_manager.get_partition(tp) is None:
                    await asyncio.sleep(0.02)
            purgatory = b.replica_manager.fetch_purgatory

            # A consumer fetch that waits up to 30 s for 1 MiB of an empty partition.
            bootstrap = f"127.0.0.1:{cluster.port(0)}"
            body = {**fetch_body(topic), "max_wait": 30_000, "min_bytes": 1 << 20}
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
