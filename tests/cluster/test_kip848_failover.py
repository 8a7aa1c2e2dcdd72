"""KIP-848 group coordinator failover (issue 16 acceptance): ZooKeeper + 3 `wherry server
--zookeeper` processes, `__consumer_offsets` with RF 3 and min ISR 2 (one partition, so the
coordinator is its leader), a 6-partition RF 3 topic and three confluent-kafka consumers with
`group.protocol=consumer` committing every record synchronously.

kill -9 of the coordinator's broker while the group consumes: another broker becomes leader of
`__consumer_offsets-0`, rebuilds the group from the log (ConsumerGroupDescribe shows the same
group epoch, assignment epoch, members, member epochs and assignments as before the kill), the
committed offsets are there, and the group consumes the rest of the stream: every record is
delivered, none again after its commit was acknowledged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic, zk_cluster
from tests.kafka_wire import call
from tests.kip848_members import EventLog, Member, start_from_committed
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 6
E = ErrorCode


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    overrides = {
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": "1",
        "min.insync.replicas": "2",
        "replica.lag.time.max.ms": "3000",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.session.timeout.ms": "20000",
    }
    with zk_cluster(
        zookeeper, tmp_path, brokers=3, session_timeout_ms=4_000, overrides=overrides
    ) as c:
        yield c


def coordinator(cluster: ZkCluster, group: str, exclude: int | None = None) -> int:
    found: list[int] = []

    def find() -> bool:
        for b in cluster.broker_ids:
            if b == exclude or not cluster.is_running(b):
                continue
            try:
                c = call(cluster.address(b), 10, 4, {"key_type": 0, "coordinator_keys": [group]})
            except OSError:
                continue
            co = c.coordinators[0]
            if co.error_code == E.none and int(co.node_id) != exclude:
                found.append(int(co.node_id))
                return True
        return False

    assert wait_until(find, timeout_s=40, interval_s=0.2)
    return found[-1]


def describe(cluster: ZkCluster, broker: int, group: str) -> Any:
    """The group as its coordinator describes it, once it has loaded it."""
    out: list[Any] = []

    def attempt() -> bool:
        try:
            r = call(cluster.address(broker), 69, 0,
                     {"group_ids": [group], "include_authorized_operations": False})
        except OSError:
            return False
        g = r.groups[0]
        if g.error_code != E.none:
            return False
        out.append(g)
        return True

    assert wait_until(attempt, timeout_s=40, interval_s=0.2)
    return out[-1]


def shape(g: Any) -> tuple[Any, ...]:
    return (
        int(g.group_epoch),
        int(g.assignment_epoch),
        sorted(
            (
                m.member_id,
                int(m.member_epoch),
                sorted((t.topic_name, tuple(sorted(t.partitions)))
                       for t in m.assignment.topic_partitions),
                sorted((t.topic_name, tuple(sorted(t.partitions)))
                       for t in m.target_assignment.topic_partitions),
            )
            for m in g.members
        ),
    )


def committed(cluster: ZkCluster, broker: int, group: str, topic: str) -> dict[int, int]:
    r = call(cluster.address(broker), 9, 7, {
        "group_id": group, "require_stable": False,
        "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}]})
    assert r.error_code == E.none
    return {int(p.partition_index): int(p.committed_offset) for p in r.topics[0].partitions}


def produce(bs: str, topic: str, n: int, start: int) -> None:
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def test_kip848_group_survives_coordinator_kill(cluster: ZkCluster) -> None:
    bs = cluster.bootstrap
    topic = f"k-{uuid.uuid4().hex[:8]}"
    group = f"kip848-f-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, partitions=PARTITIONS, replication_factor=3)
    produce(bs, topic, 300, 0)
    start_from_committed(bs, group, topic, PARTITIONS)
    log = EventLog()
    members = [Member(bs, group, topic, f"f{i}", log) for i in range(3)]
    try:
        ok = wait_until(
            lambda: sorted(len(m.partitions()) for m in members) == [2, 2, 2]
            and len(log.values()) >= 300,
            timeout_s=60,
        )
        assert ok, ([(m.name, m.partitions(), m.errors) for m in members], len(log.values()))
        old = coordinator(cluster, group)
        before = describe(cluster, old, group)
        assert len(before.members) == 3 and before.group_state == "Stable"
        offsets_before = committed(cluster, old, group, topic)
        assert sum(offsets_before.values()) == 300

        # The group keeps consuming while its coordinator's broker dies.
        produce(bs, topic, 150, 300)
        cluster.kill(old)
        new = coordinator(cluster, group, exclude=old)
        assert new != old
        after = describe(cluster, new, group)
        assert shape(after) == shape(before), (shape(before), shape(after))
        offsets_after = committed(cluster, new, group, topic)
        assert all(offsets_after[p] >= offsets_before[p] for p in range(PARTITIONS))

        produce(bs, topic, 150, 450)
        ok = wait_until(lambda: len(log.values()) >= 600, timeout_s=90, interval_s=0.2)
        assert ok, (len(log.values()), [(m.name, m.partitions(), m.errors[-3:]) for m in members])
        time.sleep(1.0)
        assert log.redelivered_after_commit() == []
        assert sorted(int(v) for v in log.values()) == list(range(600))
        final = committed(cluster, coordinator(cluster, group, exclude=old), group, topic)
        assert sum(final.values()) == 600
    finally:
        for m in members:
            m.close()
