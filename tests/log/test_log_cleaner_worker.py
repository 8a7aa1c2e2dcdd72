"""The log cleaner through its worker process (`wherry.server.cleaner_process`), as `wherry
server` runs it: the same segments as in-process, inputs that left the log meanwhile, a worker
killed mid-clean, a worker outliving its broker."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.log.logtest_util import T0, open_log
from tests.log.test_log_cleaner import COMPACT, latest, produce, records, updates
from tests.log.test_log_transactions import append, write_marker
from wherry.log.clean_job import CleanJob, CleanOutput
from wherry.log.cleaner import LogCleaner
from wherry.log.log import Log
from wherry.protocol.records import build_batch
from wherry.server.cleaner_process import WORKER_NICENESS, CleanerProcess

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0  # bounds every wait (a loaded machine)


@pytest.fixture
def worker() -> Iterator[CleanerProcess]:
    w = CleanerProcess()
    try:
        yield w
    finally:
        w.close()


def cleaner_of(log: Log, dir: Path, worker: CleanerProcess | None) -> LogCleaner:
    return LogCleaner(
        [dir],
        lambda: [log],
        lambda _tp: dir,
        runner=worker,
        close_runner=worker.close if worker is not None else None,
    )


def fill_mixed(log: Log) -> None:
    """Updates, tombstones, an idempotent producer, committed and aborted transactions."""
    produce(log, updates(8, 6))
    produce(log, [(b"k1", None), (b"k2", None)])  # tombstones
    produce(log, updates(4, 3), pid=7, seq=0, per_batch=2)  # its last batch is kept
    append(log, build_batch([(b"k3", b"committed")], timestamp_ms=T0, producer_id=9,
                            producer_epoch=0, base_sequence=0, is_transactional=True))
    write_marker(log, 9, commit=True)
    append(log, build_batch([(b"k4", b"aborted")], timestamp_ms=T0, producer_id=10,
                            producer_epoch=0, base_sequence=0, is_transactional=True))
    write_marker(log, 10, commit=False)
    append(log, build_batch([(b"k5", b"later")], timestamp_ms=T0, producer_id=10,
                            producer_epoch=0, base_sequence=1, is_transactional=True))
    write_marker(log, 10, commit=True)
    produce(log, updates(8, 2))
    log.roll(now_ms=T0)
    produce(log, [(b"k0", b"tail")])


def segment_files(dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dir.iterdir()) if p.is_file()}


def leftovers(log: Log) -> list[str]:
    return [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]


def test_worker_writes_the_same_segments_as_in_process(
    tmp_path: Path, worker: CleanerProcess
) -> None:
    logs = {}
    for name in ("inline", "worker"):
        (tmp_path / name).mkdir()
        log = open_log(tmp_path / name, COMPACT)
        fill_mixed(log)
        logs[name] = log
    assert segment_files(logs["inline"].dir) == segment_files(logs["worker"].dir)
    done = {
        "inline": cleaner_of(logs["inline"], tmp_path / "inline", None).clean_all(T0),
        "worker": cleaner_of(logs["worker"], tmp_path / "worker", worker).clean_all(T0),
    }
    assert done["inline"] == done["worker"] >= 1
    assert worker.pids() and worker.pids()[0] != os.getpid()
    # Background work: the worker runs nicer than its broker, which keeps its priority.
    (pid,) = worker.pids()
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + WORKER_NICENESS)
    cleaned = {name: segment_files(log.dir) for name, log in logs.items()}
    assert cleaned["inline"] == cleaned["worker"]  # names and bytes, indexes included
    assert any(n.endswith(".txnindex") for n in cleaned["worker"])  # the abort's entry kept
    assert latest(logs["worker"]) == latest(logs["inline"])
    for log in logs.values():
        log.check_integrity()
        assert not leftovers(log)
        log.close()


class RetentionMeanwhile:
    """A runner around the worker that moves the log start past the first segment (retention
    by log start offset deletes it) before the worker reads, or after it wrote."""

    def __init__(self, log: Log, worker: CleanerProcess, *, before: bool) -> None:
        self.log, self.worker, self.before = log, worker, before
        self.written: list[str] = []

    def retention(self) -> None:
        second = self.log.segments[1].base_offset
        assert self.log.maybe_increment_log_start_offset(second, "test")
        assert self.log.delete_log_start_offset_breached_segments(T0) == 1

    def __call__(self, job: CleanJob) -> CleanOutput | None:
        if self.before:
            self.retention()
        out = self.worker(job)
        self.written = sorted(n for n in os.listdir(self.log.dir) if n.endswith(".cleaned"))
        if not self.before:
            self.retention()
        return out


@pytest.mark.parametrize("before", [True, False], ids=["before-the-read", "after-the-write"])
def test_segments_deleted_by_retention_meanwhile_are_not_swapped_in(
    tmp_path: Path, worker: CleanerProcess, before: bool
) -> None:
    cfg = dataclasses.replace(COMPACT, cleanup_policy=("compact", "delete"))
    log = open_log(tmp_path, cfg)
    produce(log, updates(6, 12))
    log.roll(now_ms=T0)
    produce(log, [(b"k0", b"tail")])
    runner = RetentionMeanwhile(log, worker, before=before)
    cleaner = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path, runner=runner)
    expected_start = log.segments[1].base_offset
    result = cleaner.clean_once(T0)
    assert result is not None and result.aborted
    if not before:
        assert runner.written  # the worker did write its output ...
    assert not leftovers(log)  # ... and it was deleted, not swapped in
    assert log.log_start_offset == expected_start
    assert records(log)[0][0] == expected_start  # nothing cleaned below, nothing lost
    assert cleaner.checkpoint_of(log.topic_partition) is None
    log.check_integrity()
    # the next round cleans what is left
    again = LogCleaner([tmp_path], lambda: [log], lambda _tp: tmp_path, runner=worker)
    result = again.clean_once(T0)
    assert result is not None and not result.aborted
    assert {k: v for k, (_, v) in latest(log).items()} == {
        **{f"k{k}".encode(): f"v11-{k}".encode() * 3 for k in range(6)},
        b"k0": b"tail",
    }
    log.check_integrity()
    log.close()


def wait_until(cond: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def test_worker_killed_mid_clean_leaves_the_log_intact(
    tmp_path: Path, worker: CleanerProcess
) -> None:
    cfg = dataclasses.replace(
        COMPACT, segment_bytes=256 * 1024, index_interval_bytes=4096, segment_index_bytes=65536
    )
    log = open_log(tmp_path, cfg)
    # every batch loses most of its records: each is rebuilt, which keeps the worker busy
    produce(log, updates(50, 1000), per_batch=10)
    log.roll(now_ms=T0)
    produce(log, [(b"k0", b"tail")])
    before_records, before_files = records(log), segment_files(log.dir)
    assert log.num_segments > 4
    cleaner = cleaner_of(log, tmp_path, worker)
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(cleaner.clean_once(T0)), daemon=True)
    t.start()
    wait_until(lambda: leftovers(log) or not t.is_alive(), "the worker's first output")
    assert t.is_alive(), "the clean ended before its output showed: the test needs more data"
    (pid,) = worker.pids()
    os.kill(pid, signal.SIGKILL)
    t.join(WAIT_S)
    assert not t.is_alive() and out == [None]  # failed, logged, nothing swapped
    assert not leftovers(log)
    assert records(log) == before_records and segment_files(log.dir) == before_files
    assert cleaner.checkpoint_of(log.topic_partition) is None
    # the next round starts a new worker and cleans
    result = cleaner.clean_once(T0)
    assert result is not None and not result.aborted
    assert worker.pids() and worker.pids() != [pid]
    assert {k: v for k, (_, v) in latest(log).items()} == {
        **{f"k{k}".encode(): f"v999-{k}".encode() * 3 for k in range(50)},
        b"k0": b"tail",
    }
    log.check_integrity()
    log.close()


def test_close_stops_the_worker(tmp_path: Path) -> None:
    worker = CleanerProcess()
    log = open_log(tmp_path, COMPACT)
    produce(log, updates(5, 10))
    log.roll(now_ms=T0)
    cleaner = cleaner_of(log, tmp_path, worker)
    assert worker.pids() == []  # started at the first clean with work, not before
    assert cleaner.clean_once(T0) is not None
    (pid,) = worker.pids()
    cleaner.close()
    wait_until(lambda: not alive(pid), "the worker to exit")
    assert cleaner.clean_once(T0) is None  # stopped: no new worker
    assert worker.pids() == []
    log.close()


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie left for its new parent to reap counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("State:")), "")
    return state not in ("Z", "X")


BROKER_LIKE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tests.log.logtest_util import T0, open_log
    from tests.log.test_log_cleaner import COMPACT, produce, updates
    from wherry.log.cleaner import LogCleaner
    from wherry.server.cleaner_process import CleanerProcess

    dir = Path(sys.argv[1])
    log = open_log(dir, COMPACT)
    produce(log, updates(5, 10))
    log.roll(now_ms=T0)
    worker = CleanerProcess()
    cleaner = LogCleaner([dir], lambda: [log], lambda _tp: dir, runner=worker)
    assert cleaner.clean_once(T0) is not None
    print(worker.pids()[0], flush=True)
    sys.stdin.read()  # until killed
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_worker_exits_when_its_broker_is_killed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", BROKER_LIKE, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    pid = 0
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip(), f"the broker-like process printed no worker pid ({proc.poll()})"
        pid = int(line)
        assert alive(pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(WAIT_S)
        deadline = time.monotonic() + 10.0
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "the cleaner's worker outlived its broker"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(WAIT_S)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
