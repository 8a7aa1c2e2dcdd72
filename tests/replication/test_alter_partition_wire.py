"""AlterPartition over the wire: `ControllerSender` → a broker's API 56 handler → its
controller, in a real 3-broker dev cluster (embedded store, real sockets)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordination import paths
from wherry.replication.alter_partition import (
    AlterPartitionItem,
    ControllerSender,
    build_request,
    parse_response,
)
from wherry.replication.isr import CommittedLeaderAndIsr, IsrProposal
from wherry.testing.cluster import AsyncDevCluster

TP = TopicPartition("t", 0)


def test_alter_partition_round_trip(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = AsyncDevCluster(tmp_path, brokers=3, base_port=0)
        await cluster.start()
        try:
            b0 = cluster.brokers[0]
            tid = uuid.uuid4()
            await b0.store.create(paths.topic_config_path("t"), paths.encode_config({}),
                                  make_parents=True)
            await b0.store.create(paths.topic_path("t"),
                                  paths.TopicAssignment(tid, {0: [0, 1, 2]}).to_json(),
                                  make_parents=True)
            state_path = paths.partition_state_path("t", 0)
            async with asyncio.timeout(10):
                while await b0.store.exists(state_path) is None:
                    await asyncio.sleep(0.02)
            data, stat = await b0.store.get(state_path)
            st = paths.PartitionState.from_json(data)
            leader = cluster.brokers[st.leader]
            [ctl] = [b for b in cluster.brokers.values() if b.controller.active]
            other = next(b for b in cluster.brokers.values() if b is not ctl)

            proposal = IsrProposal(st.leader, st.leader_epoch, (st.leader,), (-1,),
                                   stat.version)
            body = build_request(st.leader, leader.fence.broker_epoch,
                                 [AlterPartitionItem(TP, tid, proposal, lambda _: None)])

            def address_of(b: int) -> tuple[int, str, int]:
                return b, "127.0.0.1", cluster.port(b)

            wrong = ControllerSender(st.leader, lambda: address_of(other.broker_id))
            right = ControllerSender(st.leader, lambda: address_of(ctl.broker_id))
            try:
                resp = await wrong(body)
                assert resp.error_code == ErrorCode.not_controller
                resp = await right(body)
                assert resp.error_code == ErrorCode.none
                got = parse_response(resp)[(tid, 0)]
                assert got == CommittedLeaderAndIsr(st.leader, st.leader_epoch, (st.leader,),
                                                    stat.version + 1)
            finally:
                await wrong.close()
                await right.close()
            data, stat2 = await b0.store.get(state_path)
            assert paths.PartitionState.from_json(data).isr == [st.leader]
            assert stat2.version == stat.version + 1
        finally:
            await cluster.stop()

    asyncio.run(asyncio.wait_for(main(), 60))
