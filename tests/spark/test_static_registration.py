"""`format("wherry")` in a fresh SparkSession with no `register()` call: PySpark registers the
data source of the top-level `pyspark_wherry` module by itself (issue 12, item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.helpers import create_topic
from wherry.testing.cluster import DevCluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    rows = (
        spark.read.format("wherry")
        .option("kafka.bootstrap.servers", sys.argv[1])
        .option("subscribe", sys.argv[2])
        .load()
        .selectExpr("CAST(value AS STRING) AS v")
        .collect()
    )
    print("VALUES", ",".join(sorted(r.v for r in rows)))
    spark.stop()
    """
)


def test_a_fresh_session_reads_format_wherry_without_register(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from confluent_kafka import Producer

    with DevCluster(tmp_path / "cluster", brokers=1) as c:
        topic = f"static-{uuid.uuid4().hex[:8]}"
        create_topic(c.bootstrap, topic)
        p = Producer({"bootstrap.servers": c.bootstrap, "log_level": 0})
        for i in range(5):
            p.produce(topic, f"v{i}".encode())
        assert p.flush(20) == 0
        script = tmp_path / "read.py"
        script.write_text(SCRIPT)
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # the checkout first, as an installed wherry would be
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        out = subprocess.run(
            [sys.executable, str(script), c.bootstrap, topic],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "VALUES v0,v1,v2,v3,v4" in out.stdout, out.stdout[-2000:]
