"""Issue 16 acceptance: a share group's state survives a kill -9 of the broker that leads
the shared partition and is the share coordinator and the group coordinator, on 3
`wherry server --zookeeper` processes with RF 3 internal topics (min ISR 2).

A ShareConsumer (explicit acknowledgements) accepts the first half of the records and holds
the rest acquired, unacknowledged (locks of a minute); a second member joins and gets
nothing; broker 0 (leader of the topic partition, `__share_group_state-0` and
`__consumer_offsets-0`) is killed with SIGKILL. The second member, carried over to the new
coordinators, then gets every record that was not accepted -- the held ones again, at once
(their acquisition was never acknowledged and died with the old leader) and the ones
produced after the kill -- and none that was accepted: the new share-partition leader resumed
from the state the share coordinator had replicated.

Share-group membership is in `__consumer_offsets` (Kafka 4.1's share-group records): a member
that joined before the kill heartbeats the new group coordinator with its id and epoch and is
answered with them (no UNKNOWN_MEMBER_ID, no rejoin)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer
from kio.schema.errors import ErrorCode

from tests.helpers import zk_cluster
from tests.kafka_wire import call
from tests.share.share_harness import set_group_configs, share_consumer
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

TOPIC = "shared"
FIRST, AFTER = 200, 50


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    overrides = {
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.num.partitions": "1",
        "share.coordinator.state.topic.min.isr": "2",
        "min.insync.replicas": "2",
        "replica.lag.time.max.ms": "3000",
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.min.heartbeat.interval.ms": "500",
        "group.share.heartbeat.interval.ms": "1000",
    }
    with zk_cluster(
        zookeeper, tmp_path, brokers=3, session_timeout_ms=4_000, overrides=overrides
    ) as c:
        yield c


def _produce(bootstrap: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(TOPIC, value=v, partition=0)
    assert p.flush(30) == 0


def _coordinator(bootstrap: str, group: str) -> str:
    for addr in bootstrap.split(","):
        try:
            r = call(addr, 10, 4, {"key_type": 0, "coordinator_keys": [group]})
        except OSError:
            continue
        c = r.coordinators[0]
        if c.error_code == ErrorCode.none:
            return f"{c.host}:{c.port}"
    return ""


def _heartbeat(bootstrap: str, group: str, member: str, epoch: int) -> tuple[ErrorCode, int]:
    """ShareGroupHeartbeat at the group's coordinator (retried while it moves or loads)."""
    out: list[tuple[ErrorCode, int]] = []

    def beat() -> bool:
        addr = _coordinator(bootstrap, group)
        if not addr:
            return False
        try:
            r = call(addr, 76, 1, {
                "group_id": group, "member_id": member, "member_epoch": epoch,
                "rack_id": None, "subscribed_topic_names": [TOPIC] if epoch == 0 else None})
        except OSError:
            return False
        out.append((ErrorCode(r.error_code), r.member_epoch))
        return r.error_code not in (
            ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
            ErrorCode.coordinator_load_in_progress)

    assert wait_until(beat, timeout_s=40, interval_s=0.3), out[-3:]
    return out[-1]


