"""Several brokers in one process (`DevCluster`, embedded store): topic placement, every
broker's metadata cache, real clients through any broker, broker and controller failure,
session expiry. Data replication between brokers is not there yet (followers hold empty
logs), so producers use acks=1 on replicated topics."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KPTopicPartition
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic, poll_messages
from tests.kafka_wire import call, fetch_body, produce_body
from wherry.common.topic_partition import TopicPartition as TopicPartitionKey
from wherry.coordination import paths
from wherry.protocol.records import build_batch
from wherry.testing.cluster import DevCluster, wait_until
from wherry.testing.metadata_probe import ClusterView

FAILOVER_BOUND_S = 5.0


def new_name() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def views(cluster: DevCluster, topics: list[str] | None = None) -> dict[int, ClusterView]:
    return {b: cluster.metadata(b, topics) for b in cluster.running}


def agree(cluster: DevCluster, topic: str) -> ClusterView:
    """Every running broker's Metadata answer is the same; returns it."""
    vs = views(cluster, [topic])
    first = next(iter(vs.values()))
    for b, v in vs.items():
        assert v.brokers == first.brokers, (b, v.brokers, first.brokers)
        assert v.controller_id == first.controller_id, b
        assert v.cluster_id == first.cluster_id, b
        assert v.topics == first.topics, b
    return first


def test_replicas_spread_and_every_broker_agrees(wherry_cluster: DevCluster) -> None:
    c = wherry_cluster
    assert sorted(c.running) == [0, 1, 2]
    controller = c.wait_for_controller()
    t = new_name()
    # Any broker takes admin requests: create through a broker that is not the controller.
    create_topic(c.address((controller + 1) % 3), t, partitions=12, replication_factor=3)
    c.wait_for_topic(t, 12)
    view = agree(c, t)
    assert view.controller_id == controller
    assert view.brokers == {b: ("127.0.0.1", int(c.address(b).rsplit(":")[1])) for b in range(3)}
    parts = view.partitions(t)
    assert sorted(parts) == list(range(12))
    for p in parts.values():
        assert p.error_code == ErrorCode.none
        assert sorted(p.replicas) == [0, 1, 2]
        assert p.leader == p.replicas[0]  # the preferred replica leads
        assert sorted(p.isr) == [0, 1, 2]
        assert p.leader_epoch == 0 and p.offline_replicas == ()
    assert Counter(p.leader for p in parts.values()) == {0: 4, 1: 4, 2: 4}
    # The leaders' replica managers agree with the metadata.
    for b in range(3):
        led = c.call(
            lambda b=b: sorted(
                tp.partition
                for tp, part in c.broker(b).replica_manager.partitions.items()
                if tp.topic == t and part.is_leader
            )
        )
        assert led == sorted(p for p, v in parts.items() if v.leader == b)


@pytest.mark.wherry(brokers=1, overrides={"advertised.listeners": "PLAINTEXT://localhost:0"})
def test_metadata_names_advertised_endpoints(wherry_broker: DevCluster) -> None:
    view = wherry_broker.metadata(0)
    port = int(wherry_broker.address(0).rsplit(":")[1])
    assert view.brokers == {0: ("localhost", port)}


def _produce_confluent(bootstrap: str, topic: str, partitions: int, tag: str) -> None:
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "message.timeout.ms": 15000, "log_level": 0}
    )
    errors: list[KafkaError] = []
    for i in range(partitions):
        p.produce(
            topic,
            value=f"{tag}-{i}".encode(),
            partition=i,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(20) == 0
    assert errors == []


def _produce_kafka_python(bootstrap: str, topic: str, partitions: int, tag: str) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, request_timeout_ms=15000)
    try:
        futures = [
            p.send(topic, value=f"{tag}-{i}".encode(), partition=i) for i in range(partitions)
        ]
        for f in futures:
            f.get(timeout=20)
    finally:
        p.close(timeout=5)


def _consume_confluent(bootstrap: str, topic: str, partitions: int, n: int) -> list[str]:
    cons = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    cons.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        return [m.value().decode() for m in poll_messages(cons, n, 20)]
    finally:
        cons.close()


