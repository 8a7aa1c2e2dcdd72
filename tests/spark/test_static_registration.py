"""`format("wherry")` in a fresh SparkSession with no `register()` call: PySpark registers the
data source of the top-level `pyspark_wherry` module by itself, found on sys.path -- with the
checkout on PYTHONPATH, and with README's editable install into a fresh virtualenv, run from a
directory outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
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
    assert out.returncode == 0, _why(out.stderr)
    assert "VALUES v0,v1,v2,v3,v4" in out.stdout, out.stdout[-2000:]


def _produce_five(bootstrap: str) -> str:
    from confluent_kafka import Producer

    topic = f"static-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(5):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(20) == 0
    return topic


def test_an_editable_install_in_a_fresh_venv_reads_format_wherry(tmp_path: Path) -> None:
    """README's install (`pip install -e '.[spark]'`) into a new virtualenv, then a script run
    from a directory outside the checkout, with no PYTHONPATH: `format("wherry")` is known.

    The heavy dependencies (PySpark, pyarrow, confluent-kafka, ...) come from this test's own
    environment through a path line in the new venv (a path line only: that environment's .pth
    files, and so its own editable wherry, are not loaded); pip installs wherry itself, and
    its build isolation fetches setuptools from the package index."""
    pytest.importorskip("pyspark")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()
    here = sysconfig.get_path("purelib")
    Path(site, "zz_parent_env.pth").write_text(here + "\n")
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean_env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-input", "-q", "-e", f"{REPO}[spark]"],
        capture_output=True, text=True, timeout=400, env=clean_env, cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # the install is the new venv's own: wherry and pyspark_wherry resolve to the checkout
    where = subprocess.run(
        [str(python), "-c", "import wherry, pyspark_wherry, pyspark; print(wherry.__file__); "
         "print(pyspark_wherry.__file__)"],
        capture_output=True, text=True, timeout=60, env=clean_env, cwd=outside,
    )
    assert where.returncode == 0, where.stderr[-3000:]
    assert where.stdout.split() == [
        str(REPO / "wherry" / "__init__.py"), str(REPO / "pyspark_wherry.py")
    ], where.stdout
    script = outside / "read.py"
    script.write_text(SCRIPT)
    env = {**clean_env, "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
    with DevCluster(tmp_path / "cluster", brokers=1) as c:
        topic = _produce_five(c.bootstrap)
        out = subprocess.run(
            [str(python), str(script), c.bootstrap, topic],
            capture_output=True, text=True, timeout=240, env=env, cwd=outside,
        )
    assert out.returncode == 0, _why(out.stderr)
    assert "VALUES v0,v1,v2,v3,v4" in out.stdout, out.stdout[-2000:]


def _why(stderr: str) -> str:
    """The error lines of a failed Spark script first (the JVM's stack follows them)."""
    errors = [ln for ln in stderr.splitlines() if "Error" in ln or "Exception" in ln]
    return "\n".join(errors[:10]) + "\n...\n" + stderr[-3000:]
