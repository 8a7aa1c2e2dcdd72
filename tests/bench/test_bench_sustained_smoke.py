"""Smoke test of the sustained-latency benchmark: `python bench/sustained.py --quick` with short
rows. Besides the rows, it checks that the background work the bench is for really happened
during each row: segments rolled, some were deleted, the cleaner ran, and the event loop's lag
was read from the broker's /metrics."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peer_tansu import tansu_unavailable_reason
from bench.sustained import stall_lines
from tests.bench.test_bench_smoke import _processes_mentioning

REPO = Path(__file__).resolve().parents[2]
TANSU_MISSING = tansu_unavailable_reason()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sustained_bench_rolls_deletes_cleans_and_reports_both_rows(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/sustained.py", "--quick", "--seconds", "6",
           "--json", str(out), "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    rows = {r["id"]: r["raw"] for r in report["rows"]}
    assert tuple(rows) == ("u1", "u2")
    for rid, raw in rows.items():
        assert rid in proc.stdout
        assert raw["records"] == 6000
        for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
            assert math.isfinite(raw[key]) and raw[key] > 0, (rid, key)
        assert raw["p50_ms"] <= raw["p99_ms"] <= raw["p999_ms"] <= raw["max_ms"]
        files = raw["files"]
        assert files["segments_rolled"]["sustained"] >= 2, (rid, files)
        assert files["segments_deleted"]["sustained"] >= 1, (rid, files)
        assert files["cleaner_passes"] >= 1, (rid, files)
        lag = raw["loop_lag"]
        assert lag["wakeups"] > 0 and 0 <= lag["over_target"] <= lag["wakeups"]
        assert set(lag["stalls"]) == {"ran", "waited", "stopped"}, lag
        assert all(n >= 0 for n in lag["stalls"].values()), lag
        assert all("the event loop woke" in line for line in raw["stall_lines"]), raw
    assert rows["u1"]["acks"] == "1" and rows["u2"]["acks"] == "all"
    assert not _processes_mentioning(str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_set_config_reaches_the_broker(tmp_path: Path) -> None:
    """`--set log.cleaner.enable=false`: segments still roll and go, the cleaner never runs."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/sustained.py", "--quick", "--seconds", "4",
           "--set", "log.cleaner.enable=false", "--json", str(out), "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "set: log.cleaner.enable=false" in proc.stdout
    report = json.loads(out.read_text())
    assert report["set"] == ["log.cleaner.enable=false"]
    for row in report["rows"]:
        files = row["raw"]["files"]
        assert files["segments_rolled"]["sustained"] >= 2 and files["cleaner_passes"] == 0, files
    assert not _processes_mentioning(str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(TANSU_MISSING is not None, reason=TANSU_MISSING or "")
def test_the_peer_rows_run_the_same_load_against_tansu(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/sustained.py", "--quick", "--seconds", "3", "--peer",
           "--json", str(out), "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["id"]: r["raw"] for r in json.loads(out.read_text())["rows"]}
    assert tuple(rows) == ("u1", "u2", "t1", "t2")
    for rid in ("t1", "t2"):
        raw = rows[rid]
        assert rid in proc.stdout and "native peer" in proc.stdout
        assert raw["records"] == 3000
        assert 0 < raw["p50_ms"] <= raw["p99_ms"] <= raw["max_ms"]
        assert raw["broker_cpu_s"] > 0
    assert rows["t1"]["acks"] == "1" and rows["t2"]["acks"] == "all"
    assert not _processes_mentioning(str(tmp_path))


def test_the_bench_picks_the_broker_s_stall_lines_out_of_its_output() -> None:
    line = "[t] WARNING [Broker id=0] the event loop woke 31.0 ms late: its own work held it."
    output = ["[t] INFO segment rolled (wherry.log.log)\n", line + "\n", "[t] ERROR other\n"]
    assert stall_lines(output) == [line]
