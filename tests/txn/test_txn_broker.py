"""The transaction coordinator in real brokers, over the wire: InitProducerId,
AddPartitionsToTxn, EndTxn, Describe/ListTransactions, fencing; the coordinator moving with the
leadership of its `__transaction_state` partition and completing a transaction left in
PrepareCommit by resending its markers.

WriteTxnMarkers (key 27) is the partition leader's; here a recording stand-in answers it (so
these tests check the coordinator's side of the wire contract whether or not the real handler
is present): it answers NOT_ENOUGH_REPLICAS while `refuse` is set, else NONE. The coordinator
writes its own broker's markers in process; here it sends them all over the wire.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_wire import call
from wherry.coordinator.txn_markers import LocalMarkers
from wherry.server.handlers import LOADED, SUPPORTED_VERSIONS
from wherry.testing.cluster import DevCluster

E = ErrorCode


class FakeMarkers:
    def __init__(self) -> None:
        self.refuse = False
        self.received: list[tuple[int, int, bool, int, list[tuple[str, int]]]] = []

    async def handle(self, broker: Any, req: Any) -> Mapping[str, Any]:
        err = E.not_enough_replicas if self.refuse else E.none
        out = []
        for m in req.body.markers:
            tps = [(t.name, int(p)) for t in m.topics for p in t.partition_indexes]
            self.received.append(
                (int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
                 int(m.coordinator_epoch), tps))
            out.append({"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p, "error_code": err} for p in t.partition_indexes]}
                for t in m.topics]})
        return {"markers": out}


@pytest.fixture
def fake_markers(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMarkers]:
    fake = FakeMarkers()
    monkeypatch.setattr(LocalMarkers, "takes", lambda self, tp: False)
    saved = LOADED.get(27), SUPPORTED_VERSIONS.get(27)
    LOADED[27] = fake.handle
    SUPPORTED_VERSIONS[27] = (1, 1)
    try:
        yield fake
    finally:
        if saved[0] is None:
            LOADED.pop(27, None)
        else:
            LOADED[27] = saved[0]
        if saved[1] is None:
            SUPPORTED_VERSIONS.pop(27, None)
        else:
            SUPPORTED_VERSIONS[27] = saved[1]


def until(fn: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def coordinator_of(bootstrap: str, tid: str) -> int:
    def find() -> list[int]:
        c = call(bootstrap, 10, 4, {"key_type": 1, "coordinator_keys": [tid]}).coordinators[0]
        return [int(c.node_id)] if c.error_code == E.none else []

    return int(until(find)[0])


def init(bootstrap: str, tid: str, version: int = 4, pid: int = -1, epoch: int = -1) -> Any:
    def attempt() -> Any:
        r = call(bootstrap, 22, version, {
            "transactional_id": tid, "transaction_timeout": 60_000,
            "producer_id": pid, "producer_epoch": epoch})
        retriable = (E.coordinator_load_in_progress, E.concurrent_transactions,
                     E.not_coordinator, E.coordinator_not_available)
        return None if r.error_code in retriable else r

    return until(attempt)


def add(bootstrap: str, tid: str, pid: int, epoch: int, topic: str, parts: list[int],
        version: int = 3) -> dict[int, ErrorCode]:
    r = call(bootstrap, 24, version, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": parts}]})
    [t] = r.results_by_topic_v3_and_below
    return {int(p.partition_index): p.partition_error_code for p in t.results_by_partition}


def end(bootstrap: str, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> Any:
    return call(bootstrap, 26, version, {"transactional_id": tid, "producer_id": pid,
                                         "producer_epoch": epoch, "committed": commit}).error_code


def describe(bootstrap: str, tid: str) -> Any:
    return call(bootstrap, 65, 0, {"transactional_ids": [tid]}).transaction_states[0]


def create_topic(bootstrap: str, name: str, partitions: int, rf: int = 1) -> None:
    r = call(bootstrap, 19, 7, {"topics": [{"name": name, "num_partitions": partitions,
                                            "replication_factor": rf, "assignments": [],
                                            "configs": []}],
                                "timeout": 10_000, "validate_only": False})
    assert r.topics[0].error_code in (E.none, E.topic_already_exists)


def test_transaction_over_the_wire(tmp_path: Path, fake_markers: FakeMarkers) -> None:
    with DevCluster(tmp_path, brokers=1, overrides={
            "transaction.state.log.num.partitions": "3"}) as cluster:
        b = cluster.bootstrap
        create_topic(b, "out", 2)
        assert coordinator_of(b, "tx-1") == 0
        r = init(b, "tx-1")
        assert r.error_code == E.none and r.producer_epoch == 0
        pid = int(r.producer_id)
        assert add(b, "tx-1", pid, 0, "out", [0, 1]) == {0: E.none, 1: E.none}
        assert add(b, "tx-1", pid, 0, "missing", [0]) == {0: E.unknown_topic_or_partition}
        assert describe(b, "tx-1").transaction_state == "Ongoing"
        assert end(b, "tx-1", pid, 0, True) == E.none
        until(lambda: describe(b, "tx-1").transaction_state == "CompleteCommit")
        [(m_pid, m_epoch, commit, _, tps)] = fake_markers.received
        assert (m_pid, m_epoch, commit, sorted(tps)) == (pid, 0, True, [("out", 0), ("out", 1)])
        lst = call(b, 66, 1, {"state_filters": ["CompleteCommit"], "producer_id_filters": [],
                              "duration_filter": -1})
        assert [t.transactional_id for t in lst.transaction_states] == ["tx-1"]
        # A new producer instance bumps the epoch; the old one is fenced, per version.
        assert init(b, "tx-1").producer_epoch == 1
        assert add(b, "tx-1", pid, 0, "out", [0]) == {0: E.producer_fenced}
        assert add(b, "tx-1", pid, 0, "out", [0], version=1) == {0: E.invalid_producer_epoch}
        assert end(b, "tx-1", pid, 0, False, version=1) == E.invalid_producer_epoch
        assert end(b, "tx-1", pid, 1, False) == E.invalid_txn_state  # nothing ongoing
        # KIP-360: the producer gives its id and epoch and bumps.
        assert init(b, "tx-1", pid=pid, epoch=1).producer_epoch == 2
        r = call(b, 22, 4, {"transactional_id": "tx-2", "transaction_timeout": 10**9,
                            "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == E.invalid_transaction_timeout


def test_coordinator_failover_completes_a_prepared_commit(
    tmp_path: Path, fake_markers: FakeMarkers
) -> None:
    overrides = {"transaction.state.log.num.partitions": "1",
                 "transaction.state.log.replication.factor": "3",
                 "transaction.state.log.min.isr": "2"}
    with DevCluster(tmp_path, brokers=3, overrides=overrides) as cluster:
        create_topic(cluster.address(0), "out", 1, rf=3)
        first = coordinator_of(cluster.address(0), "tx-f")
        b = cluster.address(first)
        r = init(b, "tx-f")
        pid = int(r.producer_id)
        assert add(b, "tx-f", pid, 0, "out", [0]) == {0: E.none}
        fake_markers.refuse = True  # markers cannot be written yet: stuck in PrepareCommit
        assert end(b, "tx-f", pid, 0, True) == E.none
        until(lambda: fake_markers.received)
        assert describe(cluster.address(first), "tx-f").transaction_state == "PrepareCommit"
        epoch_before = fake_markers.received[-1][3]
        cluster.stop_broker(first)
        fake_markers.received.clear()
        fake_markers.refuse = False
        alive = next(i for i in cluster.broker_ids if i != first)
        second = coordinator_of(cluster.address(alive), "tx-f")
        assert second != first
        addr = cluster.address(second)
        until(lambda: describe(addr, "tx-f").transaction_state == "CompleteCommit")
        m_pid, _, commit, coordinator_epoch, tps = fake_markers.received[-1]
        assert (m_pid, commit, tps) == (pid, True, [("out", 0)])
        assert coordinator_epoch > epoch_before  # the new leader epoch of __transaction_state
        assert cluster.broker(second).transactions.coordinator.owned_partitions() == {0}
