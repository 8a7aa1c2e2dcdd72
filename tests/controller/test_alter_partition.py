"""AlterPartition on the controller (SPEC R6, R7, I3): validation, conditional writes,
batched ISR propagation; controllers on a real embedded store with stand-in brokers."""

from __future__ import annotations

import uuid
from typing import Any

from controller_harness import Cluster, EmbeddedBackend, Node, async_test
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.alter_partition import IsrChangePropagation
from wherry.coordination import paths
from wherry.protocol.codec import build_entity
from wherry.protocol.interbroker import UpdateMetadataRequest
from wherry.replication.alter_partition import AlterPartitionItem, build_request
from wherry.replication.isr import IsrProposal

TP = TopicPartition("t", 0)


async def three_brokers(c: Cluster) -> tuple[Node, uuid.UUID]:
    await c.start_all(1, 2, 3)
    ctl = await c.wait_for_controller()
    tid = await c.create_topic("t", {0: [1, 2, 3]})
    await c.settle()
    st = await c.state("t", 0)
    assert st is not None and st.leader == 1 and st.isr == [1, 2, 3]
    return ctl, tid


def request(c: Cluster, tid: uuid.UUID, *, isr: tuple[int, ...], leader_epoch: int,
            partition_epoch: int, broker: int = 1, broker_epoch: int | None = None,
            member_epochs: dict[int, int] | None = None, version: int = 3) -> Any:
    epochs = member_epochs or {}
    proposal = IsrProposal(broker, leader_epoch, isr, tuple(epochs.get(r, -1) for r in isr),
                           partition_epoch)
    be = c.nodes[broker].broker.fence.broker_epoch if broker_epoch is None else broker_epoch
    body = build_request(broker, be, [AlterPartitionItem(TP, tid, proposal, lambda _: None)])
    return build_entity(load_request_schema(56, version), body)


async def zk_version(c: Cluster) -> int:
    _, stat = await c.store.get(paths.partition_state_path("t", 0))
    return stat.version


def answer(resp: dict[str, Any]) -> dict[str, Any]:
    assert resp["error_code"] == ErrorCode.none, resp
    [topic] = resp["topics"]
    [part] = topic["partitions"]
    return part


@async_test
async def test_shrink_is_written_with_partition_epoch_bump_and_propagated() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        ctl.controller.isr_propagation = IsrChangePropagation(blackout_ms=0, interval_ms=60_000)
        v0 = await zk_version(c)
        resp = await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=v0))
        part = answer(resp)
        assert part["error_code"] == ErrorCode.none
        assert part["isr"] == [1, 2] and part["leader_id"] == 1
        assert part["partition_epoch"] == v0 + 1 == await zk_version(c)
        st = await c.state("t", 0)
        assert st is not None and st.isr == [1, 2] and st.leader_epoch == 0
        # ISR-only UpdateMetadata to every live broker, once propagation is due.
        before = {b: len(n.broker.requests_of(UpdateMetadataRequest))
                  for b, n in c.nodes.items()}
        await ctl.controller.submit(ctl.controller.propagate_isr_changes)
        for b, n in c.nodes.items():
            ums = n.broker.requests_of(UpdateMetadataRequest)
            assert len(ums) == before[b] + 1
            assert [s.isr for s in ums[-1].partition_states] == [(1, 2)]
            assert n.broker.metadata[TP].isr == (1, 2)
        # The same request again (a retry after a lost answer): the stored state, no write.
        resp = await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=v0))
        assert answer(resp)["partition_epoch"] == v0 + 1 == await zk_version(c)


@async_test
async def test_epoch_checks() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        v0 = await zk_version(c)
        alter = ctl.controller.alter_partition
        # Stale partition epoch.
        await alter(request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=v0))
        part = answer(await alter(request(c, tid, isr=(1, 3), leader_epoch=0,
                                          partition_epoch=v0)))
        assert part["error_code"] == ErrorCode.invalid_update_version
        # A leader epoch newer than the controller knows: it is probably not the controller.
        part = answer(await alter(request(c, tid, isr=(1,), leader_epoch=5,
                                          partition_epoch=v0 + 2)))
        assert part["error_code"] == ErrorCode.not_controller
        # Not the leader.
        part = answer(await alter(request(c, tid, isr=(2, 3), leader_epoch=0,
                                          partition_epoch=await zk_version(c), broker=2)))
        assert part["error_code"] == ErrorCode.not_leader_or_follower
        # The requester's broker epoch is stale: top-level error.
        resp = await alter(request(c, tid, isr=(1,), leader_epoch=0,
                                   partition_epoch=await zk_version(c), broker_epoch=1))
        assert resp["error_code"] == ErrorCode.stale_broker_epoch
        # Unknown topic id.
        part = answer(await alter(request(c, uuid.uuid4(), isr=(1,), leader_epoch=0,
                                          partition_epoch=0)))
        assert part["error_code"] == ErrorCode.unknown_topic_id


