"""The Spark tests of tests/spark (the source, the sink, the exactly-once sink, the example
pipeline, the state-change merge) run again with their session's executors on the standalone
cluster's two workers: a pytest run of its own, in a child process, with the cluster's settings
in ``WHERRY_SPARK_CLUSTER``. Its Spark fixture checks that tasks ran in executor JVMs other
than the driver's; here the master's and workers' own status shows that the run's application
had an executor on each worker."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.spark_cluster.conftest import Child
from wherry.testing.spark_cluster import CLUSTER_ENV, SparkStandalone

pytestmark = [pytest.mark.slow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
SPARK_TESTS = (
    "tests/spark/test_spark_connector.py",
    "tests/spark/test_exactly_once_sink.py",
    "tests/spark/test_example_pipeline.py",
    "tests/spark/test_state_change_merge.py::test_spark_merge_equals_pure_merge_after_failover",
)
APP_NAME = "wherry-tests"  # tests/spark/conftest.py's session


@pytest.mark.timeout(1500)
def test_the_spark_tests_pass_on_the_standalone_cluster(
    standalone: SparkStandalone, tmp_path: Path, children: list[Child]
) -> None:
    env = {**os.environ, CLUSTER_ENV: standalone.for_tests().to_env()}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider"]
    cmd += ["--basetemp", str(tmp_path / "inner"), *SPARK_TESTS]
    run = Child(cmd, tmp_path / "pytest.log", env, cwd=REPO)
    children.append(run)
    rc = run.wait(1400)
    out = run.output()
    print(out[-3000:])
    assert rc == 0, out
    passed = re.search(r"(\d+) passed", out)
    # (the kcat test is skipped where kcat is not installed)
    assert passed is not None and int(passed.group(1)) >= 9, out[-3000:]

    apps = [a for a in standalone.master_state()["completedapps"] if a["name"] == APP_NAME]
    assert apps, "the master ran the run's application"
    app = apps[-1]["id"]
    for worker in sorted(standalone.running):
        state = standalone.worker_state(worker)
        executors = state["executors"] + state["finishedexecutors"]
        assert any(e["appid"] == app for e in executors), (worker, executors)
