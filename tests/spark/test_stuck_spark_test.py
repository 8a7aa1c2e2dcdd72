"""What this suite's Spark conftest does when a Spark test is stuck: the test fails at its
timeout with the JVM's thread dump and the Python worker's stack in its report, and the next
Spark test of the same session still runs (it once waited behind the stuck one's py4j call
and jobs until its own timeout, test after test).

pytest-timeout's clock for a test includes the set-up of its fixtures, and the session's Spark
(a JVM and its first Python worker) can take more than the stuck test's whole timeout to start
on a busy machine: the stuck test then failed before its worker ever ran, with no worker stack
to report. A first test starts the session and a Python worker, under its own timeout."""

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


@pytest.mark.timeout(200)
def test_session_starts(spark):
    from pyspark.sql.functions import udf

    @udf("long")
    def plus_one(x):
        return x + 1

    assert spark.range(4).select(plus_one("id")).count() == 4


@pytest.mark.timeout(20)
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


@pytest.mark.timeout(450)
def test_a_stuck_spark_test_fails_with_stacks_and_the_next_one_runs(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(Path(__file__).with_name("conftest.py"), suite / "conftest.py")
    (suite / "tests").mkdir()  # the conftest's own import
    (suite / "tests" / "__init__.py").write_text("")
    shutil.copy(Path(__file__).parents[1] / "spark_jvm.py", suite / "tests" / "spark_jvm.py")
    (suite / "test_stuck.py").write_text(STUCK)
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    env = {**os.environ, "WHERRY_TEST_SPARK_TRACEBACK_S": "2"}  # the workers' stacks sooner
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "--basetemp", str(tmp_path / "tmp")],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    report = out.stdout + out.stderr
    assert "1 failed, 2 passed" in report, report[-6000:]
    assert "Timeout (>20.0s) from pytest-timeout" in report, report[-6000:]
    # the JVM's thread dump, cut to the threads worth reading
    assert '"Executor task launch worker for task' in report, report[-6000:]
    assert "(other threads left out)" in report, report[-6000:]
    # the Python worker's own stack, from the worker's periodic traceback
    assert "in sleeps_in_a_worker" in report, report[-6000:]
