"""Smoke test of the benchmark command: `python bench/run.py --quick --json PATH`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = ("a", "b", "b2", "c1", "c2", "d0", "d3", "d1", "d2", "e", "f1", "f2", "f3")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_quick_bench_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--quick", "--json", str(out), "--tmp-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=115,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "env:" in proc.stdout and "uvloop" in proc.stdout
    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["env"]["cpus"] >= 1
    rows = {r["id"]: r for r in report["rows"]}
    assert tuple(rows) == ROWS
    for rid, row in rows.items():
        assert row["name"], rid
        assert row["metrics"], rid
        for name, value in row["metrics"].items():
            assert isinstance(value, int | float), (rid, name, value)
            assert math.isfinite(value) and value > 0, (rid, name, value)
        assert rid in proc.stdout  # the printed table has the row too
    assert rows["b"]["metrics"]["ratio"] == pytest.approx(
        rows["b"]["metrics"]["mb_s"] / rows["a"]["metrics"]["mb_s"]
    )
    assert rows["e"]["metrics"]["p99_ms"] >= rows["e"]["metrics"]["p50_ms"]
    # every broker and worker process is stopped, every temporary directory removed
    assert list(tmp_path.iterdir()) == [out]
    assert not _processes_mentioning(str(tmp_path))


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids
