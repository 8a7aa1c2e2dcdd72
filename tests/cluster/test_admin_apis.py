"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46)
against three brokers in this process (`DevCluster`), with real clients (confluent-kafka's
and kafka-python's admin clients) and on the raw wire for the error cases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KPTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic, poll_messages
from tests.kafka_wire import call
from wherry.testing.cluster import DevCluster, wait_until

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "auto.leader.rebalance.enable": "false",  # the preferred election test moves leaders
}


def new_name() -> str:
    return f"adm-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "cluster", brokers=3, overrides=OVERRIDES) as c:
        c.wait_for_controller()
        yield c


def admin(c: DevCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})


def partition_view(c: DevCluster, topic: str, broker: int | None = None):  # type: ignore[no-untyped-def]
    b = c.running[0] if broker is None else broker
    return c.metadata(b, [topic]).partitions(topic)


def full_isr(c: DevCluster, topic: str, size: int) -> bool:
    return all(
        len(st.isr) == size
        for b in c.running
        for st in partition_view(c, topic, b).values()
    )


def produce(c: DevCluster, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
    for i in range(count):
        p.produce(topic, f"m-{i}".encode())
    assert p.flush(20) == 0


def consume(c: DevCluster, topic: str, partitions: int, count: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": new_name(),
                         "log_level": 0, "enable.auto.commit": False})
    try:
        consumer.assign([CKTopicPartition(topic, p, 0) for p in range(partitions)])
        return sorted(m.value().decode()  # type: ignore[union-attr]
                      for m in poll_messages(consumer, count, 30, skip_errors=True))
    finally:
        consumer.close()


# --- ElectLeaders ---------------------------------------------------------------------------


def test_preferred_election_with_confluent_kafka(cluster: DevCluster) -> None:
    c = cluster
    controller = c.wait_for_controller()
    t = new_name()
    create_topic(c.bootstrap, t, partitions=3, replication_factor=3)
    c.wait_for_topic(t, 3)
    mover = (controller + 1) % 3
    preferred = sorted(p for p, st in partition_view(c, t).items() if st.replicas[0] == mover)
    assert preferred
    # A restart leaves the broker a follower of the partitions it prefers.
    c.stop_broker(mover)
    c.start_broker(mover)
    assert wait_until(lambda: full_isr(c, t, 3), 20)
    assert all(partition_view(c, t)[p].leader != mover for p in preferred)

    tps = [CKTopicPartition(t, p) for p in range(3)]
    a = admin(c)  # held until the result: a collected client destroys its pending requests
    results = a.elect_leaders(ElectionType.PREFERRED, tps).result(30)
    by_partition = {tp.partition: err for tp, err in results.items()}
    for p in range(3):
        err = by_partition[p]
        if p in preferred:
            assert err is None, (p, err)
        else:  # already led by its preferred replica
            assert isinstance(err, KafkaException | KafkaError), (p, err)
            code = (err.args[0] if isinstance(err, KafkaException) else err).code()
            assert code == KafkaError.ELECTION_NOT_NEEDED, (p, err)
    # The answer came once the metadata showed it: every broker says the preferred leads.
    for b in c.running:
        view = partition_view(c, t, b)
        assert all(view[p].leader == view[p].replicas[0] for p in range(3)), (b, view)


def test_unclean_election_with_confluent_kafka(cluster: DevCluster) -> None:
    c = cluster
    controller = c.wait_for_controller()
    first, second = [b for b in range(3) if b != controller]
    t = new_name()
    create_topic(c.bootstrap, t, [[first, second]])
    c.wait_for_topic(t, 1)
    produce(c, t, 10)
    # The follower goes first (out of the ISR), then the leader: the partition is offline
    # with an ISR of the dead leader alone.
    c.stop_broker(second, controlled=False)
    assert wait_until(lambda: list(partition_view(c, t)[0].isr) == [first], 20)
    c.stop_broker(first, controlled=False)
    c.start_broker(second)
    assert wait_until(lambda: partition_view(c, t, second)[0].leader == -1, 20)
    tp = CKTopicPartition(t, 0)
    a = admin(c)
    # The preferred replica is down: a preferred election cannot help.
    preferred = a.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
    (err,) = preferred.values()
    assert err is not None
    code = (err.args[0] if isinstance(err, KafkaException) else err).code()
    assert code == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    # Unclean: the live replica out of the ISR takes over.
    unclean = a.elect_leaders(ElectionType.UNCLEAN, [tp]).result(30)
    assert list(unclean.values()) == [None]
    st = partition_view(c, t, second)[0]
    assert st.leader == second and list(st.isr) == [second]
    assert consume(c, t, 1, 10) == sorted(f"m-{i}" for i in range(10))


def test_elect_leaders_with_kafka_python(cluster: DevCluster) -> None:
    c = cluster
    t = new_name()
    create_topic(c.bootstrap, t, partitions=2, replication_factor=3)
    c.wait_for_topic(t, 2)
    client = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000)
    try:
        resp = client.elect_leaders(0, {t: [0, 1]}, raise_errors=False)
        assert resp.error_code == 0
        codes = {
            (r.topic, p.partition_id): p.error_code
            for r in resp.replica_election_results
            for p in r.partition_result
        }
        assert codes == {(t, 0): ErrorCode.election_not_needed,
                         (t, 1): ErrorCode.election_not_needed}
    finally:
        client.close()


