"""Spark connector benchmark: a streaming read of wherry records vs Spark's own ``rate`` source.

    python bench/spark.py                   # 1,000,000 records of 100 B
    python bench/spark.py --records 200000  # smaller

Both queries run in the same local Spark (``local[2]``), one after the other, into the
``noop`` sink, each split into the same number of micro-batches: the ``wherry`` source reads
a 4-partition topic filled beforehand (``maxOffsetsPerTrigger`` = records / batches,
``trigger(availableNow=True)``); ``rate-micro-batch`` (Spark's built-in generator of the
``rate`` family that emits a fixed row count per micro-batch instead of pacing rows by wall
time) produces the same number of rows per micro-batch. Time is from ``start()`` to the
query's end; rows/s of both and their ratio are printed. A third query reads a Python data
source that yields pre-built Arrow batches of the same shape with no Kafka behind it: the cost
of Spark's Python-source path alone, so the gap between the connector and ``rate`` can be split
into Spark's share and the connector's. Before timing, each of the three is run once on a few
rows (Spark's Python workers start and import their modules; the connector's Kafka clients,
which Spark's reused workers keep, connect), and the floor source once on ``--warmup-rows``
rows (default 200,000): the JVM compiles its code for Spark's Python-source path during the
first large query through it, which would otherwise be charged to whichever query runs
first (the wherry source).

With ``--rounds N`` (default 4) the wherry source and the floor are each timed N times, in
rounds of one query each, the order alternating from round to round (wherry then floor, floor
then wherry, ...), each query reading from the start again. The ratio to the floor is the
median of the rounds' ratios (each of two queries run one right after the other); the rows/s
printed for each are the median of its runs; every round is printed too. On a shared machine
whose load moves by the second, one pair of queries can land one in a busy moment and the
other in a quiet one, and the second query of a pair has run faster than the first whichever
source it was (by about 10% on the 2-core VM these figures come from): an even number of
rounds puts each source first equally often. ``--rounds 1`` times each once (wherry first).

The sink rows: ``--sink-records`` records (default 200,000) of another topic are copied by a
streaming query into a new topic, once with the default (at-least-once) sink and once with
``exactlyOnce=true``, in the same number of micro-batches; rows/s of both and their ratio
(``--sink-records 0`` leaves them out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    return timed_writer(df.writeStream.format("noop"))


def timed_writer(writer: Any) -> tuple[float, int, int]:
    """Run a streaming writer's query with ``availableNow``; (seconds, rows, micro-batches)."""
    t0 = time.perf_counter()
    q = writer.trigger(availableNow=True).start()
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    return elapsed, sum(int(p["numInputRows"]) for p in progress), len(progress)


