"""The exactly-once sink's driver-side transaction calls against a real broker: a transaction
that a producer process began and left open is committed by another party knowing only its
(transactional id, producer id, epoch); committing it again succeeds; a fenced epoch is
refused; ListTransactions shows the states."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers import create_topic
from wherry.spark.options import SinkOptions
from wherry.spark.txn_wire import TxnRequestError, end_txn, list_transactions
from wherry.testing.cluster import DevCluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]



def open_transaction(bs: str, topic: str, txn_id: str, values: list[str]) -> tuple[int, int]:
    """Write ``values`` in a transaction of ``txn_id`` and drop the producer with the
    transaction still open; its producer id and epoch."""
    pytest.importorskip("pyspark")
    from wherry.spark.exactly_once import STATS_INTERVAL_MS, producer_id_and_epoch
    from wherry.spark.kafka_access import RowProducer

    stats: list[str] = []
    opts = SinkOptions.parse({"kafka.bootstrap.servers": bs, "topic": topic})
    p = RowProducer(
        opts,
        {"transactional.id": txn_id, "statistics.interval.ms": STATS_INTERVAL_MS,
         "stats_cb": stats.append, "log_level": 0},
    )
    p.client.init_transactions(20)
    p.client.begin_transaction()
    for v in values:
        p.send(topic, v.encode(), None, 0, None)
    p.close()
    ids = producer_id_and_epoch(p, stats, 20)
    del p
    return ids


def committed_values(bs: str, topic: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bs, "group.id": uuid.uuid4().hex,
                  "isolation.level": "read_committed", "log_level": 0})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    try:
        for _ in range(40):
            m = c.poll(0.25)
            if m is not None and m.error() is None:
                out.append(m.value().decode())
    finally:
        c.close()
    return out


def states(bs: str, txn_id: str) -> list[str]:
    return [t.state for t in list_transactions([bs]) if t.transactional_id == txn_id]


def test_an_open_transaction_is_committed_by_id_and_epoch_and_a_fenced_one_refused(
    tmp_path: Path,
) -> None:
    with DevCluster(tmp_path / "cluster", brokers=1) as c:
        bs = c.bootstrap
        topic = f"wire-{uuid.uuid4().hex[:8]}"
        create_topic(bs, topic)
        pid, epoch = open_transaction(bs, topic, "t-commit", ["a", "b"])
        assert states(bs, "t-commit") == ["Ongoing"]
        assert committed_values(bs, topic) == []
        end_txn(bs, "t-commit", pid, epoch, commit=True, timeout_s=20)
        end_txn(bs, "t-commit", pid, epoch, commit=True, timeout_s=20)  # again: still fine
        assert committed_values(bs, topic) == ["a", "b"]
        assert states(bs, "t-commit") == ["CompleteCommit"]

        old_pid, old_epoch = open_transaction(bs, topic, "t-fenced", ["x"])
        Producer({"bootstrap.servers": bs, "transactional.id": "t-fenced",
                  "log_level": 0}).init_transactions(20)  # a later attempt: aborts and fences
        with pytest.raises(TxnRequestError, match="t-fenced"):
            end_txn(bs, "t-fenced", old_pid, old_epoch, commit=True, timeout_s=20)
        assert committed_values(bs, topic) == ["a", "b"]
        assert states(bs, "t-fenced") == ["Empty"]  # aborted, then taken over by the new epoch


def test_the_querys_stray_open_transactions_are_aborted_and_its_own_kept(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from wherry.spark.exactly_once import TxnResult, fence_strays, transactional_id

    with DevCluster(tmp_path / "cluster", brokers=1) as c:
        bs = c.bootstrap
        topic = f"wire-{uuid.uuid4().hex[:8]}"
        create_topic(bs, topic)
        mine, stray = transactional_id("q1", 0), transactional_id("q1", 7)
        other = transactional_id("q2", 7)  # another query's: not touched
        pid, epoch = open_transaction(bs, topic, mine, ["kept"])
        open_transaction(bs, topic, stray, ["stray"])
        open_transaction(bs, topic, other, ["other"])
        opts = SinkOptions.parse({"kafka.bootstrap.servers": bs, "exactlyOnce": "true"})
        owned = [TxnResult("q1", mine, pid, epoch, 3, 1)]
        assert fence_strays(opts, owned) == [stray]
        assert states(bs, stray) == ["Empty"]
        assert states(bs, mine) == ["Ongoing"] and states(bs, other) == ["Ongoing"]
        end_txn(bs, mine, pid, epoch, commit=True, timeout_s=20)
        end_txn(bs, other, *_ids(bs, other), commit=False, timeout_s=20)
        assert committed_values(bs, topic) == ["kept"]


def _ids(bs: str, txn_id: str) -> tuple[int, int]:
    from tests.kafka_wire import call

    [t] = call(bs, 65, 0, {"transactional_ids": [txn_id]}).transaction_states
    return int(t.producer_id), int(t.producer_epoch)
