"""A share-partition leader that learns of a newer leader epoch refuses ShareFetch.

A broker cut off from the controller while it led a partition can miss the LeaderAndIsr (or
StopReplica) that ended its leadership, yet learn the newer leader epoch from UpdateMetadata.
A Fetch is fenced by the client's current leader epoch; a ShareFetch carries none, so the
broker checks itself and answers NOT_LEADER_OR_FOLLOWER: the consumer looks the leader up
again instead of being answered "nothing" by a stale leader for as long as it asks."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.share.test_share_session_unknown_topic import (
    _join_when_loaded,
    _partitions,
    _share_fetch,
)
from wherry.common.topic_partition import TopicPartition
from wherry.protocol.interbroker import UpdateMetadataRequest
from wherry.testing.cluster import AsyncDevCluster


@pytest.mark.timeout(90)
def test_a_leader_that_knows_of_a_newer_leader_epoch_refuses_share_fetches(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with AsyncDevCluster(tmp_path, brokers=1, base_port=0) as cluster:
            b = cluster.brokers[0]
            topic = f"stale-{uuid.uuid4().hex[:8]}"
            created = await b.admin.create_topic(
                topic, num_partitions=1, replication_factor=1, configs={}
            )
            tp = TopicPartition(topic, 0)
            async with asyncio.timeout(30):
                while b.replica_manager.get_partition(tp) is None or (
                    b.node.cache.partition(topic, 0) is None
                ):
                    await asyncio.sleep(0.02)
            await _join_when_loaded(b, topic)
            tid = created.topic_id
            led = await _share_fetch(b, 0, {tid: [0]})
            assert _partitions(led)[0].error_code == ErrorCode.none

            # The controller's metadata says another broker leads now, at a newer epoch; the
            # LeaderAndIsr that would have told this broker never came.
            part = b.replica_manager.get_partition(tp)
            assert part is not None and part.is_leader
            state = b.node.cache.partition(topic, 0)
            assert state is not None
            newer = dataclasses.replace(state, leader=7, leader_epoch=part.leader_epoch + 1)
            cache, fence = b.node.cache, b.node.fence
            err = await b.node.handle_update_metadata(UpdateMetadataRequest(
                cache.controller_id or 0, fence.controller_epoch, fence.broker_epoch,
                (newer,), tuple(cache.brokers.values()),
            ))
            assert err == ErrorCode.none
            assert part.is_leader  # still, in its own replica manager

            refused = await _share_fetch(b, 1, {})
            assert _partitions(refused)[0].error_code == ErrorCode.not_leader_or_follower

    asyncio.run(main())
