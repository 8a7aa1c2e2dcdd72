"""Smoke test of the security benchmark: `python bench/security.py --quick` with small counts,
SASL_SSL (SCRAM-SHA-512, the credential created through the PLAINTEXT listener) vs PLAINTEXT."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import _processes_mentioning

REPO = Path(__file__).resolve().parents[2]
ROWS = ("p1", "t1", "x1", "p2", "t2", "x2", "p3", "t3", "x3", "p4", "t4", "x4")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_security_bench_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        "bench/security.py",
        "--quick",
        "--small-records",
        "5000",
        "--large-records",
        "2000",
        "--mechanism",
        "SCRAM-SHA-512",
        "--json",
        str(out),
        "--tmp-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "env:" in proc.stdout
    report = json.loads(out.read_text())
    assert report["quick"] is True and report["mechanism"] == "SCRAM-SHA-512"
    rows = {r["id"]: r for r in report["rows"]}
    assert tuple(rows) == ROWS
    for rid, row in rows.items():
        assert row["metrics"], rid
        for name, value in row["metrics"].items():
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (rid, name)
        assert rid in proc.stdout
    for i in range(1, 5):
        p, t, x = rows[f"p{i}"], rows[f"t{i}"], rows[f"x{i}"]
        assert p["raw"]["records"] == t["raw"]["records"]
        assert x["metrics"]["ratio"] == pytest.approx(t["metrics"]["rec_s"] / p["metrics"]["rec_s"])
    assert "SASL_SSL (SCRAM-SHA-512)" in rows["t1"]["name"]
    # the broker and the workers are stopped, the temporary directory removed
    assert list(tmp_path.iterdir()) == [out]
    assert not _processes_mentioning(str(tmp_path))
