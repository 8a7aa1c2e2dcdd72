"""A Spark standalone cluster for the session: a master and two workers (one core each) as
processes of their own, started from the installed PySpark (`wherry.testing.spark_cluster`).
The tests here run their Spark drivers in child processes, never in the pytest process."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from wherry.testing.spark_cluster import SparkStandalone


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pyspark is not installed (pip install -e '.[spark]')")
        pytest.skip("pyspark is not installed (pip install -e '.[spark]')")
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    with cluster:
        yield cluster


class Child:
    """A process of a test (a Spark driver, a pytest run) in a session of its own, its output
    in a file; `stop` ends its whole process group (the JVM and brokers it started too)."""

    def __init__(
        self, cmd: Sequence[str], log: Path, env: dict[str, str], cwd: Path | None = None
    ) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self, tail: int = 20_000) -> str:
        return self.log.read_text("utf-8", "replace")[-tail:]

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise

    def kill(self) -> None:
        """SIGKILL the process and its group at once (a driver and its JVM), as a crash of
        their machine would."""
        self._signal_group(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)
        self.proc.wait(timeout=grace_s)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Child processes the test starts; each is stopped (with its group) after the test."""
    started: list[Child] = []
    yield started
    for c in started:
        c.stop()
