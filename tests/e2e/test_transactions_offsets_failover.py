"""Issue 14 acceptance: TxnOffsetCommit (confluent-kafka's send_offsets_to_transaction) across a
restart and a move of the group coordinator, on 3 in-process brokers with `__consumer_offsets`
at RF 3: a committed transaction's offset is there after the move and the restart, an aborted
one's is not, and one whose marker is missing when the new coordinator loads the partition
stays pending (OffsetFetch require_stable -> UNSTABLE_OFFSET_COMMIT) until the marker
arrives."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.broker_process import wait_until
from tests.helpers import create_topic, poll_messages
from tests.kafka_wire import call
from wherry.testing.cluster import DevCluster

E = ErrorCode
OVERRIDES = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}


def group_coordinator(cluster: DevCluster, group: str) -> int:
    out: list[int] = []

    def find() -> bool:
        for b in cluster.running:
            try:
                c = call(cluster.address(b), 10, 4,
                         {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
            except OSError:
                continue
            if c.error_code == E.none:
                out.append(int(c.node_id))
                return True
        return False

    assert wait_until(find, timeout_s=20)
    return out[-1]


def offset_fetch(
    cluster: DevCluster, group: str, topic: str, *, stable: bool, settled: bool = False
) -> tuple[Any, int]:
    """(error, committed offset) of partition 0 from the group's current coordinator, once it
    has loaded the offsets partition; with `settled`, once no transaction's marker is still on
    its way (EndTxn is answered before the markers are written, as in Kafka, so a client asking
    with require_stable retries UNSTABLE_OFFSET_COMMIT)."""
    result: list[tuple[Any, int]] = []

    def attempt() -> bool:
        b = group_coordinator(cluster, group)
        r = call(cluster.address(b), 9, 7, {
            "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
            "require_stable": stable})
        if r.error_code in (E.coordinator_load_in_progress, E.not_coordinator,
                            E.coordinator_not_available):
            return False
        p = r.topics[0].partitions[0]
        if settled and p.error_code == E.unstable_offset_commit:
            return False
        result.append((p.error_code, int(p.committed_offset)))
        return True

    assert wait_until(attempt, timeout_s=20, interval_s=0.1)
    return result[-1]


def test_txn_offsets_across_restart_and_coordinator_move(tmp_path: Path) -> None:
    with DevCluster(tmp_path, brokers=3, overrides=OVERRIDES) as cluster:
        bs = cluster.bootstrap
        src, out = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
        group = f"eos-{uuid.uuid4().hex[:6]}"
        create_topic(bs, src, partitions=1, replication_factor=3)
        create_topic(bs, out, partitions=1, replication_factor=3)
        plain = Producer({"bootstrap.servers": bs})
        for i in range(12):
            plain.produce(src, value=b"in-%d" % i, partition=0)
        assert plain.flush(20) == 0

        consumer = Consumer({"bootstrap.servers": bs, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        consumer.subscribe([src])
        records = poll_messages(consumer, 12, 30)
        assert len(records) == 12
        producer = Producer({"bootstrap.servers": bs, "transactional.id": f"eos-{group}"})
        producer.init_transactions(30)

        def transaction(upto: int, commit: bool) -> None:
            producer.begin_transaction()
            for m in records[upto - 3: upto]:
                producer.produce(out, value=b"out-" + (m.value() or b""), partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(src, 0, upto)], consumer.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                assert producer.flush(30) == 0
                producer.abort_transaction(30)

        transaction(3, True)
        transaction(6, False)
        assert offset_fetch(cluster, group, src, stable=True, settled=True) == (E.none, 3)

        # The group coordinator's broker restarts: the offset partition moves to another
        # replica (loaded from its copy of the log), and back to a replica loading its own.
        first = group_coordinator(cluster, group)
        cluster.stop_broker(first)
        assert group_coordinator(cluster, group) != first
        assert offset_fetch(cluster, group, src, stable=True, settled=True) == (E.none, 3)
        cluster.start_broker(first)
        assert offset_fetch(cluster, group, src, stable=True, settled=True) == (E.none, 3)

        # An open transaction's offsets reach the coordinator; the coordinator moves before
        # the marker: the new one loads them as pending.
        producer.begin_transaction()
        producer.produce(out, value=b"out-open", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(src, 0, 9)], consumer.consumer_group_metadata(), 30)
        assert producer.flush(30) == 0
        assert offset_fetch(cluster, group, src, stable=True) == (
            E.unstable_offset_commit, -1)
        second = group_coordinator(cluster, group)
        cluster.stop_broker(second)
        assert group_coordinator(cluster, group) != second
        assert offset_fetch(cluster, group, src, stable=True) == (
            E.unstable_offset_commit, -1)
        assert offset_fetch(cluster, group, src, stable=False) == (E.none, 3)
        time.sleep(0.5)
        assert offset_fetch(cluster, group, src, stable=True) == (
            E.unstable_offset_commit, -1)  # still pending: no marker yet
        producer.commit_transaction(30)  # the marker arrives at the new coordinator
        assert wait_until(
            lambda: offset_fetch(cluster, group, src, stable=True) == (E.none, 9),
            timeout_s=20, interval_s=0.1)
        cluster.start_broker(second)
        consumer.close()

        # The output holds the committed transactions' records only.
        reader = Consumer({"bootstrap.servers": cluster.bootstrap,
                           "group.id": f"r-{uuid.uuid4().hex[:6]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "isolation.level": "read_committed"})
        reader.subscribe([out])
        got = poll_messages(reader, 4, 30)
        got += poll_messages(reader, 1, 1)
        reader.close()
        assert [m.value() for m in got] == [b"out-in-0", b"out-in-1", b"out-in-2", b"out-open"]
