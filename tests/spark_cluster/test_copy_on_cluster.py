"""A streaming copy of 1,000,000 records on the standalone cluster (two workers), through the
wherry source and sink, while the test kills a worker process (SIGKILL) twice, starting it
again each time, and kills the driver once mid-batch and restarts the query from its
checkpoint. With the exactly-once sink the target, read with read_committed, holds every
source record exactly once and the query has no transaction left open; with the default
sink every record is there, some twice (the test prints how many)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.spark_cluster.conftest import Child
from wherry.spark.exactly_once import transactional_id
from wherry.spark.txn_wire import list_transactions
from wherry.testing.spark_cluster import SparkStandalone

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RECORDS = 1_000_000
PARTITIONS = 4
PER_TRIGGER = 100_000  # ten micro-batches: two worker kills and the driver kill land mid-batch
JOB = Path(__file__).with_name("copy_job.py")
FINISHED_STATES = {"CompleteCommit", "CompleteAbort", "Empty", "Dead"}


def new_topic(bs: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def produce(bs: str, topic: str, n: int) -> None:
    """Values ``b"0"`` .. ``str(n - 1)``, spread over the partitions, as fast as librdkafka
    batches them."""
    p = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(n):
        while True:
            try:
                p.produce(topic, str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def read_committed(bs: str, topic: str) -> list[int]:
    """Every value a read_committed consumer finds in ``topic``, to the end of each
    partition."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[int] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 300
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"read {len(out)} records, ends {at_end}"
            for m in c.consume(10_000, 1.0):
                err = m.error()
                if err is None:
                    out.append(int(m.value()))  # type: ignore[arg-type]
                    at_end.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())  # type: ignore[arg-type]
    finally:
        c.close()
    return out


def batches(checkpoint: Path, kind: str) -> set[int]:
    """The micro-batches the checkpoint has planned (``offsets``) or committed (``commits``)."""
    d = checkpoint / kind
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def wait_for(what: str, check: Callable[[], bool], driver: Child, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if driver.proc.poll() is not None:
            pytest.fail(
                f"the driver exited ({driver.proc.returncode}) waiting for {what}:\n"
                f"{driver.output()}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout_s} s:\n{driver.output()}")
        time.sleep(0.2)


def mid_batch(checkpoint: Path, after: int) -> Callable[[], bool]:
    """True once a micro-batch later than ``after`` is planned and not committed yet."""

    def check() -> bool:
        planned = batches(checkpoint, "offsets")
        open_ = planned - batches(checkpoint, "commits")
        return any(b > after for b in open_)

    return check


def committed_after(checkpoint: Path, after: int) -> Callable[[], bool]:
    return lambda: max(batches(checkpoint, "commits")) > after


@pytest.mark.timeout(1500)
# The default (at-least-once) sink's run of the same scenario loses nothing either and shows
# duplicates; it is left out here for the suite's time (about 2-4 minutes on 2 cores): run it
# with WHERRY_SPARK_CLUSTER_BOTH_SINKS=1.
@pytest.mark.parametrize(
    "sink",
    ["exactly-once", "default"] if os.environ.get("WHERRY_SPARK_CLUSTER_BOTH_SINKS") else
    ["exactly-once"],
)
def test_a_copy_survives_killed_workers_and_a_restarted_query(
    standalone: SparkStandalone,
    broker_bootstrap: str,
    tmp_path: Path,
    children: list[Child],
    sink: str,
) -> None:
    bs = broker_bootstrap
    src, dst = new_topic(bs, "copy-in"), new_topic(bs, "copy-out")
    t0 = time.monotonic()
    produce(bs, src, RECORDS)
    produced_s = time.monotonic() - t0
    ck = tmp_path / "ck"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cluster = standalone.for_tests().to_env()

    def driver(trigger: str, n: int) -> Child:
        cmd = [sys.executable, str(JOB), cluster, bs, src, dst, str(ck), sink, trigger]
        child = Child([*cmd, str(PER_TRIGGER)], tmp_path / f"driver-{n}.log", env)
        children.append(child)
        return child

    first = driver("run", 1)
    wait_for("first committed batch", lambda: bool(batches(ck, "commits")), first)
    kills: list[str] = []
    for worker in (0, 1):
        done = max(batches(ck, "commits"))
        wait_for("a batch in flight", mid_batch(ck, done), first)
        time.sleep(1)  # into the batch's tasks
        pid = standalone.kill_worker(worker)
        kills.append(f"worker {worker} (pid {pid}) in batch {max(batches(ck, 'offsets'))}")
        standalone.start_worker(worker)
        wait_for("a batch committed after the kill", committed_after(ck, done), first, 600)
    done = max(batches(ck, "commits"))
    wait_for("a batch in flight", mid_batch(ck, done), first)
    time.sleep(1)
    first.kill()  # the driver and its JVM: the query stops mid-batch
    kills.append(f"driver in batch {max(batches(ck, 'offsets'))}")
    first_run_s = time.monotonic() - t0

    second = driver("available-now", 2)
    assert second.wait(900) == 0, second.output()
    copied_s = time.monotonic() - t0

    values = read_committed(bs, dst)
    counts = Counter(values)
    duplicates = len(values) - len(counts)
    print(
        f"{sink}: {len(values)} records read back, {duplicates} duplicate(s); killed "
        f"{', '.join(kills)}; produced in {produced_s:.0f} s, copy done at {copied_s:.0f} s "
        f"(first driver killed at {first_run_s:.0f} s)"
    )
    assert set(counts) == set(range(RECORDS)), f"{RECORDS - len(counts)} record(s) missing"
    if sink == "exactly-once":
        assert duplicates == 0, f"{duplicates} duplicate(s): {counts.most_common(3)}"
        query_id = json.loads((ck / "metadata").read_text())["id"]
        prefix = transactional_id(query_id, 0)[:-1]
        ours = [
            t for t in list_transactions(bs.split(",")) if t.transactional_id.startswith(prefix)
        ]
        assert ours, "the query's transactions are listed"
        assert all(t.state in FINISHED_STATES for t in ours), ours
