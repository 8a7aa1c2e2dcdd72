"""A Spark standalone cluster of separate processes, for tests and local runs: one master and
N workers started from the installed PySpark's own jars and launcher (``bin/spark-class
org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker spark://...``), bound to
127.0.0.1 on ports the OS chooses, each stopped by its own PID within a bounded time.

    with SparkStandalone(Path("/tmp/spark-cluster"), workers=2) as cluster:
        spark = SparkSession.builder.config(map=cluster.session_conf()).getOrCreate()

A session built with `session_conf` runs its executors in the workers' processes (one
executor per worker), with this interpreter as their Python and this checkout of wherry on
their Python path. `kill_worker` / `start_worker` take a worker away (SIGKILL) and bring it
back. Run as ``python -m wherry.testing.spark_cluster`` it starts a cluster, prints the
master's URL and the settings for a session, and stops it on Ctrl-C. Needs PySpark (its jars)
and Java; `executor_jvm_pids` reads ``/proc`` (Linux).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wherry.common.closeable import Startable

__all__ = [
    "CLUSTER_ENV",
    "ClusterForTests",
    "SparkStandalone",
    "SparkStartError",
    "executor_jvm_pids",
    "spark_home",
]

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

# What the daemons' logs say once they are up (Spark's own log lines).
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")
_WORKER_PORT = re.compile(r"Successfully started service 'sparkWorker' on port (\d+)")
_WORKER_UI = re.compile(r"Successfully started service 'WorkerUI' on port (\d+)")
_REGISTERED = re.compile(r"Successfully registered with master")

# Names the cluster that tests/spark runs on (JSON of `ClusterForTests`) instead of local[2].
CLUSTER_ENV = "WHERRY_SPARK_CLUSTER"

# Settings of the master and workers themselves: no REST submission server (it would take
# the fixed port 6066).
DAEMON_PROPERTIES = {"spark.master.rest.enabled": "false"}


class SparkStartError(RuntimeError):
    """A daemon did not come up in time, or exited; the message ends with its log's tail."""