def test_share_state_survives_kill_9_of_leader_and_coordinators(cluster: ZkCluster) -> None:
    # Broker 0 leads the data partition and both coordinators' partitions; after its death
    # broker 1 leads the data partition and broker 2 is the share coordinator, so the new
    # leader reads and writes the share-partition state over the wire (APIs 84, 85).
    cluster.create_topic(TOPIC, {0: [0, 1, 2]})
    cluster.create_topic("__consumer_offsets", {0: [0, 1, 2]})
    cluster.create_topic("__share_group_state", {0: [0, 2, 1]})
    assert wait_until(
        lambda: all(
            (st := cluster.partition_state(t, 0)) is not None and len(st.isr) == 3
            for t in (TOPIC, "__share_group_state", "__consumer_offsets")
        ),
        timeout_s=30,
    )
    bs = cluster.bootstrap
    group = f"share-failover-{uuid.uuid4().hex[:6]}"
    set_group_configs(
        bs, group,
        {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"},
    )
    _produce(bs, [b"a%d" % i for i in range(FIRST)])

    accepted: set[int] = set()
    held: set[int] = set()
    c1 = share_consumer(bs, group, TOPIC, **{"share.acknowledgement.mode": "explicit"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(accepted) + len(held) < FIRST:
        msgs = [m for m in c1.poll(0.5) if m.error() is None]
        if not msgs:
            continue
        # accept up to the first half, hold the rest (acknowledged as nothing: the consumer
        # never polls again)
        to_accept = [m for m in msgs if m.offset() < FIRST // 2]
        for m in msgs:
            if m.offset() < FIRST // 2:
                c1.acknowledge(m, AcknowledgeType.ACCEPT)
        if to_accept:
            result = c1.commit_sync(30)
            for tp, err in result.items():
                assert err is None, (tp, err)
            accepted |= {m.offset() for m in to_accept}
        held |= {m.offset() for m in msgs if m.offset() >= FIRST // 2}
        if held:
            break
    assert accepted == set(range(FIRST // 2)), sorted(accepted)[:5]
    assert held, "some records held acquired at the kill"

    # A second member, in the group before the kill and still consuming after it: nothing
    # for it now (all records are accepted or held, and the locks last a minute).
    got: dict[int, int] = {}
    c2 = share_consumer(bs, group, TOPIC)
    before_kill = time.monotonic() + 3
    while time.monotonic() < before_kill:
        for m in c2.poll(0.3):
            if m.error() is None:
                got.setdefault(m.offset(), m.delivery_count())
    assert not got
    # a member heartbeating by hand, to see its id and epoch across the failover
    err, wire_epoch = _heartbeat(bs, group, "wire-member", 0)
    assert err == ErrorCode.none and wire_epoch > 0
    err, wire_epoch = _heartbeat(bs, group, "wire-member", wire_epoch)
    assert err == ErrorCode.none

    cluster.kill(0)
    closer = threading.Thread(target=c1.close, daemon=True)
    closer.start()  # it may wait on the dead broker; bounded below

    assert wait_until(
        lambda: all(
            (st := cluster.partition_state(t, 0)) is not None and st.leader in (1, 2)
            for t in (TOPIC, "__share_group_state", "__consumer_offsets")
        ),
        timeout_s=30,
    )
    survivors = ",".join(cluster.address(b) for b in (1, 2))
    # the new group coordinator loaded the share group: same member, same epoch
    assert _heartbeat(survivors, group, "wire-member", wire_epoch) == (ErrorCode.none, wire_epoch)
    _produce(survivors, [b"b%d" % i for i in range(AFTER)])

    try:
        end = time.monotonic() + 60
        want = set(range(FIRST // 2, FIRST + AFTER))
        while time.monotonic() < end and not want <= set(got):
            for m in c2.poll(0.5):
                if m.error() is None:
                    got.setdefault(m.offset(), m.delivery_count())
        quiet = time.monotonic() + 2
        while time.monotonic() < quiet:  # nothing else comes
            for m in c2.poll(0.3):
                if m.error() is None:
                    got.setdefault(m.offset(), m.delivery_count())
        c2.commit_sync(30)
    finally:
        c2.close()
    closer.join(30)
    assert not (set(got) & accepted), "an accepted record was delivered again"
    assert set(got) == set(range(FIRST // 2, FIRST + AFTER)), "no record lost"
    assert all(got[o] >= 2 for o in held), "held records came back as redeliveries"
    assert cluster.partition_state(TOPIC, 0).leader == 1  # type: ignore[union-attr]
    assert cluster.partition_state("__share_group_state", 0).leader == 2  # type: ignore[union-attr]
    assert "share-partition shared-0 of group" in cluster.output(1)
    assert "resumes at 100" in cluster.output(1)
    coordinator = cluster.partition_state("__consumer_offsets", 0).leader  # type: ignore[union-attr]
    assert "loaded 1 share groups of __consumer_offsets-0" in cluster.output(coordinator)
