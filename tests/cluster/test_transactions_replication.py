"""RF 3: followers replicate transactional batches and markers and rebuild the same
transaction state; after a leader change the new leader has the same LSO and aborted index."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.e2e.test_transactions_wire import data_offsets, fetch, markers, produce, txn_batch
from tests.helpers import create_topic
from wherry.common.topic_partition import TopicPartition
from wherry.testing.cluster import DevCluster, wait_until


def state(c: DevCluster, broker: int, tp: TopicPartition) -> tuple[int, dict[int, int], list]:  # type: ignore[type-arg]
    def get() -> tuple[int, dict[int, int], list]:  # type: ignore[type-arg]
        part = c.broker(broker).replica_manager.get_partition(tp)
        assert part is not None
        plog = part.log
        return (
            plog.log_end_offset,
            dict(plog.producer_state.ongoing_transactions),
            plog.collect_aborted_transactions(0, plog.log_end_offset),
        )

    return c.call(get)


# Hand-built batches of no coordinator's transactions: the leaders' verification is off.
@pytest.mark.wherry(brokers=3, overrides={"transaction.partition.verification.enable": "false"})
def test_followers_rebuild_transactions_and_new_leader_keeps_them(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    t = f"txr-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, t, [[0, 1, 2]], **{"min.insync.replicas": "2"})
    c.wait_for_topic(t, 1)
    tp = TopicPartition(t, 0)
    leader = c.address(0)
    a, b = 7_000_001, 7_000_002
    assert produce(leader, t, txn_batch(a, 0, 0, [b"a0", b"a1"]), txn_id="a").error_code == 0
    assert produce(leader, t, txn_batch(b, 0, 0, [b"b0"]), txn_id="b").error_code == 0
    assert markers(leader, (a, 0, False, 0, t, 0)) == [ErrorCode.none]  # acks=all: ISR has it
    assert wait_until(lambda: all(state(c, i, tp)[0] == 4 for i in (0, 1, 2)), 15)
    expected = state(c, 0, tp)
    assert expected[1] == {b: 2}
    assert [(x.producer_id, x.first_offset, x.last_offset) for x in expected[2]] == [(a, 0, 3)]
    for follower in (1, 2):
        assert state(c, follower, tp) == expected

    c.stop_broker(0)  # controlled shutdown: leadership moves to 1 or 2
    new = [0]

    def moved() -> bool:
        for i in (1, 2):
            part = c.call(lambda i=i: c.broker(i).replica_manager.get_partition(tp))
            if part is not None and part.is_leader:
                new[0] = i
                return True
        return False

    assert wait_until(moved, 20)
    addr = c.address(new[0])
    assert state(c, new[0], tp) == expected
    r = fetch(addr, t, 0, 1)
    assert r.last_stable_offset == 2  # b's open transaction
    assert markers(addr, (b, 0, True, 0, t, 0)) == [ErrorCode.none]
    assert wait_until(lambda: fetch(addr, t, 0, 1).last_stable_offset == 5, 15)
    r = fetch(addr, t, 0, 1)
    assert data_offsets(r.records) == [0, 1, 2]
    assert [(x.producer_id, x.first_offset) for x in r.aborted_transactions] == [(a, 0)]
