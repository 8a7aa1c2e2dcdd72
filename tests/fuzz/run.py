"""Run the fuzzer: coverage-guided in process (atheris/libFuzzer), or over real sockets.

    python -m tests.fuzz.run --inputs 10000000            # in process, one core
    python -m tests.fuzz.run --inputs 10000000 --jobs 2   # two workers, one corpus
    python -m tests.fuzz.run --socket --inputs 1000000    # against a `wherry server`
    python -m tests.fuzz.run --replay tests/fuzz/regressions

In process, each of `--jobs` workers (`worker.py`, one at a time per job) runs under this
supervisor; the jobs share one corpus. A native abort
(kio's reader allocating what a count claims), a libFuzzer time-out or out-of-memory ends the
worker; the supervisor files the input under `<workdir>/crashes/<kind>-<target>-<hash>`
(with the worker's last output beside it) and starts a new worker on the corpus so far, until
`--inputs` inputs or `--time` seconds are spent. Findings the worker survives (a traceback, an
in-process hang) are under `<workdir>/findings/`. The summary line gives inputs, inputs/s,
coverage (libFuzzer's cov/ft), crashes and findings; the exit status is 1 when anything
crashed or hung.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz.targets import short_hash, target_of

HERE = Path(__file__).parent
MIB = 1024 * 1024
SEEDS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
_STATS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+).*?exec/s: (\d+)(?:.*rss: (\d+)Mb)?")
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second")
_UNITS = re.compile(r"^stat::number_of_executed_units: (\d+)")
# What says why a worker died: kio's Rust panics and allocation failures, Python's fatal errors.
_NOTE = re.compile(
    r"memory allocation of|panicked at|Fatal Python|ALARM|ERROR: libFuzzer|_kio_native::"
)


@dataclass
class Summary:
    inputs: int = 0
    seconds: float = 0.0
    cov: int = 0
    ft: int = 0
    workers: int = 0
    max_rss_mb: int = 0
    crashes: list[str] = field(default_factory=list)
    findings: list[dict[str, str]] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    @property
    def hangs(self) -> list[dict[str, str]]:
        return [f for f in self.findings if f["kind"] == "hang"]

    def line(self) -> str:
        return (
            f"inputs={self.inputs} seconds={self.seconds:.0f} inputs/s={self.per_second:.0f} "
            f"cov={self.cov} ft={self.ft} workers={self.workers} max_rss_mb={self.max_rss_mb} "
            f"crashes={len(self.crashes)} hangs={len(self.hangs)} "
            f"errors={len(self.findings) - len(self.hangs)}"
        )


def fuzz_in_process(
    workdir: Path,
    *,
    inputs: int,
    seconds: float,
    deadline_s: float = 1.0,
    seeds: Path = SEEDS,
    max_len: int = 16384,
    queued_max_request_bytes: int = 100 * 1024 * 1024,
    echo: bool = True,
    jobs: int = 1,
    recycle: int = 1_000_000,
) -> Summary:
    """Supervise `jobs` workers side by side (one per core), sharing one corpus, until
    `inputs` inputs ran in all or `seconds` passed. A worker (and its broker) is replaced by a
    fresh one on the corpus so far after `recycle` inputs: a broker an input left leading
    partitions with an invented ISR, or holding thousands of groups, answers most later
    inputs only once they wait out their deadline, and a run would slow down with its age."""
    corpus, crashes = workdir / "corpus", workdir / "crashes"
    for d in (corpus, crashes):
        d.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    started = time.monotonic()
    env = {**os.environ, "WHERRY_FUZZ_DIR": str(workdir),
           "WHERRY_FUZZ_DEADLINE": str(deadline_s), "PYTHONUNBUFFERED": "1",
           "WHERRY_FUZZ_RSS_SLACK_MB": str(max(queued_max_request_bytes, 0) // MIB + 64)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE.parent.parent), env.get("PYTHONPATH", "")) if p
    )
    stop = _Stop()
    lock = threading.Lock()
    jobs = max(1, jobs)

    def supervise(job: int) -> None:
        # Each job has its own artifacts directory (a crash is filed with its own worker's
        # output) and its own share of the inputs; the corpus is shared (libFuzzer reloads
        # what the other jobs added).
        artifacts = workdir / ("artifacts" if jobs == 1 else f"artifacts-{job}")
        artifacts.mkdir(parents=True, exist_ok=True)
        share = inputs // jobs + (1 if job < inputs % jobs else 0)
        done = early_deaths = 0
        while done < share and not stop.asked:
            left_s = seconds - (time.monotonic() - started)
            if left_s < 5:
                break
            cmd = [
                sys.executable, "-m", "tests.fuzz.worker", str(corpus), str(seeds),
                f"-runs={min(share - done, max(recycle, 1))}", f"-max_total_time={int(left_s)}",
                f"-timeout={max(10, int(deadline_s * 10))}", "-rss_limit_mb=4096",
                f"-max_len={max_len}", f"-artifact_prefix={artifacts}/", "-print_final_stats=1",
                "-report_slow_units=1000000",
            ]
            if jobs > 1:
                cmd.append("-reload=1")
            with lock:
                summary.workers += 1
            runs, inited, tail = _run_worker(cmd, env, summary, left_s + 120,
                                             echo and job == 0, stop, lock)
            done += runs
            with lock:
                summary.inputs += runs
                for artifact in sorted(artifacts.iterdir()):
                    name = _file_crash(artifact, crashes, tail)
                    summary.crashes.append(name)
                    if echo:
                        print(f"CRASH {name}", flush=True)
            early_deaths = 0 if inited or stop.asked else early_deaths + 1
            if early_deaths >= 3:
                print("the worker died three times before fuzzing; last output:\n"
                      + "\n".join(tail), file=sys.stderr)
                with lock:
                    summary.crashes.append("worker-start")
                break

    threads = [threading.Thread(target=supervise, args=(job,), name=f"fuzz-job-{job}")
               for job in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for stale in workdir.glob("broker-*"):
        shutil.rmtree(stale, ignore_errors=True)
    stop.restore()
    summary.seconds = time.monotonic() - started
    journal = workdir / "findings.jsonl"
    if journal.exists():
        summary.findings = [json.loads(line) for line in journal.read_text().splitlines()]
    return summary


class _Stop:
    """SIGINT / SIGTERM to the supervisor: the worker is interrupted (libFuzzer prints its
    final statistics), and the summary follows."""

    def __init__(self) -> None:
        self.asked = False
        self.workers: set[subprocess.Popen[str]] = set()
        self._old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.asked = True
        for worker in list(self.workers):
            if worker.poll() is None:
                worker.send_signal(signal.SIGINT)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _run_worker(
    cmd: list[str], env: dict[str, str], summary: Summary, timeout_s: float, echo: bool,
    stop: _Stop, lock: threading.Lock,
) -> tuple[int, bool, list[str]]:
    """(inputs the worker ran, whether it got to fuzzing, its last output lines)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    stop.workers.add(proc)
    runs, inited = 0, False
    tail: list[str] = []
    notes: list[str] = []
    killer = _Deadline(proc, timeout_s)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            tail = [*tail[-60:], line.rstrip()]
            if _NOTE.search(line):
                notes.append(line.rstrip())
            if "INITED" in line:
                inited = True
            if m := _STATS.match(line):
                runs = int(m.group(1))
                with lock:
                    summary.cov = max(summary.cov, int(m.group(2)))
                    summary.ft = max(summary.ft, int(m.group(3)))
                    if m.group(5):
                        summary.max_rss_mb = max(summary.max_rss_mb, int(m.group(5)))
                if echo and ("pulse" in line or "INITED" in line):
                    print(line.rstrip(), flush=True)
            elif m := _DONE.match(line) or _UNITS.match(line):
                runs = int(m.group(1))
            elif echo and (line.startswith(("FINDING", "==")) or "written to" in line):
                print(line.rstrip(), flush=True)
    finally:
        proc.wait()
        killer.cancel()
        stop.workers.discard(proc)
    return runs, inited, [*notes[-20:], "--- last output:", *tail]


