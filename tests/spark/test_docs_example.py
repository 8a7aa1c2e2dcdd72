"""docs/spark.md's runnable batch read and write example, taken from the page and run as a
user would (its own Python process and SparkSession) against a broker this test starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wherry.testing.cluster import DevCluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
HEADING = "## Batch read and write: a runnable example"


def example_block() -> str:
    text = DOC.read_text("utf-8")
    section = text[text.index(HEADING) :]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m is not None, "no python block under the heading"
    return m.group(1)


def test_the_batch_read_and_write_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    script = tmp_path / "example.py"
    script.write_text(example_block())
    repo = str(DOC.parents[1])
    with DevCluster(tmp_path / "cluster", brokers=1) as c:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": c.bootstrap,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        out = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [ln.split("\t") for ln in out.stdout.splitlines() if ln.count("\t") == 3]
    assert sorted((k, v) for k, v, _, _ in lines) == sorted(
        (f"k{i}", f"word {i}") for i in range(10)
    ), out.stdout[-2000:]
    assert len({(p, o) for _, _, p, o in lines}) == 10
