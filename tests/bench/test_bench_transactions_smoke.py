"""Smoke test of the transactions benchmark: `python bench/transactions.py --quick` with small
counts, transactional vs idempotent produce against one broker."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import _processes_mentioning

REPO = Path(__file__).resolve().parents[2]
ROWS = ("i1", "t1", "x1", "t2", "x2")
BOTH = ROWS + tuple("a" + r for r in ROWS)  # confluent-kafka's, then aiokafka's


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_transactions_bench_reports_every_row_of_both_clients(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/transactions.py", "--quick", "--records", "5000",
           "--json", str(out), "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "env:" in proc.stdout
    report = json.loads(out.read_text())
    assert report["quick"] is True and report["plan"]["per_txn"] == 1000
    assert report["clients"] == ["confluent-kafka", "aiokafka"]
    rows = {r["id"]: r for r in report["rows"]}
    assert tuple(rows) == BOTH
    for rid, row in rows.items():
        assert row["metrics"], rid
        for name, value in row["metrics"].items():
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (rid, name)
        assert rid in proc.stdout
    for c in ("", "a"):
        assert rows[c + "i1"]["raw"]["transactions"] == 0
        assert rows[c + "t1"]["raw"]["transactions"] == 5
        assert rows[c + "t2"]["raw"]["transactions"] == 50
        for t, x in ((c + "t1", c + "x1"), (c + "t2", c + "x2")):
            assert rows[t]["raw"]["records"] == rows[c + "i1"]["raw"]["records"] == 5000
            assert rows[x]["metrics"]["ratio"] == pytest.approx(
                rows[t]["metrics"]["rec_s"] / rows[c + "i1"]["metrics"]["rec_s"])
            assert "ms broker CPU each" in rows[t]["raw"].get("detail", _detail_of(proc, t))
    assert rows["ai1"]["name"].startswith("aiokafka: ")
    # the broker and the workers are stopped, the temporary directory removed
    assert list(tmp_path.iterdir()) == [out]
    assert not _processes_mentioning(str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_peer_rows_run_against_tansu_or_say_why_not(tmp_path: Path) -> None:
    from bench.peer_tansu import tansu_unavailable_reason

    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/transactions.py", "--quick", "--records", "2000", "--peer",
           "--client", "confluent-kafka", "--json", str(out), "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["id"]: r for r in json.loads(out.read_text())["rows"]}
    why = tansu_unavailable_reason()
    if why is not None:
        assert tuple(rows) == ROWS
        assert f"peer rows skipped: {why}" in proc.stderr
        return
    assert tuple(rows) == ROWS + tuple("p" + r for r in ROWS)
    assert rows["pt2"]["raw"]["transactions"] == 20
    assert rows["px1"]["metrics"]["ratio"] == pytest.approx(
        rows["pt1"]["metrics"]["rec_s"] / rows["pi1"]["metrics"]["rec_s"])
    assert "(peer)" in rows["pi1"]["name"]
    assert not _processes_mentioning(str(tmp_path))


def _detail_of(proc: subprocess.CompletedProcess[str], rid: str) -> str:
    """Row `rid`'s line of the printed table."""
    return next(line for line in proc.stdout.splitlines() if line.startswith(f"{rid} "))
