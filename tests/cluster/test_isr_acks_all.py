"""ISR, high watermark and acks=all on real brokers (`DevCluster`, SPEC R4–R11, P1–P3):
acks=all records are acknowledged once the ISR has them and consumers see them; a follower
that stops fetching leaves the ISR after `replica.lag.time.max.ms` and rejoins once it has
caught up, both visible in the state-change log; `min.insync.replicas` refuses acks=all
writes when too few replicas are in sync."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from tests.helpers import create_topic
from wherry.common.topic_partition import TopicPartition
from wherry.runtime.state_change_log import STATE_CHANGE_LOG_FILE, merge_state_change_logs
from wherry.testing.cluster import DevCluster, wait_until

LAG_MS = 1000
TIMEOUT_S = 20.0


def produce_all(bootstrap: str, topic: str, values: list[bytes]) -> list[KafkaError | None]:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 8000,
            "log_level": 0,
        }
    )
    results: list[KafkaError | None] = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda e, _m: results.append(e))
    p.flush(TIMEOUT_S)
    return results


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    c.assign([CKTopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        for _ in range(200):
            for m in c.consume(100, timeout=0.1):
                if m.error() is None:
                    got.append(m.value())  # type: ignore[arg-type]
            if len(got) >= count:
                break
    finally:
        c.close()
    return got


def isr(c: DevCluster, leader: int, tp: TopicPartition) -> frozenset[int]:
    def get() -> frozenset[int]:
        part = c.broker(leader).replica_manager.get_partition(tp)
        return frozenset() if part is None else frozenset(part.isr)

    return c.call(get)


@pytest.mark.wherry(brokers=3, overrides={"replica.lag.time.max.ms": str(LAG_MS)})
def test_slow_follower_leaves_and_rejoins_the_isr_and_acks_all_waits_for_the_isr(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    t = f"isr-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, t, [[0, 1, 2]], **{"min.insync.replicas": "2"})
    c.wait_for_topic(t, 1)
    tp = TopicPartition(t, 0)
    assert wait_until(lambda: isr(c, 0, tp) == {0, 1, 2}, 10)

    values = [f"v{i}".encode() for i in range(100)]
    assert produce_all(c.bootstrap, t, values) == [None] * 100
    assert consume(c.bootstrap, t, 100) == values  # the HW moved: consumers see them

    # Follower 2 stops fetching. The next acks=all write waits for it until the leader drops
    # it from the ISR (it falls behind for the lag time), then completes with ISR {0, 1}.
    c.call(lambda: c.broker(2).node.fetchers.remove_partitions([tp]))  # type: ignore[union-attr]
    more = [f"w{i}".encode() for i in range(50)]
    assert produce_all(c.bootstrap, t, more) == [None] * 50  # ISR {0,1} >= min.insync 2
    assert isr(c, 0, tp) == {0, 1}

    # It fetches again, catches up and rejoins.
    leader_epoch = c.call(lambda: c.broker(2).replica_manager.get_partition(tp).leader_epoch)  # type: ignore[union-attr]
    address = c.call(lambda: c.broker(2).node.leader_address(0))
    c.call(
        lambda: c.broker(2).node.fetchers.add_partitions({tp: (address, leader_epoch)})  # type: ignore[union-attr]
    )
    assert wait_until(lambda: isr(c, 0, tp) == {0, 1, 2}, 10)

    # The state-change log has both ISR changes.
    log_file = c.broker(0).config.data_dir / STATE_CHANGE_LOG_FILE
    changes = [
        (r.old_state, r.new_state, r.isr)
        for r in merge_state_change_logs([log_file])
        if r.topic == t and r.is_change and r.node_kind == "Broker"
    ]
    shrink = [ch for ch in changes if ch[1] == "PendingShrinkIsr"]
    expand = [ch for ch in changes if ch[1] == "PendingExpandIsr"]
    assert shrink and expand, changes
    assert ("PendingShrinkIsr", "Committed", (0, 1)) in {
        (a, b, tuple(sorted(i or ()))) for a, b, i in changes
    }

    # Two followers gone: acks=all is refused (NOT_ENOUGH_REPLICAS), nothing acknowledged.
    c.stop_broker(1)
    c.stop_broker(2)
    assert wait_until(lambda: isr(c, 0, tp) == {0}, 15)
    errors = produce_all(c.bootstrap, t, [b"refused"])
    assert errors[0] is not None
    assert errors[0].code() in (
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError._MSG_TIMED_OUT,
    ), errors[0]
    assert consume(c.bootstrap, t, 150) == values + more