def test_elect_leaders_errors_on_the_wire(cluster: DevCluster) -> None:
    c = cluster
    controller = c.wait_for_controller()
    other = (controller + 1) % 3
    t = new_name()
    create_topic(c.bootstrap, t, partitions=1, replication_factor=3)
    c.wait_for_topic(t, 1)
    ask = {"election_type": 0, "timeout": 5000,
           "topic_partitions": [{"topic": t, "partitions": [0]}]}
    # Not the controller: NOT_CONTROLLER (top level from v1, and per partition).
    for v in range(3):
        resp = call(c.address(other), 43, v, ask)
        if v >= 1:
            assert resp.error_code == ErrorCode.not_controller
        (topic,) = resp.replica_election_results
        assert [p.error_code for p in topic.partition_result] == [ErrorCode.not_controller]
    # Unknown partitions and topics; an election type Kafka does not know.
    unknown = {**ask, "topic_partitions": [{"topic": t, "partitions": [7]},
                                           {"topic": "no-such-topic", "partitions": [0]}]}
    resp = call(c.address(controller), 43, 2, unknown)
    assert resp.error_code == ErrorCode.none
    codes = {(r.topic, p.partition_id): p.error_code
             for r in resp.replica_election_results for p in r.partition_result}
    assert codes == {(t, 7): ErrorCode.unknown_topic_or_partition,
                     ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    resp = call(c.address(controller), 43, 1, {**ask, "election_type": 5})
    assert resp.error_code == ErrorCode.invalid_request
    # All partitions (null): the ones needing no election are left out.
    resp = call(c.address(controller), 43, 2, {**ask, "topic_partitions": None})
    assert resp.error_code == ErrorCode.none
    assert all(p.error_code != ErrorCode.election_not_needed
               for r in resp.replica_election_results for p in r.partition_result)


# --- partition reassignments ----------------------------------------------------------------


def test_reassignment_with_kafka_python(cluster: DevCluster) -> None:
    c = cluster
    t = new_name()
    create_topic(c.bootstrap, t, [[0, 1], [1, 2]])
    c.wait_for_topic(t, 2)
    produce(c, t, 40)
    client = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30_000)
    try:
        results = client.alter_partition_reassignments({
            KPTopicPartition(t, 0): [2, 1],
            KPTopicPartition(t, 1): [1, 2],  # already there
            KPTopicPartition(t, 5): [0, 1],  # no such partition
        })
        assert results[KPTopicPartition(t, 0)] is None
        assert results[KPTopicPartition(t, 1)] is None
        assert results[KPTopicPartition(t, 5)] is not None
        assert results[KPTopicPartition(t, 5)].errno == ErrorCode.unknown_topic_or_partition

        def moved() -> bool:
            ongoing = client.list_partition_reassignments([KPTopicPartition(t, 0)])
            if ongoing:  # while it runs: the full set, what is added and removed
                (r,) = ongoing.values()
                assert sorted(r["replicas"]) == [0, 1, 2]
                assert r["adding_replicas"] == [2] and r["removing_replicas"] == [0]
                return False
            return all(list(partition_view(c, t, b)[0].replicas) == [2, 1] for b in c.running)

        assert wait_until(moved, 30)
        assert client.list_partition_reassignments() == {}
        # Cancelling where nothing runs.
        cancel = client.alter_partition_reassignments({KPTopicPartition(t, 0): None})
        assert cancel[KPTopicPartition(t, 0)].errno == ErrorCode.no_reassignment_in_progress
    finally:
        client.close()
    # Broker 0 holds no replica any more: the records live on without it.
    c.stop_broker(0, controlled=False)
    assert consume(c, t, 2, 40) == sorted(f"m-{i}" for i in range(40))


def test_reassignment_apis_answer_not_controller_on_the_wire(cluster: DevCluster) -> None:
    c = cluster
    controller = c.wait_for_controller()
    other = (controller + 1) % 3
    alter = {"timeout": 5000,
             "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [0]}]}]}
    resp = call(c.address(other), 45, 0, alter)
    assert resp.error_code == ErrorCode.not_controller and resp.responses == ()
    resp = call(c.address(other), 46, 0, {"timeout": 5000, "topics": None})
    assert resp.error_code == ErrorCode.not_controller and resp.topics == ()
    # The controller: an unknown topic per partition, nothing ongoing to list.
    resp = call(c.address(controller), 45, 0, alter)
    assert resp.error_code == ErrorCode.none
    (topic,) = resp.responses
    assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_or_partition]
    resp = call(c.address(controller), 46, 0,
                {"timeout": 5000, "topics": [{"name": "t", "partition_indexes": [0]}]})
    assert resp.error_code == ErrorCode.none and resp.topics == ()
