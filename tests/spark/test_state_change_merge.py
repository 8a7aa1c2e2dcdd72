"""T5: the Spark merge of the state-change logs (`wherry.spark.state_change`, `wherry
state-change-log merge`) gives the pure merge's answer on a real cluster's logs after a failover,
with the time, topic and partition filters; its Parquet output reads back."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.runtime.state_change_log import STATE_CHANGE_LOG_FILE, merge_state_change_logs
from wherry.spark.state_change import lines, merged
from wherry.testing.cluster import DevCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _failover_logs(c: DevCluster) -> tuple[list[Path], str]:
    controller = c.wait_for_controller()
    t = f"scm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(t, 3, 3)])[t].result(20)
    c.wait_for_topic(t, 3)
    files = [c.broker(b).config.data_dir / STATE_CHANGE_LOG_FILE for b in c.broker_ids]
    victim = next(b for b in c.running if b != controller)
    c.stop_broker(victim, controlled=False)

    def moved() -> bool:
        recs = merge_state_change_logs(files, topic=t)
        return {r.node_kind for r in recs if r.leader_epoch == 1} == {"Controller", "Broker"}

    assert wait_until(moved, 10)
    return files, t


def _pure(files: list[Path], **kw: Any) -> list[str]:
    return [r.line for r in merge_state_change_logs(files, **kw)]


def test_spark_merge_equals_pure_merge_after_failover(
    wherry_cluster: DevCluster, spark: Any, tmp_path: Path
) -> None:
    files, t = _failover_logs(wherry_cluster)
    everything = _pure(files)
    assert len(everything) > 10
    assert lines(merged(spark, files)) == everything
    # Time range: the middle of the run.
    stamps = sorted({r.timestamp_ms for r in merge_state_change_logs(files)})
    lo, hi = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    window = _pure(files, start_ms=lo, end_ms=hi)
    assert 0 < len(window) < len(everything)
    assert lines(merged(spark, files, start_ms=lo, end_ms=hi)) == window
    # Topic (a regex in Spark, the exact name in the pure merge) and partitions.
    by_topic = _pure(files, topic=t)
    assert by_topic and lines(merged(spark, files, topic=t[:6] + ".*")) == by_topic
    p1 = _pure(files, topic=t, partitions=[1])
    assert p1 and all(f"{t}-1 " in line for line in p1)
    assert lines(merged(spark, files, topic=t, partitions=[1])) == p1
    assert lines(merged(spark, files, topic="nomatch-.*")) == []
    # Parquet written and read back: the same rows, the parsed fields included.
    out = tmp_path / "merged.parquet"
    merged(spark, files, topic=t).write.parquet(str(out))
    back = spark.read.parquet(str(out)).orderBy("timestamp_ms", "source").collect()
    assert sorted(r.line for r in back) == sorted(by_topic)
    pure = {r.line: r for r in merge_state_change_logs(files, topic=t)}
    for row in back:
        rec = pure[row.line]
        assert (row.node_id, row.partition, row.leader, row.leader_epoch, row.new_state) == (
            rec.node_id,
            rec.partition,
            rec.leader,
            rec.leader_epoch,
            rec.new_state,
        )
        assert (tuple(row.isr) if row.isr is not None else None) == rec.isr
        assert row.timestamp_ms == rec.timestamp_ms


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.run(
        [sys.executable, "-m", "wherry", "state-change-log", "merge", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_cli_prints_the_pure_merge_and_writes_json(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b"
    b.mkdir()
    a.write_text(
        "2025-11-22T00:14:03.123Z INFO [Controller id=1 epoch=3] Partition orders-0 "
        "OfflinePartition -> OnlinePartition leader=2 leader_epoch=5 isr=[2,3] controller_epoch=3\n"
        "not a state-change line\n"
        "2025-11-22T00:14:05.000Z INFO [Controller id=1 epoch=3] Sent LeaderAndIsr to 2\n"
    )
    (b / STATE_CHANGE_LOG_FILE).write_text(
        "2025-11-22T00:14:03.123Z INFO [Broker id=2] Partition orders-0 Follower -> Leader "
        "leader=2 leader_epoch=5 isr=[2,3]\n"
        "2025-11-22T00:14:04.000Z INFO [Broker id=2] Partition pay-1 Follower -> Leader "
        "leader=2 leader_epoch=1 isr=[2]\n"
    )
    files = [a, b / STATE_CHANGE_LOG_FILE]
    r = _cli("--logs", str(a), "--logs", str(b), "--master", "local[1]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == _pure(files)
    r = _cli(
        "--logs",
        str(a),
        "--logs",
        str(b),
        "--start",
        "2025-11-22T00:14:03.5Z",
        "--partitions",
        "1",
        "--master",
        "local[1]",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [_pure(files)[2]]
    out = tmp_path / "json"
    r = _cli(
        "--logs",
        str(a),
        "--logs",
        str(b),
        "--topic",
        "ord.*",
        "--output",
        str(out),
        "--format",
        "json",
        "--master",
        "local[1]",
    )
    assert r.returncode == 0, r.stderr
    assert "Wrote 2 rows" in r.stdout
    assert len([p for p in out.iterdir() if p.suffix == ".json"]) >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--logs", "/nonexistent/x.log"], "Error: No state-change log at /nonexistent/x.log"),
        ([], "Error: Missing required option(s): logs"),
        (["--start", "yesterday"], "Error: Invalid start time 'yesterday'"),
        (["--topic", "(["], "Error: Invalid topic regex '(['"),
        (["--partitions", "0,x"], "Error: Invalid partitions '0,x'"),
        (["--start", "2000", "--end", "1000"], "Error: --end is before --start"),
    ],
)
def test_cli_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    log = tmp_path / STATE_CHANGE_LOG_FILE
    log.write_text("")
    base = [] if args[:1] == ["--logs"] or not args else ["--logs", str(log)]
    r = _cli(*base, *args)
    assert r.returncode == 1
    assert message in r.stderr
