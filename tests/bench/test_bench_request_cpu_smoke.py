"""Smoke test of the per-request CPU benchmark: `python bench/request_cpu.py` with small
counts and the call counting on, against one broker."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import _processes_mentioning

REPO = Path(__file__).resolve().parents[2]
KINDS = ("apiversions", "metadata", "produce1", "produceall", "heartbeat", "txn")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_request_cpu_bench_reports_every_kind_with_calls(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/request_cpu.py", "--requests", "60", "--warmup", "6",
           "--calls", "--top", "3", "--json", str(out), "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["kind"]: r for r in json.loads(out.read_text())["rows"]}
    assert tuple(rows) == KINDS
    for kind, row in rows.items():
        assert row["requests"] == 60, kind
        for name in ("broker_cpu_us", "rtt_p50_us", "calls"):
            assert math.isfinite(row[name]) and row[name] >= 0, (kind, name)
        assert row["rtt_p50_us"] > 0 and row["calls"] > 10, kind  # every request was profiled
        assert len(row["top"]) == 3, kind
        assert kind in proc.stdout
    # the broker is stopped, the temporary directory removed
    assert list(tmp_path.iterdir()) == [out]
    assert not _processes_mentioning(str(tmp_path))
