"""The exactly-once streaming sink on a local Spark: a streaming copy killed mid-batch and
restarted from its checkpoint, then restarted again as if it had died between committing a
batch's transactions and Spark's record of that commit; read back with read_committed, the
output holds every input record exactly once, and no transaction of the query is left open."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.spark.txn_wire import list_transactions

pytestmark = [pytest.mark.slow, pytest.mark.spark]

FINISHED_STATES = {"CompleteCommit", "CompleteAbort", "Empty", "Dead"}


def new_topic(bs: str, partitions: int) -> str:
    name = f"eos-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce(bs: str, topic: str, values: range, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in values:
        p.produce(topic, partition=i % partitions, value=str(i).encode())
    assert p.flush(30) == 0


def read_committed(bs: str, topic: str, partitions: int, expect: int) -> list[int]:
    """Every committed value of ``topic``: until ``expect`` arrived, and 3 s more (so that a
    duplicate after them would be seen too)."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[int] = []
    deadline = time.monotonic() + 60
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            if quiet_until is None and len(out) >= expect:
                quiet_until = time.monotonic() + 3
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(int(m.value()))
    finally:
        c.close()
    return out


def forget_last_commit(checkpoint: Path) -> int:
    """Delete the checkpoint's record of its last committed batch (as if the driver died right
    after the sink's commit); that batch runs again at the next start. Its id."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_a_killed_and_restarted_copy_writes_every_record_exactly_once(
    spark: Any, broker_bootstrap: str, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

    from wherry.spark.exactly_once import transactional_id

    bs = broker_bootstrap
    src, dst = new_topic(bs, 3), new_topic(bs, 2)
    produce(bs, src, range(600), 3)
    ck = tmp_path / "ck"
    die_once = tmp_path / "died"

    # Kills its Python worker (os._exit) at value 450, once: the task and the query fail
    # mid-batch, with earlier batches committed and this batch's transactions open.
    @udf("string")
    def dies_once_at_450(v: str) -> str:
        import os

        if v == "450" and not os.path.exists(str(die_once)):
            open(str(die_once), "w").close()
            os._exit(1)
        return v

    def start() -> Any:
        df = (
            spark.readStream.format("wherry")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "150")
            .load()
        )
        return (
            df.select(dies_once_at_450(df.value.cast("string")).alias("value"))
            .writeStream.format("wherry")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", dst)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(ck))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    q = start()
    query_id = q.id
    with pytest.raises(Exception):  # noqa: B017  (py4j's or Spark's streaming error)
        q.awaitTermination(200)
    assert die_once.exists()
    assert q.exception() is not None

    q = start()  # from the checkpoint: the failed batch runs again
    assert q.id == query_id
    q.processAllAvailable()
    q.stop()
    assert sorted(read_committed(bs, dst, 2, 600)) == list(range(600))

    # As if the driver died after committing the last batch's transactions and before Spark
    # recorded the commit: Spark runs that batch again, and the sink must not write it twice.
    last = forget_last_commit(ck)
    produce(bs, src, range(600, 900), 3)
    q = start()
    q.processAllAvailable()
    q.stop()
    rerun = [p for p in q.recentProgress if p["batchId"] == last]
    assert rerun and rerun[0]["numInputRows"] > 0  # the batch did run again, with its rows
    values = read_committed(bs, dst, 2, 900)
    assert len(values) == 900, f"{len(values) - len(set(values))} duplicate(s)"
    assert sorted(values) == list(range(900))

    brokers = bs.split(",")
    ours = [
        t
        for t in list_transactions(brokers)
        if t.transactional_id.startswith(transactional_id(query_id, 0)[:-1])
    ]
    assert ours, "the query's transactions are listed"
    assert all(t.state in FINISHED_STATES for t in ours), ours


def test_the_default_sink_writes_a_batch_run_again_twice(
    spark: Any, broker_bootstrap: str, tmp_path: Path
) -> None:
    """The same lost commit record with the default (at-least-once) sink: the batch run again
    is written again. (What the exactly-once sink's markers prevent above.)"""
    bs = broker_bootstrap
    src, dst = new_topic(bs, 3), new_topic(bs, 2)
    produce(bs, src, range(300), 3)
    ck = tmp_path / "ck"

    def start() -> Any:
        return (
            spark.readStream.format("wherry")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "100")
            .load()
            .select("value")
            .writeStream.format("wherry")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", dst)
            .option("checkpointLocation", str(ck))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    q = start()
    q.processAllAvailable()
    q.stop()
    last = forget_last_commit(ck)
    q = start()
    q.processAllAvailable()
    q.stop()
    rerun = [p for p in q.recentProgress if p["batchId"] == last]
    assert rerun and rerun[0]["numInputRows"] > 0
    values = read_committed(bs, dst, 2, 300 + rerun[0]["numInputRows"])
    duplicates = len(values) - len(set(values))
    print(f"at least once: {duplicates} duplicate(s) after the batch ran again")
    assert sorted(set(values)) == list(range(300))
    assert duplicates == rerun[0]["numInputRows"]
