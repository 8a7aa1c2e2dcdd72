"""Spark connector benchmark: a streaming read of wherry records vs Spark's own ``rate`` source.

    python bench/spark.py                   # 1,000,000 records of 100 B
    python bench/spark.py --records 200000  # smaller

Both queries run in the same local Spark (``local[2]``), one after the other, into the
``noop`` sink, each split into the same number of micro-batches: the ``wherry`` source reads
a 4-partition topic filled beforehand (``maxOffsetsPerTrigger`` = records / batches,
``trigger(availableNow=True)``); ``rate-micro-batch`` (Spark's built-in generator of the
``rate`` family that emits a fixed row count per micro-batch instead of pacing rows by wall
time) produces the same number of rows per micro-batch. Time is from ``start()`` to the
query's end; rows/s of both and their ratio are printed. Needs ``wherry[spark]`` and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Broker, environment


def fill_topic(bootstrap: str, topic: str, records: int, size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000})
    value = b"x" * size
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records not acknowledged")
    return time.perf_counter() - t0


def timed_query(df: Any) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    q = df.writeStream.format("noop").trigger(availableNow=True).start()
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    return elapsed, sum(int(p["numInputRows"]) for p in progress), len(progress)


def timed_rate_query(spark: Any, rows_per_batch: int, batches: int) -> tuple[float, int, int]:
    df = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch).load()
    t0 = time.perf_counter()
    q = df.writeStream.format("noop").trigger(processingTime="0 seconds").start()
    while True:
        done = [p for p in q.recentProgress if p["numInputRows"] > 0]
        if len(done) >= batches:
            break
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    q.stop()
    return elapsed, sum(int(p["numInputRows"]) for p in done[:batches]), batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spark connector benchmark")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from wherry.spark import register

    env = environment()
    print("env:", json.dumps(env), file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp, Broker(Path(tmp) / "data").start() as broker:
        topic = "bench-spark"
        fill_s = fill_topic(broker.bootstrap, topic, args.records, args.size)
        print(f"filled {args.records} records in {fill_s:.1f} s", file=sys.stderr)
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        per_batch = -(-args.records // args.batches)
        try:
            # Warm up the JVM's streaming code path before timing.
            timed_rate_query(spark, 1000, 2)
            source = (
                spark.readStream.format("wherry")
                .option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", per_batch)
                .load()
            )
            w_s, w_rows, w_batches = timed_query(source)
            r_s, r_rows, r_batches = timed_rate_query(spark, per_batch, w_batches)
        finally:
            spark.stop()
    results = {
        "env": env,
        "records": args.records,
        "record_bytes": args.size,
        "wherry": {
            "seconds": w_s,
            "rows": w_rows,
            "micro_batches": w_batches,
            "rows_per_s": w_rows / w_s,
        },
        "rate": {
            "seconds": r_s,
            "rows": r_rows,
            "micro_batches": r_batches,
            "rows_per_s": r_rows / r_s,
        },
    }
    ratio = results["wherry"]["rows_per_s"] / results["rate"]["rows_per_s"]
    results["ratio"] = ratio
    print(
        f"wherry source: {w_rows:,} rows in {w_batches} micro-batches, {w_s:.2f} s, "
        f"{w_rows / w_s:,.0f} rows/s"
    )
    print(
        f"rate source:   {r_rows:,} rows in {r_batches} micro-batches, {r_s:.2f} s, "
        f"{r_rows / r_s:,.0f} rows/s"
    )
    print(f"ratio wherry/rate: {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
