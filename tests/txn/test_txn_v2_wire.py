"""Transactions v2 (KIP-890) over the wire against a broker process, with requests encoded
here as a transactions-v2 client sends them: ApiVersions shows `transaction.version` 2
finalized; InitProducerId, then Produce v12 and TxnOffsetCommit v5 with no AddPartitionsToTxn
or AddOffsetsToTxn (the leader adds them); EndTxn v5 answers the bumped epoch; a
read_committed consumer (confluent-kafka) sees the committed records only; the old epoch is
fenced. Older request versions on the same broker: an unadded partition is refused by the
leader's verification, and confluent-kafka's transactional producer (transactions v1) works
as before. Two brokers: the leader of the produced partition is not the coordinator, so it
adds the partition with AddPartitionsToTxn v5 over the inter-broker connection."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkPartition
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.e2e.test_transactions import _values as read_values
from tests.kafka_wire import call, connect
from tests.txn.test_txn_broker import until
from wherry.protocol.records import build_batch
from wherry.testing.cluster import DevCluster

E = ErrorCode
SMALL = {
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "1",
}
RETRIABLE = (
    E.coordinator_load_in_progress,
    E.coordinator_not_available,
    E.not_coordinator,
    E.concurrent_transactions,
    E.not_enough_replicas,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("tv2"), overrides=[f"{k}={v}" for k, v in SMALL.items()]
    ).start()
    try:
        yield b
    finally:
        b.stop()


class Client:
    """A transactional producer speaking the protocol itself, on one connection."""

    def __init__(self, bootstrap: str, tid: str) -> None:
        self.bootstrap = bootstrap
        self.tid = tid
        self.sock: socket.socket = connect(bootstrap)
        self.pid = -1
        self.epoch = -1
        self.seq: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        self.sock.close()

    def call(self, key: int, version: int, body: dict[str, Any]) -> Any:
        return call(self.sock, key, version, body)

    def retrying(
        self, key: int, version: int, body: dict[str, Any], err: Callable[[Any], Any]
    ) -> Any:
        def attempt() -> Any:
            r = self.call(key, version, body)
            return None if err(r) in RETRIABLE else r

        return until(attempt)

    def find_coordinator(self, key: str, key_type: int) -> None:
        body = {"key_type": key_type, "coordinator_keys": [key]}
        self.retrying(10, 4, body, lambda r: r.coordinators[0].error_code)

    def init(self) -> None:
        self.find_coordinator(self.tid, 1)
        body = {"transactional_id": self.tid, "transaction_timeout": 60_000,
                "producer_id": -1, "producer_epoch": -1}
        r = self.retrying(22, 5, body, lambda r: r.error_code)
        assert r.error_code == E.none
        self.pid, self.epoch = int(r.producer_id), int(r.producer_epoch)
        self.seq.clear()

    def produce(self, topic: str, partition: int, values: list[bytes], *, version: int = 12,
                epoch: int | None = None, retry: bool = True) -> ErrorCode:
        """One transactional batch; the sequence advances only when it is written."""
        epoch = self.epoch if epoch is None else epoch
        seq = self.seq.get((topic, partition), 0) if epoch == self.epoch else 1
        batch = build_batch([(None, v) for v in values], producer_id=self.pid,
                            producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        body = {"transactional_id": self.tid, "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}

        def err(r: Any) -> Any:
            return r.responses[0].partition_responses[0].error_code

        r = self.retrying(0, version, body, err) if retry else self.call(0, version, body)
        code = ErrorCode(err(r))
        if code == E.none and epoch == self.epoch:
            self.seq[(topic, partition)] = seq + len(values)
        return code

    def commit_offsets(self, group: str, topic: str, offset: int, *, version: int = 5,
                       epoch: int | None = None) -> ErrorCode:
        self.find_coordinator(group, 0)
        body = {"transactional_id": self.tid, "group_id": group, "producer_id": self.pid,
                "producer_epoch": self.epoch if epoch is None else epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": "tv2"}]}]}
        r = self.retrying(28, version, body, lambda r: r.topics[0].partitions[0].error_code)
        return ErrorCode(r.topics[0].partitions[0].error_code)

    def end(self, commit: bool, *, epoch: int | None = None, version: int = 5) -> Any:
        body = {"transactional_id": self.tid, "producer_id": self.pid,
                "producer_epoch": self.epoch if epoch is None else epoch, "committed": commit}
        r = self.retrying(26, version, body, lambda r: r.error_code)
        if r.error_code == E.none and version >= 5 and epoch is None:
            assert int(r.producer_id) == self.pid
            self.epoch = int(r.producer_epoch)
            self.seq.clear()  # a new epoch starts its sequences at 0
        return r

    def add_partition_v3(self, topic: str, partition: int) -> ErrorCode:
        """AddPartitionsToTxn v3, as a client before transactions v2 sends it."""
        r = self.call(24, 3, {"v3_and_below_transactional_id": self.tid,
                              "v3_and_below_producer_id": self.pid,
                              "v3_and_below_producer_epoch": self.epoch,
                              "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]})
        return ErrorCode(
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        )

    def describe(self) -> Any:
        return self.call(65, 0, {"transactional_ids": [self.tid]}).transaction_states[0]

    def partitions_in_txn(self) -> set[tuple[str, int]]:
        return {(t.topic, int(p)) for t in self.describe().topics for p in t.partitions}

    def wait_state(self, state: str) -> None:
        until(lambda: self.describe().transaction_state == state)


def create_topic(bootstrap: str, name: str, partitions: int,
                 assignment: dict[int, list[int]] | None = None) -> None:
    topic: dict[str, Any] = {"name": name, "num_partitions": partitions,
                             "replication_factor": 1, "assignments": [], "configs": []}
    if assignment is not None:
        topic.update(num_partitions=-1, replication_factor=-1, assignments=[
            {"partition_index": p, "broker_ids": b} for p, b in assignment.items()])
    r = call(bootstrap, 19, 7, {"topics": [topic], "timeout": 10_000, "validate_only": False})
    assert r.topics[0].error_code == E.none


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    """What a read_committed consumer reads: the `expected` records, then nothing."""
    return read_values(bootstrap, topic, "read_committed", expected)


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        [tp] = c.committed([CkPartition(topic, 0)], timeout=20)
        return int(tp.offset)
    finally:
        c.close()


def test_api_versions_finalize_transaction_version_2(broker: BrokerProcess) -> None:
    r = call(broker.bootstrap, 18, 4, {"client_software_name": "tv2-test",
                                       "client_software_version": "1"})
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}
    assert finalized["transaction.version"] == (2, 2)
    assert r.finalized_features_epoch >= 0
    supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
    assert supported["transaction.version"] == (0, 2)
    versions = {int(k.api_key): int(k.max_version) for k in r.api_keys}
    assert versions[0] >= 12 and versions[26] == 5 and versions[28] == 5 and versions[24] == 5


def test_v2_transactions_commit_abort_and_fence(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    topic, group = f"tv2-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 2)
    c = Client(b, f"tv2-{topic}")
    try:
        c.init()
        assert c.epoch == 0
        # Transaction 1: records on both partitions and the group's offset, nothing added.
        assert c.produce(topic, 0, [b"c1", b"c2"]) == E.none
        assert c.produce(topic, 1, [b"c3"]) == E.none
        assert c.produce(topic, 0, [b"c4"]) == E.none  # already in: no second add
        assert c.commit_offsets(group, topic, 7) == E.none
        assert c.describe().transaction_state == "Ongoing"
        assert {(topic, 0), (topic, 1)} <= c.partitions_in_txn()
        assert any(t == "__consumer_offsets" for t, _ in c.partitions_in_txn())
        r = c.end(True)
        assert (r.error_code, int(r.producer_epoch)) == (E.none, 1)
        c.wait_state("CompleteCommit")
        # Transaction 2 at the new epoch, aborted: epoch 2.
        assert c.produce(topic, 1, [b"a1", b"a2"]) == E.none
        assert c.commit_offsets(group, topic, 99) == E.none
        r = c.end(False)
        assert (r.error_code, int(r.producer_epoch)) == (E.none, 2)
        c.wait_state("CompleteAbort")
        # A retry of that EndTxn gets the same answer; an older epoch is fenced.
        retry = c.end(False, epoch=1)
        assert (retry.error_code, int(retry.producer_epoch)) == (E.none, 2)
        assert c.end(True, epoch=0).error_code == E.producer_fenced
        # Zombies of epochs 0 and 1 are fenced, on the data and on the offsets.
        assert c.produce(topic, 0, [b"z0"], epoch=0, retry=False) == E.invalid_producer_epoch
        assert c.produce(topic, 1, [b"z1"], epoch=1, retry=False) == E.invalid_producer_epoch
        assert c.commit_offsets(group, topic, 55, epoch=1) == E.invalid_producer_epoch
        # Transaction 3 at epoch 2 is fenced against the zombie too while it is open.
        assert c.produce(topic, 0, [b"c5"]) == E.none
        assert c.produce(topic, 0, [b"z2"], epoch=1, retry=False) == E.invalid_producer_epoch
        r = c.end(True)
        assert (r.error_code, int(r.producer_epoch)) == (E.none, 3)
        c.wait_state("CompleteCommit")
    finally:
        c.close()
    assert committed_values(b, topic, 5) == [b"c1", b"c2", b"c3", b"c4", b"c5"]
    assert committed_offset(b, group, topic) == 7


def test_older_request_versions_are_verified(broker: BrokerProcess) -> None:
    """Produce v11 / v10 of a partition never added: the leader's verification refuses it
    (TRANSACTION_ABORTABLE, INVALID_TXN_STATE before v11); added, it is written; EndTxn v4
    keeps the epoch."""
    b = broker.bootstrap
    topic = f"tv1-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 1)
    c = Client(b, f"tv1-{topic}")
    try:
        c.init()
        assert c.produce(topic, 0, [b"x"], version=11, retry=False) == E.transaction_abortable
        assert c.produce(topic, 0, [b"x"], version=10, retry=False) == E.invalid_txn_state
        assert c.add_partition_v3(topic, 0) == E.none
        assert c.produce(topic, 0, [b"v1"], version=11) == E.none
        assert c.end(True, version=4).error_code == E.none
        c.wait_state("CompleteCommit")
        assert c.describe().producer_epoch == 0
    finally:
        c.close()
    assert committed_values(b, topic, 1) == [b"v1"]


def test_a_batch_is_not_written_ahead_of_one_refused_by_verification(
    broker: BrokerProcess,
) -> None:
    """Two batches of a transaction's first partition (sequences 0 and 1, as a producer with
    several requests in flight sends them): the first is refused by the leader's check, the
    second passes it. The second must be refused OUT_OF_ORDER_SEQUENCE_NUMBER, not written
    at offset 0: the client retries the first, then the second, and the log holds both in
    order (written ahead, the first's retry would be lost while acknowledged)."""
    b = broker.bootstrap
    topic = f"tvo-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 1)
    c = Client(b, f"tvo-{topic}")

    def produce(seq: int, value: bytes) -> ErrorCode:
        batch = build_batch([(None, value)], producer_id=c.pid, producer_epoch=c.epoch,
                            base_sequence=seq, is_transactional=True)
        body = {"transactional_id": c.tid, "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
        r = c.call(0, 11, body)
        return ErrorCode(r.responses[0].partition_responses[0].error_code)

    try:
        c.init()
        assert produce(0, b"v0") == E.transaction_abortable  # not added yet: refused
        assert c.add_partition_v3(topic, 0) == E.none
        assert produce(1, b"v1") == E.out_of_order_sequence_number
        assert produce(0, b"v0") == E.none
        assert produce(1, b"v1") == E.none
        assert c.end(True, version=4).error_code == E.none
        c.wait_state("CompleteCommit")
    finally:
        c.close()
    assert committed_values(b, topic, 2) == [b"v0", b"v1"]


def test_confluent_kafka_transactions_v1_still_work(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    topic, group = f"ck-{uuid.uuid4().hex[:8]}", f"ckg-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, 1)
    p = Producer({"bootstrap.servers": b, "transactional.id": f"ck-{topic}"})
    meta = Consumer({"bootstrap.servers": b, "group.id": group,
                     "enable.auto.commit": False})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for v in (b"k1", b"k2"):
            p.produce(topic, v)
        p.send_offsets_to_transaction([CkPartition(topic, 0, 2)],
                                      meta.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"gone")
        assert p.flush(30) == 0
        p.abort_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"k3")
        p.commit_transaction(30)
    finally:
        meta.close()
    assert committed_values(b, topic, 3) == [b"k1", b"k2", b"k3"]
    assert committed_offset(b, group, topic) == 2


def coordinator_broker(bootstrap: str, tid: str) -> int:
    """The id of the broker coordinating `tid` (its `__transaction_state` partition created)."""
    probe = Client(bootstrap, tid)
    try:
        probe.find_coordinator(tid, 1)
        return int(probe.call(10, 4, {"key_type": 1, "coordinator_keys": [tid]})
                   .coordinators[0].node_id)
    finally:
        probe.close()


def test_leader_adds_the_partition_at_a_remote_coordinator(tmp_path: Path) -> None:
    with DevCluster(tmp_path, brokers=2, overrides=SMALL) as cluster:
        b = cluster.address(0)
        tid = f"remote-{uuid.uuid4().hex[:8]}"
        coordinator = coordinator_broker(b, tid)
        leader = 1 - coordinator
        topic = f"rt-{uuid.uuid4().hex[:8]}"
        create_topic(b, topic, 1, {0: [leader]})
        cluster.wait_for_topic(topic, 1)
        c = Client(cluster.address(coordinator), tid)
        data = Client(cluster.address(leader), tid)  # the same producer's produce connection
        try:
            c.init()
            data.pid, data.epoch = c.pid, c.epoch
            assert data.produce(topic, 0, [b"r1"]) == E.none
            assert c.partitions_in_txn() == {(topic, 0)}
            assert cluster.broker(leader).transactions.verifier.requests_sent >= 1
            r = c.end(True)
            assert (r.error_code, int(r.producer_epoch)) == (E.none, 1)
            c.wait_state("CompleteCommit")
            data.epoch, data.seq = c.epoch, {}
            assert data.produce(topic, 0, [b"r2"]) == E.none
            assert c.end(False).error_code == E.none
            c.wait_state("CompleteAbort")
            assert data.produce(topic, 0, [b"z"], epoch=1, retry=False) == (
                E.invalid_producer_epoch
            )
        finally:
            c.close()
            data.close()
        assert committed_values(cluster.bootstrap, topic, 1) == [b"r1"]


def test_back_to_back_transactions_need_no_retry(tmp_path: Path) -> None:
    """Each transaction's first batch goes out as soon as the previous EndTxn is answered, to
    a leader on another broker than the coordinator: the leader's add waits at the coordinator
    for the previous end's markers and Complete record (one of those markers landing on that
    leader meanwhile), and the batch is appended at the first attempt."""
    with DevCluster(tmp_path, brokers=2, overrides=SMALL) as cluster:
        b = cluster.address(0)
        tid = f"b2b-{uuid.uuid4().hex[:8]}"
        coordinator = coordinator_broker(b, tid)
        topic = f"b2b-{uuid.uuid4().hex[:8]}"
        create_topic(b, topic, 1, {0: [1 - coordinator]})
        cluster.wait_for_topic(topic, 1)
        c = Client(cluster.address(coordinator), tid)
        data = Client(cluster.address(1 - coordinator), tid)
        try:
            c.init()
            data.pid, data.epoch = c.pid, c.epoch
            assert data.produce(topic, 0, [b"v0"]) == E.none  # (the first may retry)
            for i in range(1, 20):
                assert c.end(True).error_code == E.none
                data.epoch, data.seq = c.epoch, {}
                assert data.produce(topic, 0, [b"v%d" % i], retry=False) == E.none, i
            assert c.end(True).error_code == E.none
            c.wait_state("CompleteCommit")
        finally:
            c.close()
            data.close()
        values = committed_values(cluster.bootstrap, topic, 20)
        assert sorted(values) == sorted(b"v%d" % i for i in range(20))