class _Deadline:
    """Kills the worker (by its PID) if it outlives its budget."""

    def __init__(self, proc: subprocess.Popen[str], timeout_s: float) -> None:
        import threading

        self._timer = threading.Timer(timeout_s, proc.kill)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()


def _file_crash(artifact: Path, crashes: Path, tail: list[str]) -> str:
    """Move a libFuzzer artifact to `crashes/<kind>-<target>-<hash>` (+ `.log`)."""
    data = artifact.read_bytes()
    kind = artifact.name.split("-", 1)[0]
    name = f"{kind}-{target_of(data)}-{short_hash(data)}"
    (crashes / name).write_bytes(data)
    (crashes / f"{name}.log").write_text("\n".join(tail) + "\n")
    artifact.unlink()
    return name


def input_files(paths: list[Path]) -> list[Path]:
    return sorted(f for p in paths for f in (p.iterdir() if p.is_dir() else [p])
                  if f.is_file() and not f.name.endswith((".log", ".md", ".json")))


def replay(paths: list[Path], *, broker: bool = True) -> int:
    """Every input under `paths` through the decoders and (with `broker`) an in-process
    broker; 1 if any errs or hangs (a native abort ends this process)."""
    import tempfile

    from tests.fuzz.inproc import start_broker, stop_broker
    from tests.fuzz.targets import run_input

    files = input_files(paths)
    bad = 0
    if not broker:
        for f in files:
            out = run_input(f.read_bytes(), None)
            print(f"{f.name}: {out.kind} {out.detail[:120]}", flush=True)
            bad += out.kind in ("error", "hang")
        return 1 if bad else 0
    with tempfile.TemporaryDirectory() as tmp:
        broker, loop, targets = start_broker(Path(tmp) / "logs")
        try:
            for f in files:
                out = run_input(f.read_bytes(), targets)
                print(f"{f.name}: {out.kind} {out.detail[:120]}", flush=True)
                bad += out.kind in ("error", "hang")
        finally:
            stop_broker(broker, loop)
    return 1 if bad else 0