def floor_source(records: int, per_batch: int, partitions: int) -> type:
    """A Python data source that yields pre-built Arrow batches of the same shape as the
    connector's rows, with no Kafka behind it: the cost of Spark's Python source path alone."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

    from wherry.spark.row_schema import BASE_SCHEMA_DDL

    class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def prepareForTriggerAvailableNow(self) -> None:
            return None

        def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
            return {"o": min(records, start["o"] + per_batch)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            a, b = start["o"], end["o"]
            step = -(-(b - a) // partitions)
            return [InputPartition((i, min(i + step, b))) for i in range(a, b, step)]

        def read(self, partition: InputPartition) -> Any:
            a, b = partition.value
            n = b - a
            stamps = pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([None] * n, pa.binary()),
                    pa.array([b"x" * 100] * n, pa.binary()),
                    pa.array(["bench-spark"] * n, pa.string()),
                    pa.array([0] * n, pa.int32()),
                    pa.array(range(a, b), pa.int64()),
                    stamps,
                    pa.array([0] * n, pa.int32()),
                ],
                names=[
                    "key",
                    "value",
                    "topic",
                    "partition",
                    "offset",
                    "timestamp",
                    "timestampType",
                ],
            )

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "wherry_bench_floor"

        def schema(self) -> str:
            return BASE_SCHEMA_DDL

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return FloorReader()

    return FloorSource


def timed_copy(
    spark: Any, bootstrap: str, source: str, target: str, per_batch: int, exactly_once: bool
) -> tuple[float, int, int]:
    """A streaming copy of ``source`` into ``target`` with the wherry sink; (seconds, rows,
    micro-batches)."""
    with tempfile.TemporaryDirectory() as ck:
        w = (
            spark.readStream.format("wherry")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", per_batch)
            .load()
            .select("key", "value")
            .writeStream.format("wherry")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", target)
            .option("checkpointLocation", ck)
        )
        if exactly_once:
            w = w.option("exactlyOnce", "true")
        return timed_writer(w)


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


def rows_per_s(run: tuple[float, int, int]) -> float:
    return run[1] / run[0]


def median_run(runs: list[tuple[float, int, int]]) -> tuple[float, int, int]:
    """The run of median rows/s (of an even number, the slower of the middle two)."""
    ordered = sorted(runs, key=rows_per_s)
    return ordered[(len(ordered) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spark connector benchmark")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--sink-records", type=int, default=200_000)
    parser.add_argument("--warmup-rows", type=int, default=200_000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="time the wherry source and the floor this many times each, in rounds of one "
        "query each whose order alternates; the median of the rounds' ratios is reported "
        "(default 4)",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from wherry.spark import register

    env = environment()
    print("env:", json.dumps(env), file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp, Broker(Path(tmp) / "data").start() as broker:
        topic = "bench-spark"
        fill_s = fill_topic(broker.bootstrap, topic, args.records, args.size)
        print(f"filled {args.records} records in {fill_s:.1f} s", file=sys.stderr)
        fill_topic(broker.bootstrap, "bench-spark-warm", 2000, args.size)
        fill_topic(broker.bootstrap, "bench-spark-copy", args.sink_records, args.size)
        for name in ("bench-spark-alo", "bench-spark-eos"):
            fill_topic(broker.bootstrap, name, 0, args.size)
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
            # Warm up the JVM's streaming path and Spark's Python workers before timing.
            timed_rate_query(spark, 1000, 2)
            spark.dataSource.register(floor_source(2000, 1000, 4))
            timed_query(spark.readStream.format("wherry_bench_floor").load())
            if args.warmup_rows:
                warm = args.warmup_rows
                spark.dataSource.register(floor_source(warm, -(-warm // args.batches), 4))
                timed_query(spark.readStream.format("wherry_bench_floor").load())
            timed_query(
                spark.readStream.format("wherry")
                .option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", "bench-spark-warm")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", 1000)
                .load()
            )
            wherry_runs: list[tuple[float, int, int]] = []
            floor_runs: list[tuple[float, int, int]] = []
            rate = None
            spark.dataSource.register(floor_source(args.records, per_batch, 4))  # re-registers
            for round_no in range(args.rounds):
                order = ("wherry", "floor") if round_no % 2 == 0 else ("floor", "wherry")
                for which in order:
                    if which == "floor":
                        floor_runs.append(
                            timed_query(spark.readStream.format("wherry_bench_floor").load())
                        )
                        continue
                    source = (
                        spark.readStream.format("wherry")
                        .option("kafka.bootstrap.servers", broker.bootstrap)
                        .option("subscribe", topic)
                        .option("startingOffsets", "earliest")
                        .option("maxOffsetsPerTrigger", per_batch)
                        .load()
                    )
                    wherry_runs.append(timed_query(source))
                    if rate is None:
                        rate = timed_rate_query(spark, per_batch, wherry_runs[0][2])
                w_rps, f_rps = rows_per_s(wherry_runs[-1]), rows_per_s(floor_runs[-1])
                print(
                    f"round {round_no + 1} ({' then '.join(order)}): wherry {w_rps:,.0f} rows/s, "
                    f"floor {f_rps:,.0f} rows/s, ratio {w_rps / f_rps:.2f}x, load average "
                    f"{os.getloadavg()[0]:.2f}"
                )
            wherry, floor = median_run(wherry_runs), median_run(floor_runs)
            sink_batch = -(-args.sink_records // args.batches)
            copy = (broker.bootstrap, "bench-spark-copy")
            alo = eos = None
            if args.sink_records:
                alo = timed_copy(spark, *copy, "bench-spark-alo", sink_batch, False)
                eos = timed_copy(spark, *copy, "bench-spark-eos", sink_batch, True)
        finally:
            spark.stop()
    results: dict[str, Any] = {"env": env, "records": args.records, "record_bytes": args.size}
    results["rounds"] = [
        {"wherry_rows_per_s": rows_per_s(w), "python_floor_rows_per_s": rows_per_s(f)}
        for w, f in zip(wherry_runs, floor_runs, strict=True)
    ]
    rows = (
        ("wherry", "wherry source:", wherry),
        ("rate", "rate source:  ", rate),
        ("python_floor", "Python source floor (pre-built batches, no Kafka):", floor),
        ("sink_at_least_once", "sink, at least once:", alo),
        ("sink_exactly_once", "sink, exactly once: ", eos),
    )
    for key, label, measured in rows:
        if measured is None:
            continue
        seconds, n, batches = measured
        results[key] = {
            "seconds": seconds,
            "rows": n,
            "micro_batches": batches,
            "rows_per_s": n / seconds,
        }
        print(
            f"{label} {n:,} rows in {batches} micro-batches, {seconds:.2f} s, "
            f"{n / seconds:,.0f} rows/s"
        )

    def rps(key: str) -> float:
        return float(results[key]["rows_per_s"])

    results["ratio"] = rps("wherry") / rps("rate")
    results["ratio_to_floor"] = statistics.median(
        rows_per_s(w) / rows_per_s(f) for w, f in zip(wherry_runs, floor_runs, strict=True)
    )
    line = (
        f"ratio wherry/rate: {results['ratio']:.2f}x; "
        f"wherry/floor: {results['ratio_to_floor']:.2f}x"
        + (f" (median of {args.rounds} rounds)" if args.rounds > 1 else "")
    )
    if args.sink_records:
        sink = rps("sink_exactly_once") / rps("sink_at_least_once")
        results["sink_ratio_exactly_once_to_at_least_once"] = sink
        line += f"; sink exactly once/at least once: {sink:.2f}x"
    print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
