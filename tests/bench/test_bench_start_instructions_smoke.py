"""Smoke test of `bench/start_instructions.py`: a start counted under callgrind to the bind and
to the first ApiVersions answer (which comes after it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _count(*args: str) -> float:
    cmd = [sys.executable, "bench/start_instructions.py", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = re.fullmatch(r"exec -> .*: (\d+\.\d) M instructions\n", proc.stdout)
    assert found is not None, proc.stdout
    return float(found.group(1))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_a_start_is_counted_to_the_bind_and_to_the_first_answer() -> None:
    bind, answer = _count("--to", "bind"), _count()
    assert 100 < bind < answer < bind * 1.1  # the answer follows the bind closely
