"""librdkafka's own integration suite against a 3-broker `wherry dev` cluster.

    python -m bench.librdkafka_suite --librdkafka DIR [--tests 0001-0150] [--cap 600]

DIR is a librdkafka source tree with the library and `tests/test-runner` built
(`./configure && make libs && make -C tests build`). The script starts `python -m wherry dev`
(3 brokers, free loopback ports, a temporary data dir) with the settings the suite's own
trivup clusters use -- auto-created topics with 4 partitions, replication factor 3 -- plus
Kafka's ACL authorizer with `allow.everyone.if.no.acl.found=true`; writes a test config file
with the bootstrap servers; puts `kafka-acls.sh`, `kafka-configs.sh` and `kafka-topics.sh`
(served by `wherry acls`, `wherry configs`, `wherry topics`) in `$KAFKA_PATH/bin`; and runs
`test-runner` once per test number with `TEST_KAFKA_VERSION` (default 4.0.0), each run capped
in time. It prints one row per test number (PASSED, FAILED, SKIPPED, TIMEOUT) with the
runner's failure or skip reason, and writes the runs' output to the log dir.

By default 0097 (needs trivup's SSL set-up) and 0098 (needs Java) are left out. If the cluster
process dies, it is started again (fresh data) before the next test and the row notes it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from bench.common import stop_pid
from bench.kafka_scripts import write_scripts

REPO = Path(__file__).resolve().parent.parent

DEFAULT_EXCLUDE = {"0097": "needs trivup's SSL set-up", "0098": "needs Java"}

BROKER_SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "default.replication.factor": "3",
}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY = re.compile(
    r"^\|\s*(?P<name>\d{4}_\S*)\s*\|\s*(?P<state>[A-Z]+)\s*\|\s*[\d.]+s\s*\|\s*(?P<why>.*)$"
)
_READY = re.compile(r"wherry dev cluster ready: .* bootstrap servers (?P<bootstrap>\S+),")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_numbers(spec: str) -> list[str]:
    """'0001-0150,0081' -> sorted unique 4-digit test numbers."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first > last:
            raise ValueError(f"empty range {part!r}")
        out.update(range(first, last + 1))
    return [f"{n:04d}" for n in sorted(out)]


def available_numbers(tests_dir: Path) -> set[str]:
    """The test numbers that have a source file in the librdkafka tests dir."""
    return {p.name[:4] for p in tests_dir.glob("[0-9][0-9][0-9][0-9]-*.c*")}


@dataclass
class Row:
    number: str
    state: str
    seconds: float
    reason: str = ""
    subtests: dict[str, str] = field(default_factory=dict)


def parse_summary(output: str) -> dict[str, tuple[str, str]]:
    """test name -> (state, reason) from test-runner's summary table (output of one run)."""
    found: dict[str, tuple[str, str]] = {}
    for raw in output.splitlines():
        m = _SUMMARY.match(_ANSI.sub("", raw).strip())
        if m:
            found[m["name"]] = (m["state"], m["why"].strip())
    return found


def last_failure(output: str) -> str:
    """The last line of the run that reports a failure (for runs without a summary)."""
    # librdkafka's own log lines ("%3|...|FAIL|...": a connection that failed) are not it.
    lines = [s for s in _ANSI.sub("", output).splitlines() if not s.lstrip().startswith("%")]
    # The suite's own failure line first (an assertion's text, a test timeout), for the first
    # failed test; then any failure mark.
    for s in lines:
        if s.startswith(("Test assertion failed", "Test ")) and ("failed" in s or "timed out" in s):
            return s.strip()[:300]
    for s in reversed(lines):
        if "FAIL" in s or "assert" in s.lower():
            return s.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


def last_subtest(output: str) -> str:
    """The sub-test a run was in when it was cut (its last '[ name: ... ]' header)."""
    found = re.findall(r"s\] \[ (do_\w+:\d+[^\]]*)", _ANSI.sub("", output))
    return found[-1].strip()[:200] if found else ""