@async_test
async def test_an_isr_beyond_the_assigned_replicas_is_ineligible() -> None:
    """A leader whose replica list is stale (a reassignment ended while it was not told)
    proposes a live broker the partition no longer has: INELIGIBLE_REPLICA, as Kafka's
    controller answers, so the leader reverts to its committed ISR instead of retrying the
    same proposal (and holding its high watermark back) for ever."""
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        await c.start(4)
        await c.settle()
        v = await zk_version(c)
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2, 3, 4), leader_epoch=0, partition_epoch=v)))
        assert part["error_code"] == ErrorCode.ineligible_replica
        # An ISR without the leader itself is malformed.
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(2, 3), leader_epoch=0, partition_epoch=v)))
        assert part["error_code"] == ErrorCode.invalid_request
        assert await zk_version(c) == v


@async_test
async def test_fenced_leader_epoch() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        await c.kill(3)  # the controller drops 3 from the ISR: leader epoch 1
        ctl = await c.wait_for_controller()
        await c.settle()
        st = await c.state("t", 0)
        assert st is not None and st.leader_epoch == 1 and st.isr == [1, 2]
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1,), leader_epoch=0, partition_epoch=await zk_version(c))))
        assert part["error_code"] == ErrorCode.fenced_leader_epoch


@async_test
async def test_ineligible_replicas_are_refused() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        await c.kill(3)
        ctl = await c.wait_for_controller()
        await c.settle()
        v = await zk_version(c)
        # A dead broker cannot join.
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2, 3), leader_epoch=1, partition_epoch=v)))
        assert part["error_code"] == ErrorCode.ineligible_replica
        # A live broker with the wrong broker epoch (an older incarnation) cannot either.
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=1, partition_epoch=v,
                    member_epochs={2: 12345})))
        assert part["error_code"] == ErrorCode.none  # the current ISR: answered as stored
        # Shrink, then try to re-add 2 with a wrong broker epoch:
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1,), leader_epoch=1, partition_epoch=v)))
        assert part["error_code"] == ErrorCode.none
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=1, partition_epoch=v + 1,
                    member_epochs={2: 12345})))
        assert part["error_code"] == ErrorCode.ineligible_replica
        good = c.nodes[2].broker.fence.broker_epoch
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=1, partition_epoch=v + 1,
                    member_epochs={2: good}, version=2)))
        assert part["error_code"] == ErrorCode.none and part["isr"] == [1, 2]


@async_test
async def test_conditional_write_conflict_is_invalid_update_version() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        path = paths.partition_state_path("t", 0)
        data, stat = await c.store.get(path)
        await c.store.set(path, data, version=stat.version)  # behind the controller's back
        part = answer(await ctl.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=stat.version)))
        assert part["error_code"] == ErrorCode.invalid_update_version
        st = await c.state("t", 0)
        assert st is not None and st.isr == [1, 2, 3]


@async_test
async def test_not_active_controller_answers_not_controller() -> None:
    async with Cluster(EmbeddedBackend()) as c:
        ctl, tid = await three_brokers(c)
        other = next(n for b, n in c.nodes.items() if b != ctl.broker_id)
        resp = await other.controller.alter_partition(
            request(c, tid, isr=(1, 2), leader_epoch=0, partition_epoch=0))
        assert resp["error_code"] == ErrorCode.not_controller


def test_isr_change_propagation_rule() -> None:
    p = IsrChangePropagation(blackout_ms=5_000, interval_ms=60_000, last_propagation_ms=100_000)
    assert p.take_due(100_000) == []
    p.record([TP], 100_000)
    assert p.take_due(104_000) == []  # a change within the blackout
    assert p.take_due(105_001) == [TP] and p.last_propagation_ms == 105_001
    # A storm of changes: each one restarts the blackout, the interval caps the wait.
    t = 105_001
    for i in range(1, 40):
        t += 2_000
        p.record([TopicPartition("t", i)], t)
        got = p.take_due(t)
        if got:
            break
    assert got and t - 105_001 > 60_000 and len(got) > 25
