"""Smoke test of the per-request CPU benchmark: `python bench/request_cpu.py` with small
counts and the call counting on, against one broker; and with `--peer`, each kind against the
native peer too (when the optional wheel that holds it is installed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peer_tansu import tansu_unavailable_reason
from tests.bench.test_bench_smoke import _processes_mentioning

REPO = Path(__file__).resolve().parents[2]
TANSU_MISSING = tansu_unavailable_reason()
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


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.skipif(TANSU_MISSING is not None, reason=TANSU_MISSING or "")
def test_peer_runs_each_kind_against_tansu_after_wherry(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench/request_cpu.py", "--requests", "200", "--warmup", "20",
           "--kinds", "metadata,produce1,produceall", "--peer", "--json", str(out),
           "--tmp-dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["kind"]: r for r in json.loads(out.read_text())["rows"]}
    assert tuple(rows) == ("metadata", "produce1", "produceall")
    for kind, row in rows.items():
        peer = row["peer"]
        assert "error" not in peer, (kind, peer)
        assert peer["requests"] == 200 and peer["rtt_p50_us"] > 0, kind
        assert math.isclose(peer["rtt_ratio"], row["rtt_p50_us"] / peer["rtt_p50_us"]), kind
    assert proc.stdout.count("wherry / tansu:") == 3
    # both brokers are stopped, the temporary directory removed
    assert list(tmp_path.iterdir()) == [out]
    assert not _processes_mentioning(str(tmp_path))


def test_peer_is_refused_with_calls() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/request_cpu.py", "--peer", "--calls"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "not with --calls" in proc.stderr
