"""A Spark Structured Streaming pipeline over wherry topics.

1. Produce click/view events (JSON) into the topic ``events``.
2. A streaming job reads ``events`` with the ``wherry`` source, counts events per one-minute
   window and action, and writes the counts (JSON) to the topic ``event-counts`` with the
   ``wherry`` sink (from ``foreachBatch``, as Spark's streaming sinks written in Python take
   append mode only).
3. A plain Kafka consumer reads the counts back.

Run it against a broker (``wherry server`` in another terminal)::

    pip install -e '.[spark]'   # from a checkout
    PYSPARK_PYTHON=$(which python) python examples/spark_windowed_counts.py

``--master spark://HOST:PORT`` runs the job on a Spark standalone cluster (docs/spark.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ACTIONS = ("click", "view")


def create_topics(bootstrap: str, *names: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for name, fut in futures.items():
        try:
            fut.result(30)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
        print(f"topic {name} ready")


def produce_events(bootstrap: str, topic: str, count: int, start_ms: int) -> dict[Any, int]:
    """``count`` events spread over three minutes; returns the expected counts."""
    expected: dict[tuple[int, str], int] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i in range(count):
        ts = start_ms + (i * 180_000) // count
        action = ACTIONS[i % 3 == 0]
        event = {"user": f"u{i % 7}", "action": action}
        producer.produce(topic, key=event["user"], value=json.dumps(event), timestamp=ts)
        window = ts - ts % 60_000
        expected[(window, action)] = expected.get((window, action), 0) + 1
    producer.flush(30)
    return expected


def run_job(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    """The streaming job: windowed counts from ``source`` into ``sink``."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("wherry")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
    )
    parsed = events.select(
        F.from_json(F.col("value").cast("string"), "user string, action string").alias("e"),
        "timestamp",
    )
    counts = parsed.groupBy(F.window("timestamp", "1 minute"), F.col("e.action").alias("action"))
    counts = counts.count()
    out = counts.select(
        F.concat_ws("|", F.col("window.start").cast("long"), "action").alias("key"),
        F.to_json(
            F.struct(
                (F.col("window.start").cast("long") * 1000).alias("window_start_ms"),
                "action",
                "count",
            )
        ).alias("value"),
    )

    def write_batch(batch: Any, batch_id: int) -> None:
        # Spark 4.3 lets Python streaming sinks run in append mode only; updated window
        # counts go out through the batch sink, once per micro-batch.
        batch.write.format("wherry").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", sink).save()

    query = (
        out.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"streaming job failed: {query.exception()}")


def read_counts(bootstrap: str, topic: str, timeout_s: float = 30.0) -> dict[Any, int]:
    """The latest count per (window, action) in ``topic`` (updates overwrite older ones)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"example-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    latest: dict[tuple[int, str], int] = {}
    eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    partitions: int | None = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if partitions is None:
                md = consumer.list_topics(topic, timeout=10)
                partitions = len(md.topics[topic].partitions)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                if len(eof) >= partitions:
                    break
                continue
            row = json.loads(msg.value())
            latest[(row["window_start_ms"], row["action"])] = row["count"]
    finally:
        consumer.close()
    return latest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument(
        "--master", default="local[2]", help="Spark master, e.g. spark://127.0.0.1:7077"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from wherry.spark import register

    suffix = uuid.uuid4().hex[:6]
    source, sink = f"events-{suffix}", f"event-counts-{suffix}"
    create_topics(args.bootstrap, source, sink)
    start_ms = int(time.time() * 1000) // 60_000 * 60_000 - 600_000
    expected = produce_events(args.bootstrap, source, args.events, start_ms)
    print(f"produced {args.events} events into {source}")

    spark = SparkSession.builder.master(args.master).appName("wherry-example").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    with tempfile.TemporaryDirectory() as checkpoint:
        run_job(spark, args.bootstrap, source, sink, checkpoint)
    spark.stop()

    counts = read_counts(args.bootstrap, sink)
    for (window, action), n in sorted(counts.items()):
        stamp = time.strftime("%H:%M", time.gmtime(window / 1000))
        print(f"{stamp} UTC  {action:5}  {n}")
    print("matches the produced events:", counts == expected)


if __name__ == "__main__":
    main()
