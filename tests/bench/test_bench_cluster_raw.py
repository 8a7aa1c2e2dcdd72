"""bench/cluster.py's raw byte path worker (rows p1, p3) and the page-cache pre-touch its
workers do right before their clock starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from bench import common
from bench.common import pretouch_page_cache, pretouch_param

REPO = Path(__file__).resolve().parents[2]


def test_pretouch_leaves_nothing_behind(tmp_path: Path) -> None:
    took = pretouch_page_cache(tmp_path, 4)
    assert took >= 0
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    assert pretouch_param({}) is None  # not asked: nothing done
    assert pretouch_param({"pretouch": {"dir": str(tmp_path), "mib": 2}}) is not None
    assert list(tmp_path.iterdir()) == []


def test_pretouch_without_huge_pages_writes_and_deletes_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switch = tmp_path / "enabled"
    switch.write_text("always madvise [never]\n")
    monkeypatch.setattr(common, "_THP_SWITCH", switch)
    assert not common._huge_pages_available()
    data = tmp_path / "data"
    data.mkdir()
    with mock.patch.object(common, "_touch_file", wraps=common._touch_file) as touch_file:
        assert pretouch_page_cache(data, 2) >= 0
    ((path, mib),) = [c.args for c in touch_file.call_args_list]
    assert path.parent == data and mib == 2
    assert list(data.iterdir()) == []  # written and deleted


@pytest.mark.timeout(60)
def test_raw_path_counts_the_receiving_side_apart_from_the_sender(tmp_path: Path) -> None:
    params = {
        "total_mib": 16,
        "followers": 2,
        "dir": str(tmp_path),
        "timeout_s": 30,
        "pretouch": {"dir": str(tmp_path), "mib": 8},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cluster_workers", "raw_path", json.dumps(params)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    threads = r["thread_cpu_s"]
    assert set(threads) == {"sender", "leader", "follower-0", "follower-1"}
    brokers = threads["leader"] + threads["follower-0"] + threads["follower-1"]
    assert r["cpu_ms_per_mib"] == pytest.approx(brokers * 1000 / 16)
    assert r["sender_cpu_ms_per_mib"] == pytest.approx(threads["sender"] * 1000 / 16)
    assert r["mib"] == 16 and r["mib_s"] > 0
    assert "pretouch_s" in r
    assert list(tmp_path.iterdir()) == []  # the worker's files and the pre-touch file are gone
