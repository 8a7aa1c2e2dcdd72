"""Smoke test of the purgatory micro-benchmark: `python bench/purgatory.py --ops N --json PATH`
(the timing wheel and both naive timers park, complete and expire the same operations)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_purgatory_bench_runs_every_design(tmp_path: Path) -> None:
    out = tmp_path / "purgatory.json"
    proc = subprocess.run(
        [sys.executable, "bench/purgatory.py", "--ops", "5000", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == {"wheel", "heap", "sorted"}
    first = results["wheel"]
    assert first["completed"] > 0 and first["expired"] > 0
    assert first["completed"] + first["expired"] == 5000
    for name, r in results.items():
        # the same seeded workload: the same operations complete and expire in every design
        assert (r["completed"], r["expired"], r["end_ms"]) == (
            first["completed"],
            first["expired"],
            first["end_ms"],
        ), name
        assert r["total_s"] > 0 and r["ratio_to_wheel"] > 0
        assert name in proc.stdout
    # the heap keeps cancelled entries until their deadline; the wheel drops them at once
    assert results["heap"]["held_after_completions"] > results["wheel"]["held_after_completions"]