FINDINGS = HERE / "findings"


def collect(workdirs: list[Path]) -> None:
    """A run's crashes into `regressions/` (`<target>-<hash>`) and its findings into
    `findings/` under the worker's names (`<kind>-<target>-<hash of the cause>`, so one per
    cause across runs); prints what is new, for the READMEs there."""
    REGRESSIONS.mkdir(exist_ok=True)
    FINDINGS.mkdir(exist_ok=True)
    for workdir in workdirs:
        for d in (workdir / "crashes", workdir / "socket-crashes"):
            for f in input_files([d]) if d.is_dir() else []:
                data = f.read_bytes()
                name = f"{target_of(data)}-{short_hash(data)}"
                if not (REGRESSIONS / name).exists():
                    (REGRESSIONS / name).write_bytes(data)
                    print(f"new regression {name} ({f.name})")
        journal = workdir / "findings.jsonl"
        for line in journal.read_text().splitlines() if journal.exists() else []:
            finding = json.loads(line)
            target = FINDINGS / finding["file"]
            if not target.exists():
                target.write_bytes((workdir / "findings" / finding["file"]).read_bytes())
                print(f"new finding {finding['file']}: {finding['signature']} "
                      f"{finding['detail'][:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.run",
        description="Fuzz every decode path and API of the broker (docs/fuzzing.md).",
    )
    parser.add_argument("--inputs", type=int, default=10_000_000, help="inputs to run")
    parser.add_argument("--time", type=float, default=7 * 24 * 3600.0,
                        help="seconds at most (default: a week)")
    parser.add_argument("--workdir", type=Path, default=Path("fuzz-work"),
                        help="corpus, crashes and findings (default ./fuzz-work)")
    parser.add_argument("--deadline", type=float, default=1.0,
                        help="seconds an input may take before it counts as a hang")
    parser.add_argument("--socket", action="store_true",
                        help="send the inputs to a `wherry server` process over sockets")
    parser.add_argument("--queued-max-request-bytes", type=int, default=100 * 1024 * 1024,
                        help="the request memory pool: the RSS may grow by it + 64 MiB")
    parser.add_argument("--seed", type=int, default=0, help="mutation seed (--socket)")
    parser.add_argument("--replay", type=Path, nargs="*",
                        help="run these inputs (files or directories) once and stop")
    parser.add_argument("--no-broker", action="store_true",
                        help="--replay through the decoders alone")
    parser.add_argument("--collect", type=Path, nargs="+",
                        help="file these workdirs' crashes and findings under tests/fuzz")
    parser.add_argument("--jobs", type=int, default=1,
                        help="in-process workers side by side, one per core (default 1)")
    parser.add_argument("--recycle", type=int, default=1_000_000,
                        help="inputs a worker runs before a fresh one (and broker) replaces it")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    if args.collect:
        collect(args.collect)
        return
    if args.replay is not None:
        sys.exit(replay(args.replay or [REGRESSIONS], broker=not args.no_broker))
    if args.socket:
        from tests.fuzz.socket_mode import fuzz_over_sockets

        result = fuzz_over_sockets(
            args.workdir, inputs=args.inputs, seconds=args.time, deadline_s=args.deadline,
            queued_max_request_bytes=args.queued_max_request_bytes, seed=args.seed,
        )
        for kind, n in sorted(result.traceback_kinds.items(), key=lambda kv: -kv[1]):
            print(f"traceback x{n}: {kind}", flush=True)
        print(json.dumps(asdict(result)) if args.json else result.line(), flush=True)
        sys.exit(1 if result.failures else 0)
    summary = fuzz_in_process(args.workdir, inputs=args.inputs, seconds=args.time,
                              deadline_s=args.deadline,
                              queued_max_request_bytes=args.queued_max_request_bytes,
                              jobs=args.jobs, recycle=args.recycle)
    print(json.dumps(asdict(summary)) if args.json else summary.line(), flush=True)
    sys.exit(1 if summary.crashes or summary.hangs else 0)


if __name__ == "__main__":
    main()
