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

from wherry.spark.exactly_once import transactional_id
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


def test_a_killed_and_restarted_copy_writes_every_record_exactly_once(
    spark: Any, broker_bootstrap: str, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

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
    last = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    (ck / "commits" / str(last)).unlink()
    (ck / "commits" / f".{last}.crc").unlink(missing_ok=True)
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