def overall(number: str, summary: dict[str, tuple[str, str]], rc: int) -> tuple[str, str]:
    """One state and reason for a test number from the states of its tests."""
    own = {k: v for k, v in summary.items() if k.startswith(number + "_")}
    ran = {k: v for k, v in own.items() if v[0] != "SKIPPED"}
    failed = [f"{k}: {why}" for k, (st, why) in own.items() if st == "FAILED"]
    if failed:
        return "FAILED", "; ".join(failed)
    if not own:
        if rc:
            return "FAILED", f"no summary (exit {rc})"
        return "SKIPPED", "no test with this number"
    if not ran:
        return "SKIPPED", "; ".join(sorted({why for _, why in own.values()}))
    if rc != 0:
        return "FAILED", f"test-runner exited {rc}"
    if all(st == "PASSED" for st, _ in ran.values()):
        return "PASSED", ""
    return "FAILED", "; ".join(f"{k}: {st}" for k, (st, _) in ran.items() if st != "PASSED")


class Cluster:
    """`python -m wherry dev`, 3 brokers on free loopback ports, stopped by its PID."""

    def __init__(self, work: Path, python: str, extra: list[str], start_timeout_s: float,
                 log_level: str = "WARN") -> None:
        self.work = work
        self.log_level = log_level
        self.python = python
        self.extra = extra
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap = ""
        self.starts = 0
        self._out: IO[bytes] | None = None

    def start(self) -> str:
        self.starts += 1
        data = self.work / f"cluster-{self.starts}"
        out_path = self.work / f"cluster-{self.starts}.log"
        cmd = [self.python, "-m", "wherry", "dev", "--brokers", "3", "--base-port", "0",
               "--no-http", "--host", "127.0.0.1", "--dir", str(data),
               "--log-level", self.log_level]
        for key, value in BROKER_SETTINGS.items():
            cmd += ["--override", f"{key}={value}"]
        for item in self.extra:
            cmd += ["--override", item]
        self._out = out_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=_python_env())
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            m = _READY.search(out_path.read_text(errors="replace"))
            if m:
                self.bootstrap = m["bootstrap"]
                log(f"cluster up (pid {self.proc.pid}): {self.bootstrap}")
                return self.bootstrap
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"wherry dev did not start; see {out_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc, 30.0)
        if self._out is not None:
            self._out.close()
            self._out = None