def _consume_kafka_python(bootstrap: str, topic: str, partitions: int, n: int) -> list[str]:
    cons = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    cons.assign([KPTopicPartition(topic, p) for p in range(partitions)])
    cons.seek_to_beginning()
    out: list[str] = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < n and time.monotonic() < deadline:
            for records in cons.poll(timeout_ms=500).values():
                out += [r.value.decode() for r in records]
    finally:
        cons.close()
    return out


def test_clients_produce_and_consume_through_any_broker(wherry_cluster: DevCluster) -> None:
    """Partitions led by all three brokers; each client bootstraps from one broker only and
    must reach every leader. (Single-replica partitions: on replicated ones the high
    watermark waits for followers to fetch, which comes with replication.)"""
    c = wherry_cluster
    t = new_name()
    create_topic(c.bootstrap, t, partitions=6, replication_factor=1)
    c.wait_for_topic(t, 6)
    assert set(c.metadata(0, [t]).leaders(t).values()) == {0, 1, 2}
    expected: list[str] = []
    for b in range(3):  # each broker alone as the bootstrap server
        _produce_confluent(c.address(b), t, 6, f"ck{b}")
        _produce_kafka_python(c.address(b), t, 6, f"kp{b}")
        expected += [f"ck{b}-{i}" for i in range(6)] + [f"kp{b}-{i}" for i in range(6)]
    for b in range(3):
        got = _consume_confluent(c.address(b), t, 6, len(expected))
        assert sorted(got) == sorted(expected), b
        got = _consume_kafka_python(c.address(b), t, 6, len(expected))
        assert sorted(got) == sorted(expected), b


def test_clients_produce_with_acks_1_to_replicated_partitions(wherry_cluster: DevCluster) -> None:
    c = wherry_cluster
    t = new_name()
    create_topic(c.bootstrap, t, partitions=6, replication_factor=3)
    c.wait_for_topic(t, 6)
    for b in range(3):
        _produce_confluent(c.address(b), t, 6, f"ck{b}")
        _produce_kafka_python(c.address(b), t, 6, f"kp{b}")
    # Every record landed on its partition's leader, in order.
    for p, leader in c.metadata(0, [t]).leaders(t).items():
        end = c.call(
            lambda p=p, leader=leader: c.broker(leader)
            .replica_manager.get_partition(TopicPartitionKey(t, p))
            .log.log_end_offset
        )
        assert end == 6, (p, leader, end)


