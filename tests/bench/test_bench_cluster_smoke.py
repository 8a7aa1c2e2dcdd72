"""Smoke test of the replication benchmark: `python bench/cluster.py --quick` with a small
idle cluster (`--idle-partitions 300`), every row reported with sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wherry.testing.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]
ROWS = ("s1", "s2", "r1", "r2", "x1", "x2", "p1", "p3", "px", "sl1", "rl1", "sl2", "rl2",
        "sl3", "rl3", "i1", "i2", "f1")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_cluster_bench_reports_every_row(tmp_path: Path) -> None:
    reason = ZooKeeperServer.unavailable_reason()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available: {reason}")
    out = tmp_path / "cluster.json"
    proc = subprocess.run(
        [sys.executable, "bench/cluster.py", "--quick", "--idle-partitions", "300",
         "--idle-seconds", "2", "--json", str(out), "--tmp-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
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
    f1 = rows["f1"]
    assert 0 < f1["seconds"] <= f1["since_kill_s"] and f1["partitions"] > 0
    # every broker, ZooKeeper and worker process is gone, every data dir removed
    assert list(tmp_path.iterdir()) == [out]
