"""`python bench/cluster.py --rows rf3`: r2 and p3 alone, alternating, and e3 (r2's brokers'
CPU per MB over p3's), with each r2 run's page faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wherry.testing.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_rf3_rows_alone(tmp_path: Path) -> None:
    reason = ZooKeeperServer.unavailable_reason()
    if reason is not None:
        pytest.skip(f"ZooKeeper is not available: {reason}")
    out = tmp_path / "rf3.json"
    proc = subprocess.run(
        [sys.executable, "bench/cluster.py", "--rows", "rf3", "--quick", "--repeats", "2",
         "--large-records", "20000", "--json", str(out), "--tmp-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=220,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
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
