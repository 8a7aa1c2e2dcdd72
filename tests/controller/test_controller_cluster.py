"""The controller on a real store (embedded and a real ZooKeeper) with stand-in brokers that
judge its requests by the broker's rules: topic creation, broker failure and return, offline
partitions, unclean election, controller failover (session expiry, fenced writes) and topic
deletion that survives a controller failover."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from controller_harness import Backend, Cluster, EmbeddedBackend, async_test, wait_until
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.controller.assignment import assign_replicas
from wherry.coordination import paths
from wherry.protocol.interbroker import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wherry.runtime.state_change_log import (
    attach_state_change_log,
    merge_state_change_logs,
)

NewBackend = Callable[[], Backend]


async def wait_for_states(
    c: Cluster, topic: str, count: int, pred: Callable[[dict[int, paths.PartitionState]], bool]
) -> dict[int, paths.PartitionState]:
    got: dict[int, paths.PartitionState] = {}
    for _ in range(500):
        got = {}
        for p in range(count):
            st = await c.state(topic, p)
            if st is not None:
                got[p] = st
        if len(got) == count and pred(got):
            return got
        await c.backend.settle()
    raise AssertionError(f"partition states of {topic} never matched: {got}")


@async_test
async def test_created_topic_has_preferred_leaders(new_backend: NewBackend) -> None:
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2, 3)
        assignment = assign_replicas([1, 2, 3], 12, 3, rng=random.Random(5))
        await c.create_topic("events", assignment)
        states = await wait_for_states(c, "events", 12, lambda s: True)
        assert Counter(st.leader for st in states.values()) == {1: 4, 2: 4, 3: 4}
        for p, st in states.items():
            assert st.leader == assignment[p][0]
            assert sorted(st.isr) == [1, 2, 3] and st.leader_epoch == 0
        controller = await c.wait_for_controller()
        assert all(st.controller_epoch == controller.controller.ctx.epoch for st in states.values())
        await c.settle()
        for b in (1, 2, 3):
            broker = c.nodes[b].broker
            hosted = {tp.partition: s for tp, s in broker.partitions.items()}
            assert sorted(hosted) == list(range(12))
            assert all(s.leader == assignment[p][0] and s.is_new for p, s in hosted.items())
            assert sorted(tp.partition for tp in broker.metadata) == list(range(12))
            assert broker.live_brokers == (1, 2, 3)
            assert not broker.rejected


@async_test
async def test_broker_failure_moves_leaders_to_the_surviving_isr(new_backend: NewBackend) -> None:
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2, 3)
        controller = await c.wait_for_controller()
        victim = next(b for b in (1, 2, 3) if b != controller.broker_id)
        survivors = sorted({1, 2, 3} - {victim})
        assignment = assign_replicas([1, 2, 3], 12, 3, rng=random.Random(9))
        await c.create_topic("orders", assignment)
        before = await wait_for_states(c, "orders", 12, lambda s: True)
        await c.settle()
        counts = {
            b: (
                len(c.nodes[b].broker.requests_of(LeaderAndIsrRequest)),
                len(c.nodes[b].broker.requests_of(UpdateMetadataRequest)),
            )
            for b in survivors
        }

        await c.kill(victim)
        after = await wait_for_states(
            c, "orders", 12, lambda s: all(victim not in st.isr for st in s.values())
        )
        await c.settle()
        for p, st in after.items():
            old = before[p]
            assert st.leader_epoch == old.leader_epoch + 1, (p, old, st)
            assert st.isr == [r for r in old.isr if r != victim]
            if old.leader == victim:
                assert st.leader in old.isr and st.leader in survivors
                # the first surviving ISR member in assignment order
                assert st.leader == next(r for r in assignment[p] if r != victim)
            else:
                assert st.leader == old.leader
        # One event, one LeaderAndIsr and one UpdateMetadata per surviving broker.
        for b in survivors:
            broker = c.nodes[b].broker
            lai = broker.requests_of(LeaderAndIsrRequest)[counts[b][0] :]
            um = broker.requests_of(UpdateMetadataRequest)[counts[b][1] :]
            assert len(lai) == 1 and len(um) == 1, (b, len(lai), len(um))
            assert {s.partition_index for s in lai[0].partition_states} == {
                p for p in range(12) if b in assignment[p]
            }
            assert lai[0].broker_epoch == broker.fence.broker_epoch
            for tp, s in broker.partitions.items():
                assert (s.leader, s.leader_epoch) == (
                    after[tp.partition].leader,
                    after[tp.partition].leader_epoch,
                )
            assert broker.live_brokers == tuple(survivors)
            for st in broker.metadata.values():
                assert st.offline_replicas == (victim,)
        # The controller told its channel which brokers are live.
        synced = controller.channel.synced[-1]
        assert sorted(synced) == survivors
        assert all(a.epoch == c.nodes[b].broker.fence.broker_epoch for b, a in synced.items())


@async_test
async def test_all_replicas_die_then_last_isr_member_returns(new_backend: NewBackend) -> None:
    async with Cluster(new_backend()) as c:
        observer = await c.start(0)  # hosts no replica; the controller (started first)
        assert observer.controller.active
        await c.start_all(1, 2, 3)
        await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
        await wait_for_states(c, "t", 2, lambda s: True)
        for b in (1, 2):
            await c.kill(b)
            await wait_for_states(
                c, "t", 2, lambda s, b=b: all(b not in st.isr for st in s.values())
            )
        states = await c.states("t", 2)
        assert [(st.leader, st.isr) for st in states.values()] == [(3, [3]), (3, [3])]
        epochs = [st.leader_epoch for st in states.values()]

        await c.kill(3)
        states = await wait_for_states(
            c, "t", 2, lambda s: all(st.leader == -1 for st in s.values())
        )
        # The last ISR member stays in the ISR, so it can come back cleanly.
        assert [(st.leader, st.isr) for st in states.values()] == [(-1, [3]), (-1, [3])]
        assert [st.leader_epoch for st in states.values()] == [e + 1 for e in epochs]
        await c.settle()
        md = observer.broker.metadata
        for p in (0, 1):
            assert md[TopicPartition("t", p)].leader == -1
            assert sorted(md[TopicPartition("t", p)].offline_replicas) == [1, 2, 3]

        # A replica outside the ISR returning does not bring the partition back (clean only).
        await c.start(1)
        await c.settle()
        assert all(st.leader == -1 for st in (await c.states("t", 2)).values())

        # The last ISR member returning does.
        returned = await c.start(3)
        states = await wait_for_states(
            c, "t", 2, lambda s: all(st.leader == 3 for st in s.values())
        )
        assert [st.isr for st in states.values()] == [[3], [3]]
        assert [st.leader_epoch for st in states.values()] == [e + 2 for e in epochs]
        await c.settle()
        hosted = returned.broker.partitions
        assert {tp.partition: s.leader for tp, s in hosted.items()} == {0: 3, 1: 3}
        assert md[TopicPartition("t", 0)].leader == 3
        assert md[TopicPartition("t", 0)].offline_replicas == (2,)


@async_test
async def test_unclean_election_only_when_the_topic_enables_it(
    new_backend: NewBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handle = attach_state_change_log(tmp_path)
    try:
        async with Cluster(new_backend()) as c:
            await c.start(0)
            await c.start_all(1, 2)
            await c.create_topic("clean", {0: [1, 2]})
            await c.create_topic("dirty", {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
            await c.create_topic("default", {0: [1, 2]}, {"retention.ms": "1000"})
            for t in ("clean", "dirty", "default"):
                await wait_for_states(c, t, 1, lambda s: True)
            await c.kill(2)
            for t in ("clean", "dirty", "default"):
                await wait_for_states(c, t, 1, lambda s: s[0].isr == [1])
            await c.kill(1)
            for t in ("clean", "dirty", "default"):
                await wait_for_states(c, t, 1, lambda s: s[0].leader == -1)
            with caplog.at_level(logging.WARNING, logger="wherry.controller"):
                await c.start(2)
                dirty = await wait_for_states(c, "dirty", 1, lambda s: s[0].leader == 2)
                await c.settle()
            assert dirty[0].isr == [2]
            assert (await c.state("clean", 0)).leader == -1  # type: ignore[union-attr]
            assert (await c.state("default", 0)).leader == -1  # type: ignore[union-attr]
            unclean = [r for r in caplog.records if "UNCLEAN" in r.getMessage()]
            assert len(unclean) == 1 and "dirty-0" in unclean[0].getMessage()
            assert unclean[0].levelno == logging.WARNING
    finally:
        handle.detach()
    recs = merge_state_change_logs(
        [tmp_path / "state-change.log"], topic="dirty", changes_only=True
    )
    online = [r for r in recs if r.kind == "Partition" and r.new_state == "OnlinePartition"]
    assert online[-1].leader == 2 and online[-1].fields.get("unclean") == "true"
    assert online[-1].level == "WARNING"


@async_test
async def test_a_dynamic_default_unclean_setting_applies_to_topics_without_one(
    new_backend: NewBackend,
) -> None:
    """`unclean.leader.election.enable` set for the cluster as a dynamic broker config (kafka-
    configs --entity-type brokers --entity-default) is the controller's default; a topic's
    own setting still wins."""
    async with Cluster(new_backend()) as c:
        await c.start(0)
        await c.start_all(1, 2)
        await c.store.create(
            paths.broker_config_path(None),
            paths.encode_config({"unclean.leader.election.enable": "true"}),
            make_parents=True,
        )
        await c.create_topic("follows", {0: [1, 2]})
        await c.create_topic("own", {0: [1, 2]}, {"unclean.leader.election.enable": "false"})
        for t in ("follows", "own"):
            await wait_for_states(c, t, 1, lambda s: True)
        await c.kill(2)
        for t in ("follows", "own"):
            await wait_for_states(c, t, 1, lambda s: s[0].isr == [1])
        await c.kill(1)
        for t in ("follows", "own"):
            await wait_for_states(c, t, 1, lambda s: s[0].leader == -1)
        await c.start(2)
        follows = await wait_for_states(c, "follows", 1, lambda s: s[0].leader == 2)
        await c.settle()
        assert follows[0].isr == [2]
        assert (await c.state("own", 0)).leader == -1  # type: ignore[union-attr]


@async_test
async def test_controller_session_expiry_fences_the_old_controller(new_backend: NewBackend) -> None:
    backend = new_backend()
    async with Cluster(backend) as c:
        await c.start_all(1, 2, 3)
        old = await c.wait_for_controller()
        old_epoch = old.controller.ctx.epoch
        await c.create_topic("x", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        await wait_for_states(c, "x", 3, lambda s: True)
        await c.settle()
        other = next(b for b in (1, 2, 3) if b != old.broker_id)
        stale = c.nodes[other].broker.requests_of(LeaderAndIsrRequest)[-1]
        assert stale.controller_epoch == old_epoch

        await backend.expire(old.store)
        new = await c.wait_for_controller(other_than=old.broker_id)
        assert new.controller.ctx.epoch > old_epoch == await c.controller_epoch() - 1
        await wait_until(lambda: not old.controller.active)
        assert old.controller.ctx.all_partitions() == []
        assert old.channel.synced[-1] == {}
        # The old controller's broker went with its session: leaders moved off it.
        await wait_for_states(
            c, "x", 3, lambda s: all(old.broker_id not in st.isr for st in s.values())
        )
        survivors = [b for b in (1, 2, 3) if b != old.broker_id]
        await wait_until(
            lambda: all(
                c.nodes[b].broker.fence.controller_epoch == new.controller.ctx.epoch
                for b in survivors
            )
        )
        # A request the old controller built is refused by the broker-side rules.
        resp = await c.nodes[other].broker.handle_leader_and_isr(stale)
        assert resp.error_code == ErrorCode.stale_controller_epoch
        assert {e.error_code for e in resp.partition_errors} == {ErrorCode.stale_controller_epoch}

        # The owner opens a new session, registers the broker again and restarts the
        # controller on it: it follows the new controller and gets its partitions back.
        fresh = await backend.new_session()
        old.store = fresh
        old.broker.store = fresh
        await old.broker.register()
        await old.controller.restart_with(fresh)
        assert not old.controller.active
        assert old.controller.active_controller_id == new.broker_id
        await wait_for_states(c, "x", 3, lambda s: True)
        await wait_until(lambda: len(old.broker.partitions) == 3)
        # The new controller's LeaderAndIsr reaches the re-registered broker (it may still hold
        # the old controller's as its last one for a moment: it kept its replicas meanwhile).
        await wait_until(
            lambda: old.broker.requests_of(LeaderAndIsrRequest)[-1].controller_epoch
            == new.controller.ctx.epoch
        )
        lai = old.broker.requests_of(LeaderAndIsrRequest)[-1]
        assert lai.broker_epoch == old.broker.fence.broker_epoch


@async_test
async def test_a_failed_fenced_write_makes_the_controller_resign(new_backend: NewBackend) -> None:
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2, 3)
        first = await c.wait_for_controller()
        epoch = first.controller.ctx.epoch
        await c.create_topic("y", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        await wait_for_states(c, "y", 3, lambda s: True)
        # Someone else writes /controller_epoch: the next fenced write must fail.
        data, stat = await c.store.get(paths.CONTROLLER_EPOCH)
        await c.store.set(paths.CONTROLLER_EPOCH, data, version=stat.version)
        victim = next(b for b in (1, 2, 3) if b != first.broker_id)
        await c.kill(victim)
        states = await wait_for_states(
            c, "y", 3, lambda s: all(victim not in st.isr for st in s.values())
        )
        now = await c.wait_for_controller()
        assert now.controller.ctx.epoch == epoch + 1 == await c.controller_epoch()
        assert all(st.controller_epoch == epoch + 1 for st in states.values())
        if now.broker_id != first.broker_id:
            assert not first.controller.active
            assert first.channel.synced[-1] == {}


@async_test
async def test_pending_topic_deletion_completes_after_controller_failover(
    new_backend: NewBackend,
) -> None:
    async with Cluster(new_backend()) as c:
        first = await c.start(0)
        assert first.controller.active
        await c.start_all(1, 2)
        await c.create_topic("doomed", {0: [1, 2], 1: [2, 1]})
        await c.create_topic("kept", {0: [1, 2]})
        for t, n in (("doomed", 2), ("kept", 1)):
            await wait_for_states(c, t, n, lambda s: True)
        await c.kill(2)
        await wait_for_states(c, "doomed", 2, lambda s: all(st.leader == 1 for st in s.values()))
        await c.delete_topic("doomed")
        b1 = c.nodes[1].broker
        await wait_until(lambda: len(b1.deleted) == 2, what=lambda: b1.deleted)
        await c.settle()
        # Replica 2 is dead: the topic waits, its live replica is gone, brokers forgot it.
        assert await c.topic_exists("doomed")
        assert all(tp.topic != "doomed" for tp in b1.metadata)
        assert first.controller.ctx.is_queued_for_deletion("doomed")

        await c.kill(0)  # the controller goes; broker 1 takes over with the deletion pending
        second = await c.wait_for_controller()
        assert second.broker_id == 1
        assert second.controller.ctx.is_queued_for_deletion("doomed")
        returning = await c.start(2)
        await wait_until(
            lambda: len(returning.broker.deleted) == 2,
            timeout_s=15,
            what=lambda: (returning.broker.deleted, returning.broker.received),
        )
        for _ in range(200):
            if not await c.topic_exists("doomed"):
                break
            await c.backend.settle()
        assert not await c.topic_exists("doomed")
        await c.settle()  # the controller forgets the topic right after removing its nodes
        assert await c.store.exists(paths.delete_topic_path("doomed")) is None
        assert await c.store.exists(paths.topic_config_path("doomed")) is None
        assert not second.controller.ctx.is_queued_for_deletion("doomed")
        assert "doomed" not in second.controller.ctx.assignments
        assert {tp.partition for tp in returning.broker.deleted} == {0, 1}
        stops = returning.broker.requests_of(StopReplicaRequest)
        assert all(p.delete_partition for r in stops for p in r.partitions)
        # The other topic is untouched.
        await c.settle()
        assert (await c.state("kept", 0)) is not None
        assert TopicPartition("kept", 0) in returning.broker.partitions


@async_test
async def test_deletion_requested_without_a_controller_runs_at_failover(
    new_backend: NewBackend,
) -> None:
    async with Cluster(new_backend()) as c:
        await c.start(1)
        await c.create_topic("gone", {0: [1]})
        await wait_for_states(c, "gone", 1, lambda s: True)
        await c.kill(1)
        await c.delete_topic("gone")  # nobody is controller now
        node = await c.start(1)
        assert node.controller.active
        for _ in range(200):
            if not await c.topic_exists("gone"):
                break
            await c.backend.settle()
        assert not await c.topic_exists("gone")
        assert node.broker.deleted == [TopicPartition("gone", 0)]


@async_test
async def test_added_partitions_come_online(new_backend: NewBackend) -> None:
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2)
        tid = await c.create_topic("grow", {0: [1, 2]})
        await wait_for_states(c, "grow", 1, lambda s: True)
        _, stat = await c.store.get(paths.topic_path("grow"))
        grown = paths.TopicAssignment(tid, {0: [1, 2], 1: [2, 1], 2: [1, 2]})
        await c.store.set(paths.topic_path("grow"), grown.to_json(), version=stat.version)
        states = await wait_for_states(c, "grow", 3, lambda s: True)
        assert [st.leader for st in states.values()] == [1, 2, 1]
        await c.settle()
        assert {tp.partition for tp in c.nodes[2].broker.partitions} == {0, 1, 2}


@async_test
async def test_controller_waits_out_a_connection_loss() -> None:
    backend = EmbeddedBackend()
    async with Cluster(backend) as c:
        await c.start_all(1, 2, 3)
        ctrl = await c.wait_for_controller()
        await c.create_topic("z", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        before = await wait_for_states(c, "z", 3, lambda s: True)
        victim = next(b for b in (1, 2, 3) if b != ctrl.broker_id)
        backend.coordinator.suspend_session(ctrl.store.session_id)
        await c.kill(victim)
        await backend.settle()
        assert await c.states("z", 3) == before  # the watch event is held back
        # An event that needs the store waits for the connection instead of failing.
        pending = asyncio.create_task(ctrl.controller.submit(ctrl.controller._on_broker_change))
        await asyncio.sleep(0.2)
        assert not pending.done()
        backend.coordinator.resume_session(ctrl.store.session_id)
        await asyncio.wait_for(pending, 10)
        await wait_for_states(c, "z", 3, lambda s: all(victim not in st.isr for st in s.values()))
        assert ctrl.controller.active and c.controller() is ctrl


@async_test
async def test_a_returning_broker_learns_every_partition_before_any_leader_and_isr(
    new_backend: NewBackend,
) -> None:
    """Kafka's onBrokerStartup: the new broker's first request is an UpdateMetadata with every
    partition, in a batch of its own, before the LeaderAndIsr of its replicas -- so when it
    becomes leader of an internal partition (a transaction coordinator, which skips markers
    for partitions its cache lacks as deleted) it already knows every partition."""
    async with Cluster(new_backend()) as c:
        await c.start(0)
        await c.start_all(1, 2)
        await c.create_topic("t", {0: [1, 2], 1: [2, 1]})
        await c.create_topic("u", {0: [2]})
        await wait_for_states(c, "t", 2, lambda s: True)
        await c.kill(2)
        await wait_for_states(c, "t", 2, lambda s: all(st.leader == 1 for st in s.values()))
        returned = await c.start(2)
        await wait_for_states(c, "u", 1, lambda s: s[0].leader == 2)
        await c.settle()
        first = returned.broker.received[0]
        assert isinstance(first, UpdateMetadataRequest), returned.broker.received
        assert {(s.topic_name, s.partition_index) for s in first.partition_states} == {
            ("t", 0),
            ("t", 1),
            ("u", 0),
        }
        assert any(isinstance(r, LeaderAndIsrRequest) for r in returned.broker.received[1:])


@async_test
async def test_a_new_controller_sends_every_partition_before_any_leader_and_isr(
    new_backend: NewBackend,
) -> None:
    """At failover the new controller's first request to every live broker is an
    UpdateMetadata of every partition, in a batch of its own (Kafka's comes before the state
    machines' LeaderAndIsrs too), so a broker that restarted while no controller acted knows
    every partition before it leads one."""
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2, 3)
        old = await c.wait_for_controller()
        await c.create_topic("x", {0: [1, 2, 3], 1: [2, 3, 1]})
        await c.create_topic("y", {0: [3, 1]})
        await wait_for_states(c, "x", 2, lambda s: True)
        await c.kill(old.broker_id)
        new = await c.wait_for_controller(other_than=old.broker_id)
        epoch = new.controller.ctx.epoch
        await c.settle()
        for b in (1, 2, 3):
            if b == old.broker_id:
                continue
            got = [r for r in c.nodes[b].broker.received if r.controller_epoch == epoch]
            assert got and isinstance(got[0], UpdateMetadataRequest), got
            assert {(s.topic_name, s.partition_index) for s in got[0].partition_states} == {
                ("x", 0),
                ("x", 1),
                ("y", 0),
            }


@async_test
async def test_at_failover_the_elected_leaders_go_out_before_the_dead_replicas_isr_writes(
    new_backend: NewBackend,
) -> None:
    """The controller died with its broker: the new controller announces every partition,
    then sends the leaders it elected (LeaderAndIsr, then their metadata) BEFORE it writes the
    dead broker out of the ISRs of the partitions it followed (thousands of writes at 10,000
    partitions), then those. No partition state is sent to a broker twice in the event."""
    async with Cluster(new_backend()) as c:
        await c.start_all(1, 2, 3)
        old = await c.wait_for_controller()
        dead = old.broker_id
        live = sorted({1, 2, 3} - {dead})
        rotations = [[dead, *live], [live[0], dead, live[1]], [live[1], live[0], dead]]
        await c.create_topic("x", {p: rotations[p % 3] for p in range(6)})
        await wait_for_states(c, "x", 6, lambda s: all(len(st.isr) == 3 for st in s.values()))
        led = {p for p in range(6) if rotations[p % 3][0] == dead}
        await c.kill(dead)
        new = await c.wait_for_controller(other_than=dead)
        epoch = new.controller.ctx.epoch
        await wait_for_states(c, "x", 6, lambda s: all(dead not in st.isr for st in s.values()))
        await c.settle()
        for b in live:
            got = [r for r in c.nodes[b].broker.received if r.controller_epoch == epoch]
            kinds = [type(r).__name__[0] for r in got]  # U(pdateMetadata), L(eaderAndIsr)
            assert kinds[:5] == ["U", "L", "U", "L", "U"], kinds
            announce, elected, elected_md, shrunk, shrunk_md = got[:5]
            assert len(announce.partition_states) == 6
            first = {s.partition_index: s for s in elected.partition_states}
            for p in led:
                assert first[p].leader != dead and dead not in first[p].isr
            for p in set(range(6)) - led:  # still listed: their ISR write comes later
                assert dead in first[p].isr
            assert {s.partition_index for s in elected_md.partition_states} == led
            assert all(s.leader != dead for s in elected_md.partition_states)
            later = {s.partition_index for s in shrunk.partition_states}
            assert later == {p for p in set(range(6)) - led if b in rotations[p % 3]}
            assert all(dead not in s.isr for s in shrunk.partition_states)
            assert {s.partition_index for s in shrunk_md.partition_states} == set(range(6)) - led
            seen = [(s.partition_index, s.leader_epoch) for r in got
                    if isinstance(r, UpdateMetadataRequest) for s in r.partition_states]
            assert len(seen) == len(set(seen)), seen