def spark_home() -> Path:
    """The installed PySpark's directory, which holds Spark's jars and ``bin/spark-class``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _wherry_root() -> Path:
    """The directory that holds this ``wherry`` package (put on the executors' Python path)."""
    return Path(__file__).resolve().parents[2]


@dataclass
class Daemon:
    """One master or worker process; its output (stdout and stderr) goes to ``log``."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0
    ui_port: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text("utf-8", "replace") if self.log.exists() else ""

    def tail(self, n: int = 4000) -> str:
        return self.text()[-n:]


@dataclass
class SparkStandalone(Startable):
    """A master and ``workers`` workers (``worker_cores`` cores, ``worker_memory`` each) under
    ``work_dir`` (logs, the workers' directories, the executors' logs)."""

    work_dir: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    executor_memory: str = "512m"
    daemon_memory: str = "256m"
    start_timeout_s: float = 180.0
    stop_timeout_s: float = 20.0
    python: str = sys.executable
    master: Daemon | None = None
    running: dict[int, Daemon] = field(default_factory=dict)
    # Every worker process started, killed ones included: their process groups (executors,
    # Python workers) are ended by `stop`.
    started: list[Daemon] = field(default_factory=list)
    _starts: int = 0

    # ---------------------------------------------------------------------------- lifecycle

    def start(self) -> SparkStandalone:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "conf").mkdir(exist_ok=True)
        props = self.work_dir / "daemons.properties"
        props.write_text("".join(f"{k} {v}\n" for k, v in DAEMON_PROPERTIES.items()))
        try:
            self.master = self._launch(
                "master",
                [MASTER_CLASS, "--host", HOST, "--port", "0", "--webui-port", "0"],
            )
            log = self._wait_for_log(self.master, [_MASTER_URL, _MASTER_UI])
            self.master.ui_port = int(_MASTER_UI.search(log).group(1))  # type: ignore[union-attr]
            self.master_url = _MASTER_URL.search(log).group(1)  # type: ignore[union-attr]
            for i in range(self.workers):
                self.start_worker(i, wait=False)
            self.wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _env(self) -> dict[str, str]:
        root = str(_wherry_root())
        rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.work_dir / "conf"),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "PYSPARK_PYTHON": self.python,
            "PYTHONPATH": os.pathsep.join([root, *rest]),
        }

    def _launch(self, name: str, args: list[str]) -> Daemon:
        spark_class = spark_home() / "bin" / "spark-class"
        log = self.work_dir / f"{name}.log"
        props = self.work_dir / "daemons.properties"
        with open(log, "ab") as out:
            # spark-class ends in `exec java ...`: the PID is the JVM's. A session of its own
            # makes the PID the process group of the executors a worker starts, too.
            proc = subprocess.Popen(
                [str(spark_class), *args, "--properties-file", str(props)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.work_dir,
                start_new_session=True,
            )
        return Daemon(name, proc, log)

    def _wait_for_log(
        self, daemon: Daemon, patterns: list[re.Pattern[str]], timeout_s: float | None = None
    ) -> str:
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        while True:
            text = daemon.text()
            if all(p.search(text) for p in patterns):
                return text
            if daemon.proc.poll() is not None:
                raise SparkStartError(
                    f"Spark {daemon.name} (pid {daemon.pid}) exited with "
                    f"{daemon.proc.returncode}:\n{daemon.tail()}"
                )
            if time.monotonic() > deadline:
                raise SparkStartError(
                    f"Spark {daemon.name} (pid {daemon.pid}) not up after "
                    f"{timeout_s or self.start_timeout_s} s:\n{daemon.tail()}"
                )
            time.sleep(0.2)

    def start_worker(self, index: int, *, wait: bool = True) -> Daemon:
        """Start worker ``index`` (again, after `kill_worker`); with ``wait``, until the master
        lists it alive."""
        if index in self.running:
            raise ValueError(f"worker {index} is running")
        self._starts += 1
        work = self.work_dir / f"worker-{index}"
        work.mkdir(exist_ok=True)
        d = self._launch(
            f"worker-{index}.{self._starts}",
            [
                WORKER_CLASS,
                "--host", HOST, "--port", "0", "--webui-port", "0",
                "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                "--work-dir", str(work),
                self.master_url,
            ],
        )  # fmt: skip
        self.running[index] = d
        self.started.append(d)
        if wait:
            self.wait_for_workers()
        return d

    def wait_for_workers(self, timeout_s: float | None = None) -> None:
        """Until every running worker has registered and the master lists exactly those
        alive (a killed worker's entry gone or dead)."""
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        for d in self.running.values():
            if not d.port:
                left = max(1.0, deadline - time.monotonic())
                text = self._wait_for_log(d, [_WORKER_PORT, _WORKER_UI, _REGISTERED], left)
                d.port = int(_WORKER_PORT.search(text).group(1))  # type: ignore[union-attr]
                d.ui_port = int(_WORKER_UI.search(text).group(1))  # type: ignore[union-attr]
        want = {d.port for d in self.running.values()}
        while True:
            alive = {w["port"] for w in self.alive_workers()}
            if alive == want:
                return
            if time.monotonic() > deadline:
                raise SparkStartError(f"the master lists workers {alive} alive, not {want}")
            time.sleep(0.3)

    def kill_worker(self, index: int) -> int:
        """SIGKILL worker ``index`` (its executor exits when it loses its worker, as in a
        machine's crash); its PID."""
        d = self.running.pop(index)
        os.kill(d.pid, signal.SIGKILL)
        d.proc.wait(timeout=self.stop_timeout_s)
        return d.pid

    def stop(self) -> None:
        """Stop the workers, then the master: SIGTERM by PID, SIGKILL after ``stop_timeout_s``;
        then what is left of each worker's process group (executors, Python workers)."""
        for d in reversed(self.started):
            _terminate(d, self.stop_timeout_s)
        if self.master is not None:
            _terminate(self.master, self.stop_timeout_s)
        for d in self.started:
            try:
                os.killpg(d.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.running.clear()

    # ---------------------------------------------------------------------------- looking in

    def master_state(self) -> dict[str, Any]:
        """The master's JSON status (``/json/`` of its web UI): workers, applications."""
        assert self.master is not None
        return _get_json(f"http://{HOST}:{self.master.ui_port}/json/")

    def worker_state(self, index: int) -> dict[str, Any]:
        """A running worker's JSON status: its executors, running and finished."""
        return _get_json(f"http://{HOST}:{self.running[index].ui_port}/json/")

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.master_state()["workers"] if w.get("state") == "ALIVE"]

    def for_tests(self) -> ClusterForTests:
        return ClusterForTests(self.session_conf(), len(self.running), str(self.work_dir))

    def session_conf(self, **extra: str) -> dict[str, str]:
        """Settings of a SparkSession whose executors run on this cluster's workers."""
        conf = {
            "spark.master": self.master_url,
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executor.cores": str(self.worker_cores),
            "spark.executor.memory": self.executor_memory,
            "spark.pyspark.python": self.python,
            "spark.executorEnv.PYTHONPATH": self._env()["PYTHONPATH"],
            "spark.ui.enabled": "false",
        }
        conf.update(extra)
        return conf


@dataclass(frozen=True)
class ClusterForTests:
    """What a test process needs of a running cluster: a session's settings, the number of
    executors to expect (one per worker), where the executors' logs are."""

    conf: dict[str, str]
    executors: int
    work_dir: str

    def to_env(self) -> str:
        return json.dumps({"conf": self.conf, "executors": self.executors, "dir": self.work_dir})

    @classmethod
    def from_json(cls, raw: str) -> ClusterForTests:
        d = json.loads(raw)
        return cls(dict(d["conf"]), int(d["executors"]), str(d["dir"]))

    @classmethod
    def from_env(cls) -> ClusterForTests | None:
        raw = os.environ.get(CLUSTER_ENV)
        return cls.from_json(raw) if raw else None

    def executor_logs(self) -> str:
        """Every executor's output so far (in the workers' directories)."""
        paths = sorted(Path(self.work_dir).glob("worker-*/app-*/*/std*"))
        return "\n".join(p.read_text("utf-8", "replace") for p in paths)


def _terminate(d: Daemon, timeout_s: float) -> None:
    if d.proc.poll() is not None:
        return
    d.proc.terminate()
    try:
        d.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        d.proc.wait(timeout=timeout_s)


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        out: dict[str, Any] = json.load(r)
    return out


# ------------------------------------------------------------------------------ executors


def _executor_jvm_pid(_: object = None) -> int:
    """In a Spark task: the PID of the executor JVM this Python worker descends from (its
    nearest ancestor running Spark's executor backend), 0 if there is none."""
    pid = os.getppid()
    while pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return 0
        if EXECUTOR_CLASS.encode() in cmdline:
            return pid
        pid = int(stat.rpartition(")")[2].split()[1])  # the parent's PID
    return 0


def executor_jvm_pids(
    spark: Any, executors: int, tasks: int = 8, wait_s: float = 120.0
) -> set[int]:
    """The executor JVMs that run a job of ``tasks`` tasks, once the session has ``executors``
    executors (or ``wait_s`` has passed): a set of PIDs, 0 for a task whose Python worker has
    no executor JVM above it (as in ``local`` mode)."""
    sc = spark.sparkContext
    deadline = time.monotonic() + wait_s
    # The block managers listed are the executors' and the driver's.
    while sc._jsc.sc().getExecutorMemoryStatus().size() - 1 < executors:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    job: Callable[[int], int] = _slow_executor_jvm_pid
    return set(sc.parallelize(range(tasks), tasks).map(job).collect())


def _slow_executor_jvm_pid(i: int) -> int:
    time.sleep(0.3)  # long enough that one executor cannot take every task
    return _executor_jvm_pid(i)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(
        prog="python -m wherry.testing.spark_cluster",
        description="Run a Spark standalone cluster (a master and workers) on 127.0.0.1.",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-cores", type=int, default=1)
    parser.add_argument("--worker-memory", default="1g")
    parser.add_argument("--dir", type=Path, help="logs and work (default: a temporary dir)")
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help=f"run this with the cluster up (its settings in ${CLUSTER_ENV}) and stop; "
        "without one, run until Ctrl-C",
    )
    args = parser.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="spark-standalone-"))
    cluster = SparkStandalone(
        work, workers=args.workers, worker_cores=args.worker_cores, worker_memory=args.worker_memory
    )
    # Ctrl-C and SIGTERM are waited for (or passed on to the command), not raised mid-start.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        cluster.start()
        assert cluster.master is not None
        print(f"master {cluster.master_url}, web UI http://{HOST}:{cluster.master.ui_port}")
        print(f"logs under {work}", flush=True)
        if args.command:
            env = {**os.environ, CLUSTER_ENV: cluster.for_tests().to_env()}
            cmd = args.command[1:] if args.command[0] == "--" else args.command
            proc = subprocess.Popen(cmd, env=env)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                return proc.wait()
            except KeyboardInterrupt:
                proc.terminate()
                return proc.wait()
        print("session settings:")
        for k, v in cluster.session_conf().items():
            print(f"  {k}={v}")
        print("Ctrl-C stops the cluster.", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    finally:
        cluster.stop()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
