"""Smoke test of the replication benchmark: `python bench/cluster.py --quick` with a small
idle cluster (`--idle-partitions 300`), every row reported with sane figures; and `--rows rf3`:
r2 and p3 alone, alternating, and e3 (r2's brokers' CPU per MB over p3's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wherry.testing.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]
ROWS = ("s1", "s2", "r1", "r2", "x1", "x2", "p1", "p3", "px", "sl1", "rl1", "sl2", "rl2",
        "sl3", "rl3", "i1", "i2", "i3", "f1")


def _run_bench(
    tmp_path: Path, out: Path, args: list[str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`bench/cluster.py ARGS --json OUT` with its data dirs in tmp_path; skips without
    ZooKeeper; the run must succeed."""
    reason = ZooKeeperServer.unavailable_reason()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available: {reason}")
    proc = subprocess.run(
        [sys.executable, "bench/cluster.py", *args, "--json", str(out), "--tmp-dir",
         str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_cluster_bench_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    proc = _run_bench(
        tmp_path, out, ["--quick", "--idle-partitions", "300", "--idle-seconds", "2"], 280
    )
    report = json.loads(out.read_text())
    rows = {r["id"]: r["raw"] for r in report["rows"]}
    assert tuple(rows) == ROWS
    for rid in ROWS:
        assert rid in proc.stdout  # the printed table has the row
    for rid in ("sl1", "rl1", "sl2", "rl2", "sl3", "rl3"):
        assert 0 < rows[rid]["p50_ms"] <= rows[rid]["p99_ms"], rid
        assert rows[rid]["records"] > 0
    assert rows["x1"]["ratio"] > 0 and rows["x2"]["ratio"] > 0
    for rid in ("p1", "p3"):  # the raw byte paths moved their bytes, at some CPU cost
        assert rows[rid]["best"]["mib_s"] > 0 and rows[rid]["cpu_ms_per_mib"] > 0, rid
    assert rows["px"]["ratio"] > 0 and rows["px"]["x2_bound"] > 0
    assert rows["i1"]["partitions"] == 300 and rows["i1"]["seconds"] >= 0
    idle = rows["i2"]
    assert len(idle["cpu_pct"]) == 3 and all(v >= 0 for v in idle["cpu_pct"].values())
    assert all(v > 10 for v in idle["rss_mb"].values())  # three live broker processes
    i3 = rows["i3"]  # the Metadata answer held every partition (the bench checks it)
    assert i3["p50_ms"] > 0 and i3["broker_cpu_ms"] >= 0 and i3["bytes"] > 300 * 20
    f1 = rows["f1"]
    assert 0 < f1["seconds"] <= f1["since_kill_s"] and f1["partitions"] > 0
    # every broker, ZooKeeper and worker process is gone, every data dir removed
    assert list(tmp_path.iterdir()) == [out]


@pytest.mark.timeout(240)
def test_rf3_rows_alone(tmp_path: Path) -> None:
    out = tmp_path / "rf3.json"
    args = ["--rows", "rf3", "--quick", "--repeats", "2", "--large-records", "20000"]
    proc = _run_bench(tmp_path, out, args, 220)
    rows = {r["id"]: r["raw"] for r in json.loads(out.read_text())["rows"]}
    assert tuple(rows) == ("r2", "p3", "e3")
    r2, p3, e3 = rows["r2"], rows["p3"], rows["e3"]
    assert len(r2["runs"]) == 2 and len(p3["runs"]) == 2
    assert all(r["bytes"] >= 20000 * 1024 for r in r2["runs"])
    assert all(r["broker_minor_faults"] >= 0 and r["broker_cpu_s"] > 0 for r in r2["runs"])
    brokers = min(r["broker_cpu_s"] * 1000 / (r["bytes"] / 2**20) for r in r2["runs"])
    assert e3["r2_brokers_ms_per_mb"] == pytest.approx(brokers)
    assert e3["p3_ms_per_mb"] == p3["cpu_ms_per_mib"] > 0
    assert e3["ratio"] == pytest.approx(brokers / p3["cpu_ms_per_mib"])
    assert "broker PIDs" in proc.stderr + proc.stdout
    assert list(tmp_path.iterdir()) == [out]  # every process stopped, every data dir gone
