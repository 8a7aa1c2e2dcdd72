"""Cluster operations on the controller of a real dev cluster (SPEC H8, H10, H11): partition
reassignment (with cancellation, replication-factor changes, the legacy node, a controller
failover in the middle), preferred and unclean elections, auto leader rebalance and
controlled shutdown, driven through the controller's API (the wire APIs and tools call it)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic
from tests.log.logtest_util import read_all
from wherry.common.topic_partition import TopicPartition
from wherry.controller.controller import Controller
from wherry.coordination import paths
from wherry.testing.cluster import DevCluster, wait_until

TIMEOUT_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path,
        brokers=4,
        overrides={
            "offsets.topic.replication.factor": "1",
            "auto.leader.rebalance.enable": "false",
            "replica.lag.time.max.ms": "3000",
        },
    ).start()
    try:
        c.wait_for_controller()
        yield c
    finally:
        c.stop()


def controller(c: DevCluster) -> Controller:
    """The acting controller (callable on the cluster's loop too)."""
    cid = c.cluster.controller_id
    assert cid is not None, "no controller"
    return c.cluster.brokers[cid].controller


def produce(c: DevCluster, topic: str, n: int, partitions: int = 1) -> None:
    p = Producer(
        {"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0}
    )
    errors: list[object] = []
    for i in range(n):
        p.produce(
            topic,
            f"v{i}".encode(),
            partition=i % partitions,
            on_delivery=lambda e, _m: e and errors.append(e),
        )
    assert p.flush(TIMEOUT_S) == 0
    assert not errors, errors


def consume_all(c: DevCluster, topic: str, partition: int) -> list[bytes]:
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        cons.assign([KafkaTopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        idle = 0
        while idle < 3:
            msgs = cons.consume(500, 1.0)
            if not msgs:
                idle += 1
            for m in msgs:
                assert m.error() is None, m.error()
                out.append(m.value())
        return out
    finally:
        cons.close()


def state(c: DevCluster, tp: TopicPartition) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """(replicas, leader, isr) as the controller knows them."""

    def get() -> tuple[tuple[int, ...], int, tuple[int, ...]]:
        ctl = controller(c)
        st = ctl.ctx.states[tp]
        return ctl.ctx.replicas(tp), st.leader, tuple(sorted(st.isr))

    return c.call(get)


def hosted(c: DevCluster, broker: int, tp: TopicPartition) -> bool:
    return c.call(lambda: c.broker(broker).replica_manager.get_partition(tp) is not None)


def log_bytes(c: DevCluster, broker: int, tp: TopicPartition) -> bytes:
    def read() -> bytes:
        part = c.broker(broker).replica_manager.get_partition(tp)
        assert part is not None
        return read_all(part.log)

    return c.call(read)


def partition_dir(c: DevCluster, broker: int, tp: TopicPartition) -> Path:
    return c.cluster.directory / f"broker-{broker}" / f"{tp.topic}-{tp.partition}"


def stored_assignment(c: DevCluster, topic: str) -> paths.TopicAssignment:
    async def read() -> paths.TopicAssignment:
        data, _ = await controller(c).store.get(paths.topic_path(topic))
        return paths.TopicAssignment.from_json(data)

    return c.run(read())


def reassign(
    c: DevCluster, targets: dict[TopicPartition, list[int] | None]
) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    out = c.run(controller(c).alter_partition_reassignments(targets))
    assert out is not None
    return out


def wait_reassigned(c: DevCluster, tps: list[TopicPartition]) -> None:
    def done() -> bool:
        ongoing = c.run(controller(c).list_partition_reassignments(tps))
        return ongoing == {}

    assert wait_until(done, TIMEOUT_S), c.run(controller(c).list_partition_reassignments(None))


def topic_name() -> str:
    return f"ops-{uuid.uuid4().hex[:8]}"


# --- reassignment -----------------------------------------------------------------------------
def test_reassignment_moves_replicas_keeps_data_and_deletes_the_old_ones(
    cluster: DevCluster,
) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[0, 1, 2], [1, 2, 0]], **{"min.insync.replicas": "2"})
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    produce(c, topic, 400, partitions=2)

    results = reassign(c, {tps[0]: [3, 1, 2], tps[1]: [2, 3, 1]})
    assert results == {tps[0]: (ErrorCode.none, None), tps[1]: (ErrorCode.none, None)}
    wait_reassigned(c, tps)

    assert state(c, tps[0])[0] == (3, 1, 2)
    assert state(c, tps[1])[0] == (2, 3, 1)
    a = stored_assignment(c, topic)
    assert a.partitions == {0: [3, 1, 2], 1: [2, 3, 1]} and not a.adding and not a.removing
    for tp, gone in ((tps[0], 0), (tps[1], 0)):
        replicas, leader, isr = state(c, tp)
        assert leader in replicas and set(isr) <= set(replicas)
        assert wait_until(lambda tp=tp, gone=gone: not hosted(c, gone, tp), TIMEOUT_S)
        assert wait_until(lambda tp=tp, gone=gone: not partition_dir(c, gone, tp).exists(), 10)
        # Every new replica holds the same bytes as the leader.
        assert wait_until(
            lambda tp=tp: len({log_bytes(c, b, tp) for b in state(c, tp)[0]}) == 1, TIMEOUT_S
        )
    # Nothing lost, nothing doubled, and producing goes on.
    assert sorted(consume_all(c, topic, 0) + consume_all(c, topic, 1)) == sorted(
        f"v{i}".encode() for i in range(400)
    )
    produce(c, topic, 10, partitions=2)


def test_a_broker_down_during_a_move_away_deletes_its_stray_replica_when_it_starts(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that is down while its replica is reassigned away never gets the StopReplica
    that would delete it. When it starts again the controller sends it a FULL LeaderAndIsr
    naming every partition it is a replica of, and the broker stops and deletes the ones the
    request does not name (a broker that stays up and misses a StopReplica because the
    controller died is the simulator's case: the next controller's FULL LeaderAndIsr)."""
    c, topic = cluster, topic_name()
    tp = TopicPartition(topic, 0)
    create_topic(c.bootstrap, topic, [[0, 1]])
    produce(c, topic, 200)
    assert wait_until(lambda: state(c, tp)[2] == (0, 1), TIMEOUT_S)
    assert c.controller_id != 1, "the test stops broker 1: it must not be the controller"

    c.stop_broker(1, controlled=False)
    reassign(c, {tp: [0, 2]})
    wait_reassigned(c, [tp])
    assert state(c, tp)[0] == (0, 2)
    stray = partition_dir(c, 1, tp)
    assert stray.exists()  # broker 1 was down: no StopReplica reached it

    with caplog.at_level(logging.WARNING, logger="wherry.state_change"):
        c.start_broker(1)
        assert wait_until(lambda: not stray.exists(), TIMEOUT_S)
    assert not hosted(c, 1, tp)
    assert any("stray partition" in r.getMessage() for r in caplog.records)
    # The partition's own replicas keep every record.
    assert consume_all(c, topic, 0) == [f"v{i}".encode() for i in range(200)]
    produce(c, topic, 10)


def test_replication_factor_changes_by_reassignment(cluster: DevCluster) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[1]])
    tp = TopicPartition(topic, 0)
    produce(c, topic, 100)

    reassign(c, {tp: [1, 2, 3]})  # 1 -> 3
    wait_reassigned(c, [tp])
    assert state(c, tp) == ((1, 2, 3), 1, (1, 2, 3))

    reassign(c, {tp: [2, 3]})  # 3 -> 2, the leader leaves
    wait_reassigned(c, [tp])
    replicas, leader, isr = state(c, tp)
    assert replicas == (2, 3) and leader == 2 and isr == (2, 3)
    assert wait_until(lambda: not hosted(c, 1, tp), TIMEOUT_S)
    assert consume_all(c, topic, 0) == [f"v{i}".encode() for i in range(100)]


def test_cancel_and_validation(cluster: DevCluster) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[0, 1]])
    tp = TopicPartition(topic, 0)
    # Bad targets are refused with Kafka's errors; nothing starts.
    bad = reassign(
        c,
        {
            tp: [0, 0],
            TopicPartition(topic, 7): [0, 1],
            TopicPartition("nope", 0): [0],
        },
    )
    assert bad[tp][0] is ErrorCode.invalid_replica_assignment
    assert bad[TopicPartition(topic, 7)][0] is ErrorCode.unknown_topic_or_partition
    assert bad[TopicPartition("nope", 0)][0] is ErrorCode.unknown_topic_or_partition
    assert reassign(c, {tp: []})[tp][0] is ErrorCode.invalid_replica_assignment
    assert reassign(c, {tp: [0, 9]})[tp][0] is ErrorCode.invalid_replica_assignment
    assert reassign(c, {tp: None})[tp][0] is ErrorCode.no_reassignment_in_progress
    assert state(c, tp)[0] == (0, 1)

    # A reassignment that cannot finish is cancelled: its new replica's broker goes into
    # controlled shutdown in the controller event right after the reassignment starts (so it
    # can never join the ISR), then stops.
    produce(c, topic, 50)

    async def start_then_shut_down_3() -> None:
        ctl = controller(c)
        epoch = ctl.ctx.live_brokers[3].epoch
        started, _ = await asyncio.gather(
            ctl.alter_partition_reassignments({tp: [0, 1, 3]}),
            ctl.controlled_shutdown(3, epoch),
        )
        assert started == {tp: (ErrorCode.none, None)}

    c.run(start_then_shut_down_3())
    c.stop_broker(3)
    ongoing = c.run(controller(c).list_partition_reassignments(None))
    assert ongoing is not None and ongoing[tp].adding == (3,)
    assert stored_assignment(c, topic).adding == {0: [3]}
    assert reassign(c, {tp: None}) == {tp: (ErrorCode.none, None)}
    wait_reassigned(c, [tp])
    assert state(c, tp)[0] == (0, 1)
    assert stored_assignment(c, topic).partitions == {0: [0, 1]}


def test_legacy_node_reassignment_and_failover_mid_reassignment(cluster: DevCluster) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[0, 1, 2]])
    tp = TopicPartition(topic, 0)
    produce(c, topic, 200)
    # The new replica's broker is down: the reassignment stays in phase A.
    c.stop_broker(3)
    assert wait_until(lambda: 3 not in c.call(lambda: controller(c).ctx.live_brokers), 10)
    first = c.wait_for_controller()

    async def write_node() -> None:
        await controller(c).store.create(
            paths.ADMIN_REASSIGN_PARTITIONS, paths.encode_reassignment({(topic, 0): [1, 2, 3]})
        )

    # Validation refuses a new replica on a dead broker: start 3 again first.
    c.start_broker(3)
    assert wait_until(lambda: 3 in c.call(lambda: controller(c).ctx.live_brokers), 10)
    c.run(write_node())
    # The controller fails over (its broker stops) while the partition moves.
    c.stop_broker(first)
    second = c.wait_for_controller()
    assert second != first
    wait_reassigned(c, [tp])
    replicas, leader, _ = state(c, tp)
    assert replicas == (1, 2, 3) and leader in (1, 2, 3)

    async def node_gone() -> bool:
        return await controller(c).store.exists(paths.ADMIN_REASSIGN_PARTITIONS) is None

    assert wait_until(lambda: c.run(node_gone()), TIMEOUT_S)
    assert consume_all(c, topic, 0) == [f"v{i}".encode() for i in range(200)]


# --- elections --------------------------------------------------------------------------------
def test_preferred_and_unclean_elections(cluster: DevCluster) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[1, 2], [2, 1]])
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    produce(c, topic, 20, partitions=2)
    c.stop_broker(1)  # a clean stop: leadership of tp0 moves to 2
    assert wait_until(lambda: state(c, tp0)[1] == 2, TIMEOUT_S)
    c.start_broker(1)
    assert wait_until(lambda: state(c, tp0)[2] == (1, 2), TIMEOUT_S)
    assert state(c, tp0)[1] == 2

    out = c.run(controller(c).elect_leaders(0, [tp0, tp1, TopicPartition(topic, 9)]))
    assert out is not None
    assert out[tp0] == (ErrorCode.none, None)
    assert out[tp1][0] is ErrorCode.election_not_needed
    assert out[TopicPartition(topic, 9)][0] is ErrorCode.unknown_topic_or_partition
    assert state(c, tp0)[1] == 1

    # Unclean: only a partition without a live leader is elected.
    out = c.run(controller(c).elect_leaders(1, [tp0]))
    assert out == {tp0: (ErrorCode.election_not_needed, "Leader election not needed")}


def test_auto_rebalance_gives_leadership_back(tmp_path: Path) -> None:
    c = DevCluster(
        tmp_path,
        brokers=3,
        overrides={
            "offsets.topic.replication.factor": "1",
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "1",
            "leader.imbalance.per.broker.percentage": "0",
        },
    ).start()
    try:
        topic = topic_name()
        create_topic(c.bootstrap, topic, [[0, 1, 2], [1, 2, 0], [2, 0, 1]])
        tps = [TopicPartition(topic, p) for p in range(3)]
        for b in (0, 1, 2):
            c.stop_broker(b)
            c.start_broker(b)
            assert wait_until(lambda: c.controller_id is not None, 10)
        assert wait_until(
            lambda: all(state(c, tp)[1] == state(c, tp)[0][0] for tp in tps), TIMEOUT_S
        ), [state(c, tp) for tp in tps]
    finally:
        c.stop()


# --- controlled shutdown ----------------------------------------------------------------------
def test_controlled_shutdown_moves_leadership_and_isr(cluster: DevCluster) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[1, 2, 3], [2, 1, 3], [1, 3, 2]])
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert wait_until(lambda: all(len(state(c, tp)[2]) == len(state(c, tp)[0]) for tp in tps), 20)
    epoch = c.call(lambda: controller(c).ctx.live_brokers[1].epoch)
    stale = c.run(controller(c).controlled_shutdown(1, epoch - 1))
    assert stale == (ErrorCode.stale_broker_epoch, [])
    assert c.run(controller(c).controlled_shutdown(42, -1)) == (
        ErrorCode.broker_not_available,
        [],
    )

    assert c.run(controller(c).controlled_shutdown(1, epoch)) == (ErrorCode.none, [])
    for tp in tps:
        _, leader, isr = state(c, tp)
        assert leader != 1 and 1 not in isr
    # A shutting-down broker may not lead or rejoin the ISR meanwhile.
    out = c.run(controller(c).elect_leaders(0, [tps[0]]))
    assert out is not None and out[tps[0]][0] is ErrorCode.preferred_leader_not_available


def test_controlled_shutdown_of_the_last_isr_member_leaves_it_leading(
    cluster: DevCluster,
) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[2, 3]])
    tp = TopicPartition(topic, 0)
    c.stop_broker(3)
    assert wait_until(lambda: state(c, tp)[2] == (2,), TIMEOUT_S)
    epoch = c.call(lambda: controller(c).ctx.live_brokers[2].epoch)
    assert c.run(controller(c).controlled_shutdown(2, epoch)) == (ErrorCode.none, [tp])
    assert state(c, tp)[1] == 2


def test_preferred_replica_election_node(cluster: DevCluster) -> None:
    c, topic = cluster, topic_name()
    create_topic(c.bootstrap, topic, [[2, 3]])
    tp = TopicPartition(topic, 0)
    c.stop_broker(2)
    assert wait_until(lambda: state(c, tp)[1] == 3, TIMEOUT_S)
    c.start_broker(2)
    assert wait_until(lambda: state(c, tp)[2] == (2, 3), TIMEOUT_S)

    async def request() -> None:
        await controller(c).store.create(
            paths.ADMIN_PREFERRED_REPLICA_ELECTION, paths.encode_partition_list([(topic, 0)])
        )

    async def node_gone() -> bool:
        return await controller(c).store.exists(paths.ADMIN_PREFERRED_REPLICA_ELECTION) is None

    c.run(request())
    assert wait_until(lambda: state(c, tp)[1] == 2, TIMEOUT_S)
    assert wait_until(lambda: c.run(node_gone()), TIMEOUT_S)


def _left_by_a_lost_controller(
    c: DevCluster, topic: str, *, still_removing: bool
) -> tuple[TopicPartition, int, int]:
    """A partition on [stray, a, b] led by `stray`, 50 records in; then the store a controller
    lost mid-step leaves -- the replicas [a, b], still removing b (`still_removing`) or no
    reassignment at all, `stray` leading in the ISR -- and the next controller takes over from
    it. Returns the partition, `stray` and `a`."""
    first = c.wait_for_controller()
    stray, a, b = (x for x in range(4) if x != first)
    create_topic(c.bootstrap, topic, [[stray, a, b]])
    tp = TopicPartition(topic, 0)
    produce(c, topic, 50)
    assert wait_until(lambda: state(c, tp)[1:] == (stray, tuple(sorted((stray, a, b)))), 10)
    removing = {0: [b]} if still_removing else {}
    left = paths.TopicAssignment(stored_assignment(c, topic).topic_id, {0: [a, b]}, {}, removing)

    async def write() -> None:
        await controller(c).store.set(paths.topic_path(topic), left.to_json())

    c.run(write())
    c.stop_broker(first)  # the next controller reads that store
    assert c.wait_for_controller() != first
    return tp, stray, a


def test_a_failover_drops_isr_members_a_replaced_reassignment_left_outside_the_replicas(
    cluster: DevCluster,
) -> None:
    """A reassignment replaced by another stores the new replica list first and takes the
    old one's extra replicas out of the ISR after. The store as a controller lost between the
    two leaves it: the leader, in the ISR, no longer among the replicas. The next controller
    takes it out of the ISR and the leadership (and stops and deletes it there) before it
    completes the reassignment."""
    c, topic = cluster, topic_name()
    tp, stray, a = _left_by_a_lost_controller(c, topic, still_removing=True)
    wait_reassigned(c, [tp])
    assert wait_until(lambda: state(c, tp) == ((a,), a, (a,)), TIMEOUT_S), state(c, tp)
    assert wait_until(lambda: not hosted(c, stray, tp), TIMEOUT_S)
    produce(c, topic, 10)
    assert len(consume_all(c, topic, 0)) == 60


def test_a_failover_drops_isr_members_a_cancelled_reassignment_left_outside_the_replicas(
    cluster: DevCluster,
) -> None:
    """A cancelled reassignment stores the original replicas first -- no longer a
    reassignment -- and takes the replicas it was adding out of the ISR after. The store as a
    controller lost between the two leaves it: no reassignment in progress, and the leader, in
    the ISR, not among the replicas. The next controller takes it out of the ISR and the
    leadership and stops and deletes it there: were it left in, a later reassignment adding
    it back would find it "in sync" whatever its log then held."""
    c, topic = cluster, topic_name()
    tp, stray, _ = _left_by_a_lost_controller(c, topic, still_removing=False)
    assert wait_until(lambda: state(c, tp)[1] != stray and stray not in state(c, tp)[2], 30)
    assert wait_until(lambda: not hosted(c, stray, tp), TIMEOUT_S)
    produce(c, topic, 10)
    assert len(consume_all(c, topic, 0)) == 60