def _python_env() -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_one(number: str, tests_dir: Path, env: dict[str, str], cap_s: float,
            runner_args: list[str], log_path: Path) -> tuple[str, int, bool]:
    """Run test-runner for one test number; (output, exit status, timed out)."""
    # The number goes in TESTS: test-runner frees a test list given as an argument, which
    # crashes it at exit.
    cmd = ["./test-runner", "-p1", *runner_args]
    env = {**env, "TESTS": number}
    with log_path.open("wb") as out:
        # Own process group, so that a timed-out run's kafka-*.sh children go with it.
        proc = subprocess.Popen(cmd, cwd=tests_dir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        timed_out = False
        try:
            proc.wait(cap_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # cut, or the runner itself stopped (Ctrl-C, SIGTERM)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    return log_path.read_text(errors="replace"), proc.returncode, timed_out


def print_table(rows: list[Row], version: str) -> None:
    print(f"librdkafka {version}, TEST_KAFKA_VERSION={os.environ.get('TEST_KAFKA_VERSION', '')}")
    print(f"{'test':<6} {'state':<8} {'secs':>7}  reason")
    for r in rows:
        print(f"{r.number:<6} {r.state:<8} {r.seconds:>7.1f}  {r.reason}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    print("totals: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def librdkafka_version(root: Path) -> str:
    header = (root / "src" / "rdkafka.h").read_text(errors="replace")
    m = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", header)
    if not m:
        return "unknown"
    v = int(m[1], 16)
    return f"{v >> 24}.{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--librdkafka", type=Path, required=True,
                    help="librdkafka source tree with tests/test-runner built")
    ap.add_argument("--tests", default="0001-0150", help="numbers and ranges, e.g. 0081,0100-0120")
    ap.add_argument("--exclude", default=",".join(DEFAULT_EXCLUDE),
                    help="numbers left out (default: 0097,0098)")
    ap.add_argument("--cap", type=float, default=600.0, help="seconds per test number")
    ap.add_argument("--kafka-version", default="4.0.0", help="TEST_KAFKA_VERSION")
    ap.add_argument("--timeout-multiplier", type=float, default=2.0,
                    help="the suite's test.timeout.multiplier (2, as its own cluster runs)")
    ap.add_argument("--quick", action="store_true", help="test-runner -Q (fewer iterations)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra broker config for every broker (repeatable)")
    ap.add_argument("--log-dir", type=Path, help="keep per-test output here (default: temp)")
    ap.add_argument("--broker-log-level", default="WARN",
                    help="the cluster's --log-level (its log is cluster-N.log in the work dir)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the test and the cluster, print the rows

    root = args.librdkafka.resolve()
    tests_dir = root / "tests"
    if not (tests_dir / "test-runner").exists():
        ap.error(f"{tests_dir}/test-runner not found: build librdkafka and its tests first")
    version = librdkafka_version(root)
    excluded = set(parse_numbers(args.exclude)) if args.exclude else set()
    have = available_numbers(tests_dir)
    numbers = [n for n in parse_numbers(args.tests) if n in have and n not in excluded]

    work = Path(tempfile.mkdtemp(prefix="wherry-rdkafka-"))
    log_dir = args.log_dir.resolve() if args.log_dir else work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    kafka_path = work / "kafka"
    write_scripts(kafka_path / "bin")
    cluster = Cluster(work, sys.executable, args.override, start_timeout_s=120.0,
                      log_level=args.broker_log_level)
    rows: list[Row] = []
    os.environ["TEST_KAFKA_VERSION"] = args.kafka_version
    try:
        bootstrap = cluster.start()
        for number in numbers:
            note = ""
            if not cluster.alive():
                cluster.stop()
                bootstrap = cluster.start()
                note = " (cluster restarted before this test)"
            conf = work / "test.conf"
            # What the suite's own cluster runs write (its LibrdkafkaTestApp), for PLAINTEXT.
            conf.write_text(
                "broker.address.family=v4\n"
                f"test.timeout.multiplier={args.timeout_multiplier}\n"
                f"bootstrap.servers={bootstrap}\n"
                "security.protocol=PLAINTEXT\n"
            )
            env = _python_env()
            env.update({
                "TEST_KAFKA_VERSION": args.kafka_version,
                "KAFKA_PATH": str(kafka_path),
                "BROKERS": bootstrap,
                "RDKAFKA_TEST_CONF": str(conf),
                "LD_LIBRARY_PATH": os.pathsep.join(
                    [str(root / "src"), str(root / "src-cpp"),
                     *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]),
                "TEST_LEVEL": "2",
                "TEST_SCENARIO": "default",
            })
            t0 = time.monotonic()
            output, rc, timed_out = run_one(number, tests_dir, env, args.cap,
                                            ["-Q"] if args.quick else [],
                                            log_dir / f"{number}.log")
            secs = time.monotonic() - t0
            summary = parse_summary(output)
            if timed_out:
                state, reason = "TIMEOUT", f"cut at {args.cap:.0f} s in: {last_subtest(output)}"
            else:
                state, reason = overall(number, summary, rc)
                if state == "FAILED" and reason.startswith(("no summary", "test-runner exited")):
                    reason += ": " + last_failure(output)
            row = Row(number, state, secs, reason + note,
                      {k: v[0] for k, v in summary.items() if k.startswith(number + "_")})
            rows.append(row)
            log(f"{number} {state} {secs:.1f}s {row.reason}")
    finally:
        cluster.stop()
        print_table(rows, version)
        if args.json:
            args.json.write_text(json.dumps(
                {"librdkafka": version, "kafka_version": args.kafka_version,
                 "broker_settings": BROKER_SETTINGS, "overrides": args.override,
                 "rows": [asdict(r) for r in rows]}, indent=1))
        log(f"per-test output in {log_dir}")
        if args.log_dir is None:
            # keep the logs, drop the cluster data
            for p in work.glob("cluster-*"):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
    return 0 if all(r.state in ("PASSED", "SKIPPED") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
