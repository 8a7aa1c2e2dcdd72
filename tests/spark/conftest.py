"""A real local Spark (``local[2]``) for the connector tests, with the ``wherry`` source
registered. Without PySpark the tests are skipped, except in CI, where a missing PySpark fails.

With ``WHERRY_SPARK_CLUSTER`` set (by `wherry.testing.spark_cluster`, which starts a Spark
standalone cluster and runs these tests against it) the session's executors run in that
cluster's workers instead: the fixture checks that the tasks run in executor JVMs other than
the driver's before any test, and `spark_output` adds the executors' logs.

The JVM's stdout and stderr (and so the Python workers' stderr) go to a file. A Python worker
busy in one call for a minute writes its stack there. A Spark test that times out first has
the JVM write a thread dump there and drops its connection to the JVM; a failing Spark test's
report ends with the file's tail. After every Spark test, queries it left running are stopped
and its jobs cancelled, so that a stuck test cannot hold the two task slots the next tests
need."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.spark_jvm import short_thread_dumps, stop_spark_jvm
from wherry.testing.spark_cluster import ClusterForTests, executor_jvm_pids

# How long one Spark test may run before pytest-timeout ends it. Here each takes 1-31 s; a
# stuck query then fails its test in minutes, not the whole CI run in hours.
SPARK_TEST_TIMEOUT_S = 240
# Bytes of the JVM's log added to a failing test's report.
LOG_TAIL_BYTES = 60_000


@dataclass
class SparkJvm:
    """The running JVM of the session's Spark, and where its output goes."""

    log: Path
    pid: int | None = None

    def thread_dump(self) -> None:
        """Ask the JVM to print every thread's stack into the log (HotSpot's SIGQUIT)."""
        if self.pid is None:
            return
        before = self.log.stat().st_size if self.log.exists() else 0
        try:
            os.kill(self.pid, signal.SIGQUIT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30  # (a loaded machine's JVM can take seconds)
        while time.monotonic() < deadline:  # until the dump's last block is written
            time.sleep(0.1)
            with self.log.open("rb") as f:
                f.seek(before)
                if b"JNI global refs" in f.read():
                    return

    def tail(self) -> str:
        """The log's last lines, its thread dumps cut to the threads that run queries, tasks,
        Python workers and calls from Python."""
        if not self.log.exists():
            return "(no Spark log was written)"
        text = short_thread_dumps(self.log.read_text("utf-8", "replace"))
        return text[-LOG_TAIL_BYTES:]


_jvm: SparkJvm | None = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


def _drop_py4j_connection() -> None:
    """Close this thread's connection to the JVM. A call interrupted by a timeout leaves its
    answer unread on it, and the next call on it (even PySpark's own clean-up of the
    interrupted call) would read that answer, or wait for it as long as the stuck job runs.
    Closed, the next call opens a fresh connection."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    client = getattr(gateway, "_gateway_client", None)
    get_connection = getattr(client, "get_thread_connection", None)
    connection = get_connection() if get_connection is not None else None
    if connection is not None:
        connection.close(reset=True)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """For a Spark test, pytest-timeout's signal method with two steps first: the JVM's thread
    dump goes to its log, and this thread's JVM connection is dropped (see above)."""
    if (
        "spark" not in getattr(item, "fixturenames", ())
        or settings.method != "signal"
        or threading.current_thread() is not threading.main_thread()
    ):
        return None  # pytest-timeout's own timer
    import pytest_timeout

    def handler(signum: int, frame: Any) -> None:
        __tracebackhide__ = True
        if _jvm is not None:  # (the session's Spark may still be starting)
            _jvm.thread_dump()
            _drop_py4j_connection()
        pytest_timeout.timeout_sigalrm(item, settings)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout calls it
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and _jvm is not None and "spark" in getattr(item, "fixturenames", ()):
        report.sections.append((f"Spark JVM log {_jvm.log} (tail)", _jvm.tail()))
        broker = getattr(item, "funcargs", {}).get("broker")
        lines = getattr(broker, "output", None)
        if lines:  # the session's `wherry server`, which the Spark tests read and write
            report.sections.append(("wherry server output (tail)", "".join(lines[-80:])))
    return report


@pytest.fixture(scope="session")
def spark_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark") / "spark-stderr.log"


@pytest.fixture(scope="session")
def spark_cluster() -> ClusterForTests | None:
    """The standalone cluster the tests run on, or None for ``local[2]``."""
    return ClusterForTests.from_env()


@pytest.fixture(scope="session")
def spark_output(spark_log: Path, spark_cluster: ClusterForTests | None) -> Callable[[], str]:
    """What Spark has logged so far: the driver JVM's output, and the executors' on a
    cluster (there the executors, not the driver's JVM, run the Python workers)."""

    def read() -> str:
        text = spark_log.read_text(errors="replace") if spark_log.exists() else ""
        if spark_cluster is not None:
            text += spark_cluster.executor_logs()
        return text

    return read


def _builder(cluster: ClusterForTests | None) -> Any:
    from pyspark.sql import SparkSession

    if cluster is None:
        return SparkSession.builder.master("local[2]")
    # As in local mode, a failed task fails its job (the tests kill tasks on purpose).
    conf: dict[str, Any] = {**cluster.conf, "spark.task.maxFailures": "1"}
    return SparkSession.builder.config(map=conf)


@pytest.fixture(scope="session")
def spark(spark_log: Path, spark_cluster: ClusterForTests | None) -> Iterator[Any]:
    global _jvm
    try:
        import pyspark  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pyspark is not installed (pip install -e '.[spark]')")
        pytest.skip("pyspark is not installed (pip install -e '.[spark]')")
    from wherry.spark import register

    # Workers must run this interpreter (which has wherry installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    traceback_s = os.environ.get("WHERRY_TEST_SPARK_TRACEBACK_S", "60")
    # A JVM an earlier test of this process started (the state-change merge CLI, run in
    # process, stops its session but PySpark keeps the JVM for the next one) writes its log
    # elsewhere: this session gets a JVM of its own, started below with its output in the file.
    stop_spark_jvm()
    saved = os.dup(1), os.dup(2)
    with open(spark_log, "ab") as f:
        os.dup2(f.fileno(), 1)  # the JVM inherits both: its thread dumps go to stdout
        os.dup2(f.fileno(), 2)
        try:
            session = (
                _builder(spark_cluster)
                .appName("wherry-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.sql.streaming.pollingDelay", "10ms")
                # a query that will not stop makes stop() fail instead of waiting forever
                .config("spark.sql.streaming.stopTimeout", "30s")
                # a Python worker busy in one call for a minute prints its stack
                .config("spark.python.worker.faulthandler.enabled", "true")
                .config("spark.python.worker.tracebackDumpIntervalSeconds", traceback_s)
                .config("spark.python.worker.idleTimeoutSeconds", "60")
                .getOrCreate()
            )
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
    session.sparkContext.setLogLevel("WARN")
    register(session)
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    jvm = getattr(gateway, "proc", None)
    _jvm = SparkJvm(spark_log, jvm.pid if jvm is not None else None)
    if spark_cluster is not None:
        pids = executor_jvm_pids(session, spark_cluster.executors)
        if 0 in pids or _jvm.pid in pids or len(pids) != spark_cluster.executors:
            session.stop()
            stop_spark_jvm()
            pytest.fail(
                f"tasks ran in JVMs {sorted(pids)} (driver {_jvm.pid}), not in "
                f"{spark_cluster.executors} executors of the cluster"
            )
    try:
        yield session
    finally:
        _jvm = None
        session.stop()
        stop_spark_jvm()


@pytest.fixture(autouse=True)
def _spark_left_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a Spark test: no query of it still running, no job of it still holding a slot."""
    yield
    if "spark" not in request.fixturenames:
        return
    session = request.getfixturevalue("spark")
    for query in session.streams.active:
        try:
            query.stop()
        except Exception as e:  # reported; the test itself has already passed or failed
            print(f"stopping query {query.id} left by {request.node.nodeid} failed: {e}")
    session.sparkContext.cancelAllJobs()