def test_consumer_group_and_acks_all_on_unreplicated_topic(wherry_cluster: DevCluster) -> None:
    """acks=all on a single-replica topic, and a consumer group whose coordinator is on
    whichever broker leads its `__consumer_offsets` partition."""
    c = wherry_cluster
    t = new_name()
    create_topic(c.bootstrap, t, partitions=3, replication_factor=1)
    c.wait_for_topic(t, 3)
    p = Producer({"bootstrap.servers": c.address(2), "acks": "all", "log_level": 0})
    for i in range(30):
        p.produce(t, value=str(i).encode(), partition=i % 3)
    assert p.flush(20) == 0
    cons = Consumer(
        {
            "bootstrap.servers": c.address(0),
            "group.id": f"g-{t}",
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    cons.subscribe([t])
    try:
        got = [int(m.value()) for m in poll_messages(cons, 30, 30, skip_errors=True)]
        cons.commit(asynchronous=False)
        committed = cons.committed([CKTopicPartition(t, i) for i in range(3)], timeout=10)
    finally:
        cons.close()
    assert sorted(got) == list(range(30))
    assert sorted(tp.offset for tp in committed) == [10, 10, 10]


def _produce_wire(address: str, topic: str, partition: int) -> int:
    body = produce_body(topic, build_batch([(None, b"x")]), partition=partition, acks=1)
    r = call(address, 0, 9, body)
    return int(r.responses[0].partition_responses[0].error_code)


def _fetch_wire(address: str, topic: str, partition: int, version: int = 10) -> int:
    """A consumer's Fetch; before v11 (KIP-392) only a partition's leader serves it."""
    body = fetch_body(topic, partition=partition)
    if version < 11:
        del body["rack_id"]
    r = call(address, 1, version, body)
    return int(r.responses[0].partitions[0].error_code)


def _list_offsets_wire(address: str, topic: str, partition: int) -> int:
    r = call(
        address,
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        },
    )
    return int(r.topics[0].partitions[0].error_code)


def test_only_the_leader_serves_produce_fetch_and_list_offsets(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    replicated, single = new_name(), new_name()
    create_topic(c.bootstrap, replicated, [[1, 2, 0]])
    create_topic(c.bootstrap, single, [[2]])
    c.wait_for_topic(replicated, 1)
    c.wait_for_topic(single, 1)
    assert c.metadata(0, [replicated]).leaders(replicated) == {0: 1}
    not_leader = ErrorCode.not_leader_or_follower
    for api in (_produce_wire, _fetch_wire, _list_offsets_wire):
        assert api(c.address(1), replicated, 0) == ErrorCode.none, api
        for follower in (0, 2):
            assert api(c.address(follower), replicated, 0) == not_leader, (api, follower)
        # A broker with no replica of an existing partition: stale client metadata too.
        assert api(c.address(2), single, 0) == ErrorCode.none, api
        for other in (0, 1):
            assert api(c.address(other), single, 0) == not_leader, (api, other)
        # A partition that does not exist at all.
        assert api(c.address(0), single, 5) == ErrorCode.unknown_topic_or_partition, api
    # Fetch v11+ (KIP-392): followers serve consumers too, up to their high watermark; a
    # broker with no replica still does not.
    for follower in (0, 2):
        assert _fetch_wire(c.address(follower), replicated, 0, 12) == ErrorCode.none
    assert _fetch_wire(c.address(0), single, 0, 12) == not_leader


class BackgroundProducer:
    """Produces to every partition of a topic until stopped; records deliveries."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "message.timeout.ms": 20000,
                "linger.ms": 5,
                "log_level": 0,
            }
        )
        self.topic = topic
        self.partitions = partitions
        self.delivered: list[tuple[float, int]] = []  # (monotonic time, partition)
        self.failed: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self.failed.append(err)
        else:
            self.delivered.append((time.monotonic(), msg.partition()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce(
                self.topic,
                value=str(i).encode(),
                partition=i % self.partitions,
                on_delivery=self._on_delivery,
            )
            i += 1
            self.producer.poll(0.01)
        self.producer.flush(25)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def delivered_since(self, t: float) -> set[int]:
        return {p for when, p in list(self.delivered) if when > t}


@pytest.fixture
def replicated_topic(wherry_cluster: DevCluster) -> Iterator[str]:
    t = new_name()
    create_topic(wherry_cluster.bootstrap, t, partitions=12, replication_factor=3)
    wherry_cluster.wait_for_topic(t, 12)
    yield t


def _failover(c: DevCluster, topic: str, victim: int) -> None:
    survivors = [b for b in range(3) if b != victim]
    before = c.metadata(survivors[0], [topic]).partitions(topic)
    led = {p for p, v in before.items() if v.leader == victim}
    assert led

    def moved() -> bool:
        for b in survivors:
            v = c.metadata(b, [topic])
            if victim in v.brokers or set(v.brokers) != set(survivors):
                return False
            if any(p.leader not in survivors for p in v.partitions(topic).values()):
                return False
        return True

    with BackgroundProducer(c.bootstrap, topic, 12) as producer:
        assert wait_until(lambda: producer.delivered_since(0) == set(range(12)), 15)
        started = time.monotonic()
        c.stop_broker(victim)
        assert wait_until(moved, FAILOVER_BOUND_S, 0.02), "leadership did not move"
        elapsed = time.monotonic() - started
        view = agree(c, topic)
        after = view.partitions(topic)
        for p, old in before.items():
            new = after[p]
            assert new.replicas == old.replicas  # the assignment does not change
            assert new.offline_replicas == (victim,)
            if p in led:
                assert new.leader in old.isr and new.leader != victim
                assert new.leader_epoch > old.leader_epoch
                assert new.error_code == ErrorCode.none
            else:
                assert new.leader == old.leader
        # Clients go on producing to every partition, the moved ones included.
        resumed = time.monotonic()
        assert wait_until(lambda: producer.delivered_since(resumed) == set(range(12)), 20), (
            producer.delivered_since(resumed)
        )
    assert producer.failed == []
    print(f"leadership of {sorted(led)} moved off broker {victim} in {elapsed:.3f} s")


def test_leadership_moves_when_a_broker_stops(
    wherry_cluster: DevCluster, replicated_topic: str
) -> None:
    c = wherry_cluster
    controller = c.wait_for_controller()
    victim = (controller + 1) % 3
    _failover(c, replicated_topic, victim)
    assert c.controller_id == controller
    after = c.metadata(controller, [replicated_topic]).partitions(replicated_topic)
    # Kafka takes a dead follower out of the ISR too (bumping the leader epoch).
    assert all(victim not in p.isr for p in after.values()), after
    # Metadata v0 ("errorUnavailableEndpoints") leaves dead replicas out and says so.
    v0 = call(c.address(controller), 3, 0, {"topics": [{"name": replicated_topic}]})
    for p in v0.topics[0].partitions:
        assert p.error_code == ErrorCode.replica_not_available
        assert victim not in p.replica_nodes and len(p.replica_nodes) == 2
    # It comes back: registered and live again everywhere, replicas online.
    c.start_broker(victim)
    assert wait_until(
        lambda: all(
            set(c.metadata(b).brokers) == {0, 1, 2}
            and all(
                not p.offline_replicas
                for p in c.metadata(b, [replicated_topic]).partitions(replicated_topic).values()
            )
            for b in range(3)
        ),
        FAILOVER_BOUND_S,
    )


def test_controller_moves_when_the_controller_stops(
    wherry_cluster: DevCluster, replicated_topic: str
) -> None:
    c = wherry_cluster
    old = c.wait_for_controller()
    old_epoch = c.call(lambda: c.broker(old).controller.ctx.epoch)
    _failover(c, replicated_topic, old)
    new = c.wait_for_controller()
    assert new != old
    assert c.call(lambda: c.broker(new).controller.ctx.epoch) > old_epoch
    assert all(c.metadata(b).controller_id == new for b in c.running)
    after = c.metadata(new, [replicated_topic]).partitions(replicated_topic)
    # Kafka's new controller takes replicas on dead brokers out of the ISR at failover.
    assert all(old not in p.isr for p in after.values()), after


def _registration_epoch(c: DevCluster, broker_id: int) -> int | None:
    async def read() -> int | None:  # on the cluster's loop: no blocking `c.*` calls here
        store = next(iter(c.cluster.brokers.values())).store
        stat = await store.exists(paths.broker_path(broker_id))
        return None if stat is None else stat.czxid

    return c.run(read())


def test_expired_session_registers_again_with_a_new_broker_epoch(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    controller = c.wait_for_controller()
    follower = (controller + 1) % 3
    old_epoch = c.call(lambda: c.broker(follower).fence.broker_epoch)
    assert _registration_epoch(c, follower) == old_epoch
    assert c.expire_session(follower)
    assert wait_until(lambda: c.call(lambda: c.broker(follower).session_renewals) == 1, 5)
    new_epoch = c.call(lambda: c.broker(follower).fence.broker_epoch)
    assert new_epoch > old_epoch
    assert _registration_epoch(c, follower) == new_epoch
    assert c.controller_id == controller
    # The controller reaches it under its new epoch: a new topic shows up in its cache.
    t = new_name()
    create_topic(c.address(follower), t, partitions=3, replication_factor=3)
    c.wait_for_topic(t, 3)

    # The controller's session: its /controller node goes, a controller is elected again
    # (epoch up), and the old controller instance does not linger.
    epoch = c.call(lambda: c.broker(controller).controller.ctx.epoch)
    assert c.expire_session(controller)
    assert wait_until(lambda: c.call(lambda: c.broker(controller).session_renewals) == 1, 5)
    now = c.wait_for_controller()
    assert c.call(lambda: c.broker(now).controller.ctx.epoch) > epoch
    active = c.call(lambda: [b for b, br in c.cluster.brokers.items() if br.controller.active])
    assert active == [now]
    assert wait_until(lambda: all(c.metadata(b).controller_id == now for b in range(3)), 5)
