"""KIP-73 replication throttles on real brokers (`DevCluster`, two brokers): a follower that
comes back behind the leader catches up at about the throttle rate while a consumer reading
another partition of the same leader is not slowed; once the throttle is unset the follower
catches up at full speed and rejoins the ISR.

The throttles are set as an operator would: IncrementalAlterConfigs of the BROKER resources
(`leader.replication.throttled.rate` on the leader, `follower.replication.throttled.rate` on
the follower) and of the topic (`*.replication.throttled.replicas`) through confluent-kafka's
AdminClient."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.helpers import create_topic
from wherry.common.topic_partition import TopicPartition
from wherry.testing.cluster import DevCluster, wait_until

RATE = 1024 * 1024  # 1 MB/s
BACKLOG = 6 * 1024 * 1024
VALUE = b"v" * 10_000
THROTTLED_S = 4.0
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


def _alter(
    admin: AdminClient,
    rtype: ConfigResource.Type,
    name: str,
    configs: dict[str, str | None],
) -> None:
    res = ConfigResource(
        rtype,
        name,
        incremental_configs=[
            ConfigEntry(
                k,
                v,
                incremental_operation=AlterConfigOpType.DELETE
                if v is None
                else AlterConfigOpType.SET,
            )
            for k, v in configs.items()
        ],
    )
    for f in admin.incremental_alter_configs([res], request_timeout=10).values():
        f.result(15)


def _throttle(admin: AdminClient, sides: str, rate: str | None) -> None:
    """Set (or with None unset) the leader's and/or the follower's throttle rate."""
    if "leader" in sides:
        _alter(admin, ConfigResource.Type.BROKER, "0", {LEADER_RATE: rate})
    if "follower" in sides:
        _alter(admin, ConfigResource.Type.BROKER, "1", {FOLLOWER_RATE: rate})


def _produce(bootstrap: str, topic: str, total_bytes: int, acks: int = 1) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "enable.idempotence": False,
            "compression.type": "none",
            "log_level": 0,
        }
    )
    for _ in range(total_bytes // len(VALUE)):
        p.produce(topic, VALUE, partition=0)
        p.poll(0)
    assert p.flush(30) == 0


def _log_bytes(c: DevCluster, broker: int, tp: TopicPartition) -> int:
    def size() -> int:
        part = c.broker(broker).replica_manager.get_partition(tp)
        return -1 if part is None else part.log.size_in_bytes

    return c.call(size)


def _isr(c: DevCluster, tp: TopicPartition) -> frozenset[int]:
    def isr() -> frozenset[int]:
        part = c.broker(0).replica_manager.get_partition(tp)
        return frozenset() if part is None else part.isr

    return c.call(isr)


def _consume_all(bootstrap: str, topic: str, count: int, timeout_s: float) -> float:
    """Seconds a fresh consumer takes to read `count` records of partition 0 from the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        start = time.monotonic()
        got = 0
        while got < count and time.monotonic() - start < timeout_s:
            for m in consumer.consume(500, timeout=0.5):
                if m.error() is None:
                    got += 1
        assert got == count, f"consumed {got} of {count} in {timeout_s} s"
        return time.monotonic() - start
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.wherry(
    brokers=2,
    overrides={
        # Finer steps than Kafka's defaults (1 s backoff, 1 MB per fetch) so a few seconds
        # measure the rate; the quota works the same.
        "replica.fetch.backoff.ms": "100",
        "replica.fetch.max.bytes": "262144",
    },
)
@pytest.mark.parametrize("sides", ["leader", "follower", "leader+follower"])
def test_throttled_catch_up_keeps_near_the_rate_and_spares_consumers(
    wherry_cluster: DevCluster, sides: str
) -> None:
    """Each side's quota alone holds the catch-up near the rate, and both together."""
    c = wherry_cluster
    suffix = uuid.uuid4().hex[:8]
    moving, other = f"moving-{suffix}", f"other-{suffix}"
    tp = TopicPartition(moving, 0)
    create_topic(c.bootstrap, moving, [[0, 1]])
    create_topic(c.bootstrap, other, [[0]])
    assert wait_until(lambda: _isr(c, tp) == {0, 1}, 15)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    _throttle(admin, sides, str(RATE))
    _alter(
        admin,
        ConfigResource.Type.TOPIC,
        moving,
        {
            "leader.replication.throttled.replicas": "0:0",
            "follower.replication.throttled.replicas": "0:1",
        },
    )

    # The follower goes away; the leader takes a backlog of BACKLOG bytes.
    c.stop_broker(1)
    assert wait_until(lambda: _isr(c, tp) == {0}, 15)
    _produce(c.bootstrap, moving, BACKLOG)
    _produce(c.bootstrap, other, 2 * 1024 * 1024)
    leader_bytes = _log_bytes(c, 0, tp)
    assert leader_bytes >= BACKLOG

    # It comes back (its throttle is stored, so it applies from its start) and catches up.
    c.start_broker(1)
    assert wait_until(lambda: _log_bytes(c, 1, tp) >= 0, 10)
    t0, b0 = time.monotonic(), _log_bytes(c, 1, tp)
    # Meanwhile a consumer reads 2 MB of the other partition of the same leader: faster
    # than the throttle would let it.
    consumer_s = _consume_all(c.bootstrap, other, 2 * 1024 * 1024 // len(VALUE), 10)
    time.sleep(max(0.0, THROTTLED_S - (time.monotonic() - t0)))
    t1, b1 = time.monotonic(), _log_bytes(c, 1, tp)
    rate = (b1 - b0) / (t1 - t0)
    print(
        f"{sides}: catch-up {rate / 1e6:.2f} MB/s over {t1 - t0:.1f} s; consumer {consumer_s:.2f} s"
    )
    assert 0.3 * RATE <= rate <= 2.0 * RATE, f"{rate:.0f} B/s against a throttle of {RATE}"
    assert b1 < leader_bytes, "caught up too soon to have been throttled"
    assert consumer_s < 2.0, f"the consumer took {consumer_s:.2f} s for 2 MB"

    # Unset the throttle: the rest comes at full speed and the follower rejoins the ISR.
    _throttle(admin, sides, None)
    t2 = time.monotonic()
    assert wait_until(lambda: _log_bytes(c, 1, tp) == leader_bytes, 10)
    fast = (leader_bytes - b1) / max(time.monotonic() - t2, 1e-3)
    print(f"unthrottled: {fast / 1e6:.2f} MB/s")
    assert fast > 2 * RATE
    assert wait_until(lambda: _isr(c, tp) == {0, 1}, 15)

    # An in-sync follower is never throttled (Kafka throttles only replicas outside the
    # ISR), even with the quota still full of the catch-up: acks=all writes of 4 MB do not
    # wait on the 1 MB/s rate.
    _throttle(admin, sides, str(RATE))
    start = time.monotonic()
    _produce(c.bootstrap, moving, 4 * 1024 * 1024, acks=-1)
    in_sync_s = time.monotonic() - start
    print(f"in sync, throttled: 4 MB with acks=all in {in_sync_s:.2f} s")
    assert in_sync_s < 2.5, f"4 MB with acks=all took {in_sync_s:.1f} s"
    assert _isr(c, tp) == {0, 1}
