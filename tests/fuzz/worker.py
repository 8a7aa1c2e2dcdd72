"""The in-process fuzzer atheris drives: a broker in this process, every target of
`targets.py`, coverage of everything loaded once the seeds have run.

    python -m tests.fuzz.worker WORK_CORPUS SEED_CORPUS [libFuzzer flags]

Started by `run.py`, which reads its output and restarts it after a crash. The environment
gives `WHERRY_FUZZ_DIR` (where the broker's log dir and the findings go),
`WHERRY_FUZZ_DEADLINE` (seconds an input may take before it counts as a hang) and
`WHERRY_FUZZ_RSS_SLACK_MB` (how far the RSS may grow past what it is once the seeds ran:
libFuzzer's `-rss_limit_mb`, set once the seeds ran, is that much over it). A Python
exception an input causes that its path does not document, or an in-process hang, is written
once per signature to `<dir>/findings/` and to `<dir>/findings.jsonl`; the process goes on.
A native abort, a libFuzzer time-out or out-of-memory ends the process; libFuzzer writes the
input as `crash-*` / `timeout-*` / `oom-*` under its `-artifact_prefix`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

from tests.fuzz.targets import Outcome, run_input, short_hash


def main() -> None:
    import atheris

    work = Path(os.environ.get("WHERRY_FUZZ_DIR", "fuzz-work"))
    deadline = float(os.environ.get("WHERRY_FUZZ_DEADLINE", "1.0"))
    findings = work / "findings"
    findings.mkdir(parents=True, exist_ok=True)
    journal = (work / "findings.jsonl").open("a")
    seen = {p.name.split("-", 2)[-1] for p in findings.iterdir()}

    # Coverage is set up for wherry's modules and kio's readers as they are imported: by the
    # broker's start and by the seeds (the last corpus directory), which reach every path an
    # input can. (`atheris.instrument_all` would take minutes over everything loaded.)
    with atheris.instrument_imports(include=["wherry", "kio.serial"]):
        from tests.fuzz.inproc import start_broker

        _broker, _loop, targets = start_broker(work / f"broker-{os.getpid()}", deadline)
        dirs = [Path(a) for a in sys.argv[1:] if not a.startswith("-") and Path(a).is_dir()]
        for path in sorted(dirs[-1].iterdir()) if dirs else ():
            if path.is_file():
                run_input(path.read_bytes(), targets)

    def record(out: Outcome, data: bytes) -> None:
        sig = short_hash(out.signature.encode())
        if sig in seen:
            return
        seen.add(sig)
        name = f"{out.kind}-{out.target}-{sig}"
        (findings / name).write_bytes(data)
        journal.write(json.dumps({"file": name, "kind": out.kind, "target": out.target,
                                  "signature": out.signature, "detail": out.detail}) + "\n")
        journal.flush()
        print(f"FINDING {name} {out.signature} {out.detail[:160]}", file=sys.stderr, flush=True)

    def one(data: bytes) -> None:
        out = run_input(data, targets)
        if out.kind in ("error", "hang"):
            record(out, data)

    # RSS bound: what the process holds once the seeds ran, + the slack the supervisor gives
    # (the request memory pool + 64 MiB); libFuzzer ends the process past it (out-of-memory).
    slack_mb = int(os.environ.get("WHERRY_FUZZ_RSS_SLACK_MB", "0"))
    argv = list(sys.argv)
    if slack_mb > 0:
        # libFuzzer checks the peak RSS (ru_maxrss), and a child's peak starts at its
        # parent's: started from a large process (a long pytest run), the worker's peak is
        # the parent's size before it runs one input. The bound is counted from that peak.
        argv.append(f"-rss_limit_mb={max(_rss_mb(), _peak_rss_mb()) + slack_mb}")
    atheris.Setup(argv, one)
    atheris.Fuzz()


def _peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _rss_mb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


if __name__ == "__main__":
    main()
