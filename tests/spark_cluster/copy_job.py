"""The streaming copy of `test_copy_on_cluster.py`, a Spark driver of its own:

    python copy_job.py CLUSTER_JSON BOOTSTRAP SOURCE TARGET CHECKPOINT SINK TRIGGER PER_TRIGGER

Reads SOURCE with the wherry source (from the earliest offsets, at most PER_TRIGGER offsets per
micro-batch) and writes key and value to TARGET with the wherry sink, SINK being
``exactly-once`` (``exactlyOnce=true``) or ``default``, on the cluster whose settings
CLUSTER_JSON holds (`ClusterForTests.to_env`). TRIGGER ``run`` runs micro-batches until the
process is killed (or 900 s pass); ``available-now`` copies what is there and exits, 0 when
the query ended without an error. Prints ``started <query id>`` once the query runs.
"""

from __future__ import annotations

import sys

from wherry.spark import register
from wherry.testing.spark_cluster import ClusterForTests


def main(argv: list[str]) -> int:
    cluster_json, bootstrap, source, target, checkpoint, sink, trigger, per_trigger = argv
    cluster = ClusterForTests.from_json(cluster_json)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.config(map=dict(cluster.conf))
        .appName(f"copy-{sink}-{trigger}")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    w = (
        spark.readStream.format("wherry")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .select("key", "value")
        .writeStream.format("wherry")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
    )
    if sink == "exactly-once":
        w = w.option("exactlyOnce", "true")
    if trigger == "available-now":
        q = w.trigger(availableNow=True).start()
    else:
        q = w.trigger(processingTime="0 seconds").start()
    print(f"started {q.id}", flush=True)
    try:
        q.awaitTermination(900)
    except Exception as e:
        print(f"query failed: {e}", flush=True)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
