"""A real local Spark (``local[2]``) for the connector tests, with the ``wherry`` source
registered. The JVM's stderr (and so the Python workers' logs) goes to a file the tests can
read. Without PySpark the tests are skipped, except in CI, where a missing PySpark fails."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark") / "spark-stderr.log"


@pytest.fixture(scope="session")
def spark(spark_log: Path) -> Iterator[Any]:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pyspark is not installed (pip install -e '.[spark]')")
        pytest.skip("pyspark is not installed (pip install -e '.[spark]')")
    from wherry.spark import register

    # Workers must run this interpreter (which has wherry installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    saved = os.dup(2)
    with open(spark_log, "ab") as f:
        os.dup2(f.fileno(), 2)  # the JVM inherits this stderr
        try:
            session = (
                SparkSession.builder.master("local[2]")
                .appName("wherry-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.sql.streaming.pollingDelay", "10ms")
                .getOrCreate()
            )
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    session.sparkContext.setLogLevel("WARN")
    register(session)
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    jvm = getattr(gateway, "proc", None)
    try:
        yield session
    finally:
        session.stop()
        if gateway is not None:
            gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
        if jvm is not None:  # the JVM PySpark started, stopped by its own PID
            jvm.terminate()
            try:
                jvm.wait(timeout=20)
            except Exception:
                jvm.kill()
                jvm.wait(timeout=10)
