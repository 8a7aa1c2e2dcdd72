"""The ``wherry`` Spark source and sink against a real local Spark and a real broker."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def new_topic(bs: str, partitions: int = 3) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce(
    bs: str,
    topic: str,
    values: range | list[int],
    partitions: int,
    *,
    timestamp: Any = None,
    partition_of: Any = None,
) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in values:
        part = partition_of(i) if partition_of else i % partitions
        kwargs: dict[str, Any] = {"key": f"k{i}".encode(), "value": str(i).encode()}
        if timestamp is not None:
            kwargs["timestamp"] = timestamp(i)
        p.produce(topic, partition=part, **kwargs)
    assert p.flush(30) == 0


def source(spark: Any, bs: str, topic: str, **opts: str) -> Any:
    r = spark.readStream.format("wherry").option("kafka.bootstrap.servers", bs)
    r = r.option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def batch(spark: Any, bs: str, **opts: str) -> Any:
    r = spark.read.format("wherry").option("kafka.bootstrap.servers", bs)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def save(df: Any, bs: str, mode: str = "append", **opts: str) -> None:
    """Write `df` with the wherry sink as a batch job."""
    w = df.write.format("wherry").mode(mode).option("kafka.bootstrap.servers", bs)
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def input_rows(q: Any) -> list[int]:
    return [int(p["numInputRows"]) for p in q.recentProgress if p["numInputRows"] > 0]


def test_streaming_resumes_from_checkpoint_with_no_gap_and_no_duplicate(
    spark: Any, broker_bootstrap: str, tmp_path: Path
) -> None:
    bs = broker_bootstrap
    t = new_topic(bs, 3)
    produce(bs, t, range(300), 3)
    out, ck = tmp_path / "out", tmp_path / "ck"

    def start(**trigger: Any) -> Any:
        df = source(spark, bs, t, startingOffsets="earliest")
        return (
            df.selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(**trigger)
            .start()
        )

    q = start(processingTime="200 milliseconds")
    q.processAllAvailable()
    q.stop()
    assert sum(input_rows(q)) == 300

    # More records, and a partition added while the query was down.
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(t, 4)])[t].result(30)
    produce(bs, t, range(300, 500), 4)

    q = start(availableNow=True)
    assert q.awaitTermination(300)
    assert q.exception() is None
    assert sum(input_rows(q)) == 200  # exactly the new records

    rows = spark.read.parquet(str(out)).collect()
    values = sorted(int(r.v) for r in rows)
    assert values == list(range(500))  # none missing, none twice
    assert len({(r.partition, r.offset) for r in rows}) == 500
    assert {r.partition for r in rows} == {0, 1, 2, 3}


def test_max_offsets_per_trigger_and_starting_offsets_json(
    spark: Any, broker_bootstrap: str
) -> None:
    bs = broker_bootstrap
    t = new_topic(bs, 3)
    produce(bs, t, range(300), 3)  # 100 records in each partition
    starting = json.dumps({t: {"0": 40, "1": -2, "2": -1}})
    name = f"m_{uuid.uuid4().hex[:8]}"
    q = (
        source(spark, bs, t, startingOffsets=starting, maxOffsetsPerTrigger="50")
        .selectExpr("partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(300)
    sizes = input_rows(q)
    assert sizes and max(sizes) <= 50, sizes
    assert sum(sizes) == 160 and len(sizes) >= 4
    got = {(r.partition, r.offset) for r in spark.sql(f"select * from {name}").collect()}
    assert got == {(0, o) for o in range(40, 100)} | {(1, o) for o in range(100)}


def test_deleted_data_fails_the_query_or_is_skipped_with_a_warning(
    spark: Any, broker_bootstrap: str, tmp_path: Path, spark_output: Callable[[], str]
) -> None:
    bs = broker_bootstrap
    t = new_topic(bs, 1)
    produce(bs, t, range(50), 1)
    out, ck = tmp_path / "out", tmp_path / "ck"

    def run(fail_on_data_loss: str) -> Any:
        q = (
            source(spark, bs, t, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss)
            .selectExpr("CAST(value AS STRING) AS v")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(300)
        except Exception:
            pass
        return q

    assert run("true").exception() is None
    produce(bs, t, range(50, 100), 1)
    admin = AdminClient({"bootstrap.servers": bs})
    res = admin.delete_records([TopicPartition(t, 0, 80)])
    assert next(iter(res.values())).result(30).low_watermark == 80

    q = run("true")
    err = q.exception()
    assert err is not None
    assert "failOnDataLoss" in str(err) and "Cannot fetch offset 50" in str(err)

    q = run("false")  # the same checkpoint: the failed batch is planned again
    assert q.exception() is None
    values = sorted(int(r.v) for r in spark.read.parquet(str(out)).collect())
    assert values == list(range(50)) + list(range(80, 100))
    assert "Cannot fetch offset 50" in spark_output()


def test_batch_read_by_offsets_and_timestamps(spark: Any, broker_bootstrap: str) -> None:
    bs = broker_bootstrap
    t = new_topic(bs, 2)
    base = int(time.time() * 1000) - 100_000
    produce(bs, t, range(20), 2, timestamp=lambda i: base + (i // 2) * 1000)
    # Each partition holds offsets 0..9 with timestamps base, base+1000, ...

    def pairs(df: Any) -> set[tuple[int, int]]:
        return {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}

    df = batch(spark, bs, subscribe=t)
    rows = df.collect()
    assert len(rows) == 20
    assert {r.timestamp.timestamp() * 1000 for r in rows} == {base + i * 1000 for i in range(10)}
    assert {r.timestampType for r in rows} == {0}

    df = batch(
        spark,
        bs,
        subscribe=t,
        startingOffsets=json.dumps({t: {"0": 3, "1": -2}}),
        endingOffsets=json.dumps({t: {"0": 6, "1": -1}}),
    )
    assert pairs(df) == {(0, o) for o in range(3, 6)} | {(1, o) for o in range(10)}

    df = batch(
        spark, bs, subscribe=t, startingTimestamp=str(base + 2500), endingTimestamp=str(base + 7500)
    )
    assert pairs(df) == {(p, o) for p in (0, 1) for o in range(3, 8)}

    df = batch(
        spark,
        bs,
        assign=json.dumps({t: [0, 1]}),
        startingOffsetsByTimestamp=json.dumps({t: {"0": base + 5000, "1": base}}),
        endingOffsets=json.dumps({t: {"0": -1, "1": 4}}),
    )
    assert pairs(df) == {(0, o) for o in range(5, 10)} | {(1, o) for o in range(4)}

    with pytest.raises(Exception, match="startingTimestamp"):
        batch(spark, bs, subscribe=t, startingTimestamp=str(base + 10**9)).collect()
    df = batch(
        spark,
        bs,
        subscribe=t,
        startingTimestamp=str(base + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0

    df = batch(spark, bs, subscribe=t, minPartitions="6")
    assert df.rdd.getNumPartitions() >= 6
    assert df.count() == 20


def kcat_read(bs: str, topic: str, count: int) -> list[str]:
    assert KCAT is not None
    out = subprocess.run(
        [
            KCAT,
            "-C",
            "-b",
            bs,
            "-t",
            topic,
            "-o",
            "beginning",
            "-c",
            str(count),
            "-e",
            "-q",
            "-f",
            "%p|%k|%s|%h\\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if line]


@pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")
def test_batch_and_streaming_writes_are_readable_by_kcat(
    spark: Any, broker_bootstrap: str, tmp_path: Path
) -> None:
    bs = broker_bootstrap
    t = new_topic(bs, 2)
    rows = [(f"k{i}", f"v{i}", i % 2, [("h", f"x{i}".encode())]) for i in range(40)]
    df = spark.createDataFrame(
        rows,
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    save(df, bs, topic=t)
    got = sorted(kcat_read(bs, t, 40))
    assert got == sorted(f"{i % 2}|k{i}|v{i}|h=x{i}" for i in range(40))

    src, dst = new_topic(bs, 3), new_topic(bs, 1)
    produce(bs, src, range(100), 3)
    q = (
        source(spark, bs, src, startingOffsets="earliest")
        .selectExpr("key", "CONCAT('out-', CAST(value AS STRING)) AS value")
        .writeStream.format("wherry")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(300)
    assert q.exception() is None
    got = sorted(kcat_read(bs, dst, 100))
    assert got == sorted(f"0|k{i}|out-{i}|" for i in range(100))


def test_bad_input_gives_errors_that_name_the_option(
    spark: Any, broker_bootstrap: str, tmp_path: Path
) -> None:
    bs = broker_bootstrap
    t = new_topic(bs, 1)
    missing = f"missing-{uuid.uuid4().hex[:8]}"

    def fails(pattern: str, df_fn: Any) -> None:
        with pytest.raises(Exception, match=pattern):
            df_fn()

    fails(
        r"'subscribe'.*do not exist.*" + missing,
        lambda: batch(spark, bs, subscribe=missing).collect(),
    )
    fails(
        r"'assign'.*do not exist", lambda: batch(spark, bs, assign=json.dumps({t: [7]})).collect()
    )
    fails(
        r"'startingOffsets'.*not valid JSON",
        lambda: batch(spark, bs, subscribe=t, startingOffsets='{"x": ').collect(),
    )
    fails(r"'assign'.*JSON", lambda: batch(spark, bs, assign="[0, 1]").collect())
    fails(
        r"'startingOffsets'.*missing",
        lambda: batch(spark, bs, subscribe=t, startingOffsets=json.dumps({t: {}})).collect(),
    )
    fails(
        r"'kafka.bootstrap.servers'.*no answer",
        lambda: batch(spark, "127.0.0.1:1", subscribe=t, metadataTimeoutMs="2000").collect(),
    )

    q = (
        source(spark, bs, missing)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(Exception, match=r"'subscribe'.*do not exist"):
        q.awaitTermination(120)

    no_value = spark.createDataFrame([("k",)], "key string")
    fails(r"'value'", lambda: save(no_value, bs, topic=t))
    values = spark.createDataFrame([("v",)], "value string")
    fails(r"'topic'", lambda: save(values, bs))
    fails(r"overwrite", lambda: save(values, bs, "overwrite", topic=t))
