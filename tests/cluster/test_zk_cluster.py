"""Three `wherry server --zookeeper` processes on a real ZooKeeper (`ZkCluster`): controller
failover, partition leader failover and session expiry, with ZooKeeper's short test timings
(session timeout 4 s, tickTime 100 ms). Every process is bounded and stopped by its PID."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.helpers import zk_cluster
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 4_000
# Kafka's bound for a crashed broker's partitions: its session expires, then the controller
# moves leadership at once.
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 1.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with zk_cluster(zookeeper, tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as c:
        yield c


def _metadata_agrees(c: ZkCluster, brokers: list[int], topic: str | None = None) -> bool:
    views = [c.metadata(b, None if topic is None else [topic]) for b in brokers]
    first = views[0]
    return all(
        v.brokers == first.brokers
        and v.controller_id == first.controller_id
        and v.topics == first.topics
        for v in views
    )


def test_controller_failover_after_kill_9(cluster: ZkCluster) -> None:
    c = cluster
    assert wait_until(lambda: c.controller() is not None, 10)
    assert c.registered_brokers() == {0, 1, 2}
    old, epoch = c.controller(), c.controller_epoch()
    assert old is not None
    # Every broker learns the live brokers and the controller from UpdateMetadata.
    assert wait_until(
        lambda: all(
            set(c.metadata(b).brokers) == {0, 1, 2} and c.metadata(b).controller_id == old
            for b in range(3)
        ),
        10,
    ), [c.metadata(b) for b in range(3)]
    cluster_ids = {c.metadata(b).cluster_id for b in range(3)}
    assert len(cluster_ids) == 1 and None not in cluster_ids  # /cluster/id, one for all

    started = time.monotonic()
    c.kill(old)
    assert wait_until(lambda: c.controller() not in (None, old), FAILOVER_BOUND_S, 0.02)
    elapsed = time.monotonic() - started
    new = c.controller()
    assert new in {0, 1, 2} - {old}
    assert c.controller_epoch() > epoch
    print(f"controller {old} -> {new} in {elapsed:.2f} s")
    survivors = sorted({0, 1, 2} - {old})
    assert wait_until(
        lambda: all(
            set(c.metadata(b).brokers) == set(survivors) and c.metadata(b).controller_id == new
            for b in survivors
        ),
        5,
    )


def test_leader_failover_after_kill_9_and_restart(cluster: ZkCluster) -> None:
    c = cluster
    topic = "events"
    # Preferred replicas spread over the brokers: partition p is led by broker p % 3.
    c.create_topic(topic, {p: [(p + i) % 3 for i in range(3)] for p in range(6)})
    assert wait_until(lambda: all(c.partition_state(topic, p) for p in range(6)), 10)
    before = {p: c.partition_state(topic, p) for p in range(6)}
    assert {p: s.leader for p, s in before.items() if s} == {p: p % 3 for p in range(6)}
    assert wait_until(lambda: c.metadata(0, [topic]).leaders(topic) == {
        p: p % 3 for p in range(6)
    }, 10)
    assert wait_until(lambda: _metadata_agrees(c, [0, 1, 2], topic), 10)

    controller = c.controller()
    assert controller is not None
    victim = (controller + 1) % 3  # a leader that is not the controller
    led = [p for p in range(6) if p % 3 == victim]
    survivors = sorted({0, 1, 2} - {victim})
    old_epoch = c.broker_epoch(victim)
    assert old_epoch is not None

    started = time.monotonic()
    c.kill(victim)

    def moved() -> bool:
        for p in led:
            s = c.partition_state(topic, p)
            if s is None or s.leader == victim or s.leader_epoch <= before[p].leader_epoch:  # type: ignore[union-attr]
                return False
        return True

    assert wait_until(moved, FAILOVER_BOUND_S, 0.02), {p: c.partition_state(topic, p) for p in led}
    elapsed = time.monotonic() - started
    print(f"partitions {led} moved off broker {victim} in {elapsed:.2f} s")
    for p in led:
        s = c.partition_state(topic, p)
        assert s is not None and s.leader in survivors
        assert s.leader in before[p].isr  # type: ignore[union-attr]
        assert victim not in s.isr
    assert c.controller() == controller  # the controller was not the victim

    # The survivors' metadata caches follow (UpdateMetadata over the network).
    def caches_follow() -> bool:
        for b in survivors:
            v = c.metadata(b, [topic])
            if set(v.brokers) != set(survivors):
                return False
            for p in led:
                pv = v.partitions(topic).get(p)
                if pv is None or pv.leader not in survivors or pv.error_code != ErrorCode.none:
                    return False
                if victim not in pv.offline_replicas:
                    return False
        return True

    assert wait_until(caches_follow, 5), [c.metadata(b, [topic]) for b in survivors]

    # Back again: a new registration (a new broker epoch), live in every cache.
    c.start_broker(victim)
    assert wait_until(lambda: c.broker_epoch(victim) is not None, 10)
    assert c.broker_epoch(victim) > old_epoch  # type: ignore[operator]
    assert wait_until(
        lambda: all(set(c.metadata(b).brokers) == {0, 1, 2} for b in range(3)), 10
    )


def test_session_expiry_during_a_pause_moves_the_controller(cluster: ZkCluster) -> None:
    """A paused controller (a long GC pause, SIGSTOP here) loses its session: another broker
    takes over; when it runs again it registers with a new session and broker epoch, and its
    old controller instance is gone (only one controller in /controller)."""
    c = cluster
    assert wait_until(lambda: c.controller() is not None, 10)
    old, epoch = c.controller(), c.controller_epoch()
    assert old is not None
    old_broker_epoch = c.broker_epoch(old)
    c.pause(old)
    try:
        assert wait_until(lambda: c.controller() not in (None, old), FAILOVER_BOUND_S, 0.05)
        assert old not in c.registered_brokers()
    finally:
        c.resume(old)
    new = c.controller()
    assert c.controller_epoch() > epoch
    # It notices the expiry on reconnecting, then registers on a new session.
    assert wait_until(lambda: c.broker_epoch(old) is not None, 10)
    assert c.broker_epoch(old) > old_broker_epoch  # type: ignore[operator]
    assert c.is_running(old)
    assert c.controller() == new
    assert wait_until(
        lambda: all(
            set(c.metadata(b).brokers) == {0, 1, 2} and c.metadata(b).controller_id == new
            for b in range(3)
        ),
        10,
    )
    assert "re-registered on session" in c.output(old)
