"""What this suite's Spark conftest does when a Spark test is stuck: the test fails at its
timeout with the JVM's thread dump and the Python worker's stack in its report, and the next
Spark test of the same session still runs (it once waited behind the stuck one's py4j call
and jobs until its own timeout, test after test)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

STUCK = """
import time

import pytest


@pytest.mark.timeout(15)
def test_stuck(spark):
    from pyspark.sql.functions import udf

    @udf("long")
    def sleeps_in_a_worker(x):
        time.sleep(600)
        return x

    spark.range(4).select(sleeps_in_a_worker("id")).collect()


@pytest.mark.timeout(60)
def test_next(spark):
    assert spark.range(10).count() == 10
"""


def test_a_stuck_spark_test_fails_with_stacks_and_the_next_one_runs(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(Path(__file__).with_name("conftest.py"), suite / "conftest.py")
    (suite / "test_stuck.py").write_text(STUCK)
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    env = {**os.environ, "WHERRY_TEST_SPARK_TRACEBACK_S": "5"}  # the workers' stacks sooner
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "--basetemp", str(tmp_path / "tmp")],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
    )
    report = out.stdout + out.stderr
    assert "1 failed, 1 passed" in report, report[-6000:]
    assert "Timeout (>15.0s) from pytest-timeout" in report, report[-6000:]
    # the JVM's thread dump, cut to the threads worth reading
    assert '"Executor task launch worker for task' in report, report[-6000:]
    assert "(other threads left out)" in report, report[-6000:]
    # the Python worker's own stack, from the worker's periodic traceback
    assert "in sleeps_in_a_worker" in report, report[-6000:]
