"""Sustained latency benchmark: `python bench/sustained.py [--quick] [--seconds N] [--json PATH]`
(bench/README.md).

One `wherry server` with its defaults (console and metrics on; a free loopback port, a
temporary data dir, stopped by PID) whose log keeps changing under a steady load, so that every
file operation a broker does in the background happens during the measurement:

  u1  acks=1:   produce latency p50 / p99 / p99.9 / max, 1,000 records/s x 100 B, linger.ms=0
  u2  acks=all: the same

The records are keyed (1,000 keys) and go to one partition of a topic with
`cleanup.policy=compact,delete`: it rolls a segment every `segment.bytes` (256 KiB: every 1-2 s
at this rate), retention (`retention.ms` 10 s, checked every second) deletes old segments, and
the cleaner (`log.cleaner.backoff.ms=1000`) compacts the rest. The detail gives what happened
during the run: segments rolled and deleted, cleaner passes (changes of the cleaner's
checkpoint), the event loop's lag from `/metrics` (wake-ups late by more than 20 ms, and
the histogram bucket that bounds the largest lag; the broker's stalls by what held them: its
own work, waiting for a CPU, or stopped -- blocked, waiting for the GIL, or not run by the
host --, and after the table the broker's log lines that tell each row's stalls), and the
share of Produce requests whose time
in the broker (Kafka's request TotalTimeMs) went past 1 ms and 2.5 ms.

With `--peer`, the same producer and load then run against the native peer (tansu, memory
storage: no files, so no background file work), rows t1 and t2: what the machine, the client
and the loopback alone give at this rate, measured in the same run.

Targets: p99 <= 2 ms, max <= 20 ms, and no event-loop lag over 20 ms.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `wherry` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BROKER_RUNTIME,
    Broker,
    create_topic,
    env_line,
    environment,
    finish,
    free_port,
    log,
    print_table,
    run_worker,
    scrape,
    settle_writeback,
    temp_dir,
)
from bench.peer_tansu import Tansu, tansu_unavailable_reason, tansu_version

Params = dict[str, Any]
TOPIC = "sustained"
RATE = 1000
KEYS = 1000
LAG_TARGET_MS = 20.0


@dataclass(frozen=True, slots=True)
class Plan:
    seconds: float = 60.0
    segment_bytes: int = 256 * 1024
    retention_ms: int = 10_000


FULL = Plan()
# Short, and small enough files that every kind of background work still happens in it.
QUICK = Plan(seconds=8.0, segment_bytes=64 * 1024, retention_ms=2_000)


@dataclass
class FileWatch:
    """Samples the partition's segment files and the cleaner's checkpoint every 100 ms."""

    data_dir: Path
    segments: dict[str, set[str]] = field(default_factory=dict)
    cleaner_points: list[str] = field(default_factory=list)
    at_start: dict[str, set[str]] = field(default_factory=dict)
    cleaner_at_start: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> None:
        names = {p.name for p in (self.data_dir / f"{TOPIC}-0").glob("*.log")}
        self.segments.setdefault(TOPIC, set()).update(names)
        checkpoint = self.data_dir / "cleaner-offset-checkpoint"
        try:
            text = checkpoint.read_text()
        except OSError:
            return
        point = next((ln for ln in text.splitlines() if ln.startswith(f"{TOPIC} 0 ")), None)
        if point is not None and (not self.cleaner_points or self.cleaner_points[-1] != point):
            self.cleaner_points.append(point)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def __enter__(self) -> FileWatch:
        self._sample()
        self.at_start = {t: set(s) for t, s in self.segments.items()}
        self.cleaner_at_start = len(self.cleaner_points)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def report(self) -> Params:
        now = {t: {p.name for p in (self.data_dir / f"{t}-0").glob("*.log")} for t in self.segments}
        return {
            "segments_rolled": {
                t: len(seen - self.at_start.get(t, set())) for t, seen in self.segments.items()
            },
            "segments_deleted": {t: len(seen - now[t]) for t, seen in self.segments.items()},
            "cleaner_passes": len(self.cleaner_points) - self.cleaner_at_start,
        }


_SAMPLE = re.compile(r'^wherry_event_loop_lag_ms_bucket\{le="([^"]+)"\} ([0-9.e+]+)$', re.M)
_MAX = re.compile(r"^wherry_event_loop_lag_max_ms ([0-9.e+]+)$", re.M)
_STALLS = re.compile(r'^wherry_event_loop_stalls_total\{cause="([a-z]+)"\} ([0-9.e+]+)$', re.M)


_PRODUCE = re.compile(
    r'^kafka_network_requestmetrics_totaltimems_bucket\{le="([^"]+)",request="Produce"\} '
    r"([0-9.e+]+)$",
    re.M,
)


def produce_times(text: str) -> dict[str, float]:
    """The broker's Produce total-time histogram (cumulative buckets by bound)."""
    return {le: float(n) for le, n in _PRODUCE.findall(text)}


def produce_over(before: dict[str, float], after: dict[str, float]) -> Params:
    """Of the run's Produce requests, the share whose time in the broker (frame read to answer
    encoded) went past 1 ms and past 2.5 ms: set beside the client's p99, it tells time spent
    handling requests from time spent before a request is read or after its answer is
    written."""
    total = after.get("+Inf", 0.0) - before.get("+Inf", 0.0)

    def over(le: str) -> float:
        within = after.get(le, 0.0) - before.get(le, 0.0)
        return (total - within) / total if total else 0.0

    return {"requests": total, "over_1ms": over("1.0"), "over_2_5ms": over("2.5")}


def loop_lag(metrics_url: str, text: str | None = None) -> tuple[dict[str, float], float]:
    """The loop-lag histogram's cumulative buckets and its last-minute maximum."""
    if text is None:
        text = scrape(metrics_url)
    buckets = {le: float(n) for le, n in _SAMPLE.findall(text)}
    found = _MAX.search(text)
    if not buckets or found is None:
        raise RuntimeError("the broker's /metrics has no event-loop lag")
    return buckets, float(found.group(1))


STALL_LINE = "the event loop woke"  # the broker's log line for a stall


def stall_lines(output: list[str]) -> list[str]:
    """The broker's stall lines in `output`."""
    return [line.rstrip() for line in output if STALL_LINE in line]


def stalls(text: str) -> dict[str, float]:
    """The broker's stall counters by cause (wake-ups late by 20 ms or more: "ran" -- its
    own work --, "waited" for a CPU, "stopped" -- blocked, waiting for the GIL, not run)."""
    return {cause: float(n) for cause, n in _STALLS.findall(text)}


def lag_during(before: dict[str, float], after: dict[str, float]) -> Params:
    """Wake-ups late by more than LAG_TARGET_MS in the run, and the smallest bucket bound that
    every lag of the run stayed within (`inf` when one went past the last bound)."""
    total = after["+Inf"] - before["+Inf"]
    bound = "+Inf"
    for le in sorted((b for b in after if b != "+Inf"), key=float):
        if after[le] - before[le] == total:
            bound = le
            break
    within = after.get(str(LAG_TARGET_MS), 0.0) - before.get(str(LAG_TARGET_MS), 0.0)
    return {"wakeups": total, "over_target": total - within, "max_within_ms": float(bound)}


def produce_at_rate(bootstrap: str, plan: Plan, acks: str) -> Params:
    """The confluent-kafka producer of the rows (its own process): RATE keyed records a second
    for the plan's seconds; its latency figures."""
    params: Params = {
        "bootstrap": bootstrap,
        "topic": TOPIC,
        "acks": acks,
        "keys": KEYS,
        "rate": RATE,
        "duration_s": plan.seconds,
        "flush_timeout_s": max(30.0, plan.seconds),
        "quiet": True,
    }
    return run_worker("cf_latency", params, plan.seconds * 10 + 60)


def measure(broker: Broker, metrics_url: str, plan: Plan, acks: str, rid: str) -> Params:
    settled_s = settle_writeback()
    log(f"({rid}) acks={acks}: {RATE}/s for {plan.seconds:.0f} s "
        f"(page cache written back in {settled_s:.1f} s first)")
    text = scrape(metrics_url)
    lag_before, _ = loop_lag(metrics_url, text)
    stalls_before = stalls(text)
    produce_before = produce_times(text)
    cpu_before = broker.cpu_seconds()
    lines_before = len(broker.output)
    with FileWatch(broker.data_dir) as watch:
        measured = produce_at_rate(broker.bootstrap, plan, acks)
    text = scrape(metrics_url)
    lag_after, recent_max = loop_lag(metrics_url, text)
    return {
        **measured,
        "acks": acks,
        "broker_cpu_s": broker.cpu_seconds() - cpu_before,
        "files": watch.report(),
        "loop_lag": {
            **lag_during(lag_before, lag_after),
            "last_minute_max_ms": recent_max,
            "stalls": {c: n - stalls_before.get(c, 0.0) for c, n in stalls(text).items()},
        },
        "produce_in_broker": produce_over(produce_before, produce_times(text)),
        # the broker's own account of its stalls (a line a minute at most)
        "stall_lines": stall_lines(broker.output[lines_before:]),
    }


def measure_peer(bootstrap: str, plan: Plan, acks: str, rid: str) -> Params:
    """The same producer and rate against the native peer (no files, no loop-lag metric)."""
    settle_writeback()
    log(f"({rid}) peer, acks={acks}: {RATE}/s for {plan.seconds:.0f} s")
    return {**produce_at_rate(bootstrap, plan, acks), "acks": acks}


def latency_cell(r: Params) -> str:
    return (f"p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  p99.9 {r['p999_ms']:.2f} ms  "
            f"max {r['max_ms']:.1f} ms")


def peer_row(rid: str, r: Params) -> tuple[str, str, str, str]:
    return (
        rid,
        f"acks={r['acks']}: the same load against the native peer ({tansu_version()}, memory "
        "storage: no segments, retention or cleaner)",
        latency_cell(r),
        f"{r['records']} records in {r['elapsed_s']:.0f} s; peer CPU "
        f"{100 * r['broker_cpu_s'] / r['elapsed_s']:.0f}% of a core",
    )


def row(rid: str, r: Params) -> tuple[str, str, str, str]:
    files, lag, inb = r["files"], r["loop_lag"], r["produce_in_broker"]
    return (
        rid,
        f"acks={r['acks']}: latency {RATE:,}/s x 100 B, linger 0, while segments roll, "
        "retention deletes and the cleaner compacts",
        latency_cell(r),
        f"{r['records']} records in {r['elapsed_s']:.0f} s; segments rolled "
        f"{files['segments_rolled'].get(TOPIC, 0)}, deleted "
        f"{files['segments_deleted'].get(TOPIC, 0)}, cleaner passes {files['cleaner_passes']}; "
        "broker CPU "
        f"{100 * r['broker_cpu_s'] / r['elapsed_s']:.0f}% of a core; event loop: "
        f"{lag['over_target']:.0f} of {lag['wakeups']:.0f} wake-ups late by more than "
        f"{LAG_TARGET_MS:.0f} ms, largest <= {lag['max_within_ms']:g} ms (last minute's max "
        f"{lag['last_minute_max_ms']:.1f} ms), stalls by what held them: "
        + ", ".join(f"{c} {n:.0f}" for c, n in lag["stalls"].items())
        + "; Produce time in the broker over 1 ms "
        f"{100 * inb['over_1ms']:.2f}%, over 2.5 ms {100 * inb['over_2_5ms']:.2f}% "
        f"of {inb['requests']:.0f}",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (what the smoke test runs)")
    ap.add_argument("--seconds", type=float, help="length of each row's run (default 60)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this path")
    ap.add_argument("--tmp-dir", type=Path, default=None, help="where the data dir lives")
    ap.add_argument("--broker-tree", type=Path, metavar="DIR",
                    help="run the broker from this source tree (another worktree, for a "
                    "before/after); the client and this script stay on this one")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config override on top of the bench's (repeatable), e.g. "
                    "log.cleaner.enable=false to see what the cleaner costs")
    ap.add_argument("--peer", action="store_true",
                    help="then the same load against the native peer, tansu (rows t1, t2; "
                    "needs the 'bench' extra)")
    args = ap.parse_args(argv)
    if args.peer and (reason := tansu_unavailable_reason()) is not None:
        ap.error(reason)
    if args.broker_tree:
        BROKER_RUNTIME.tree = args.broker_tree.resolve()
    plan = QUICK if args.quick else FULL
    if args.seconds:
        plan = Plan(args.seconds, plan.segment_bytes, plan.retention_ms)
    env = environment()
    t0 = time.monotonic()
    http_port = free_port()
    overrides = [
        f"http.listeners=http://127.0.0.1:{http_port}",  # the defaults: console and /metrics on
        "log.retention.check.interval.ms=1000",
        "log.cleaner.backoff.ms=1000",
        *args.set,
    ]
    results: dict[str, Params] = {}
    with (
        temp_dir("wherry-bench-sustained-", args.tmp_dir) as base,
        Broker(base / "data", overrides) as broker,
    ):
        broker.start()
        create_topic(broker.bootstrap, TOPIC, 1, {
            "cleanup.policy": "compact,delete",
            "segment.bytes": str(plan.segment_bytes),
            "retention.ms": str(plan.retention_ms),
            "min.cleanable.dirty.ratio": "0.1",
        })
        url = f"http://127.0.0.1:{http_port}/metrics"
        for rid, acks in (("u1", "1"), ("u2", "all")):
            results[rid] = measure(broker, url, plan, acks, rid)
    peer: dict[str, Params] = {}
    if args.peer:
        with Tansu().start() as tansu:
            create_topic(tansu.bootstrap, TOPIC, 1)
            for rid, acks in (("t1", "1"), ("t2", "all")):
                cpu_before = tansu.cpu_seconds()
                peer[rid] = measure_peer(tansu.bootstrap, plan, acks, rid)
                peer[rid]["broker_cpu_s"] = tansu.cpu_seconds() - cpu_before
    finish(env, t0)
    print(env_line(env))
    print_table(
        "wherry sustained latency: one broker (defaults), logs rolling, retention and cleaner "
        "running" + (f" (set: {', '.join(args.set)})" if args.set else ""),
        [row(rid, r) for rid, r in results.items()]
        + [peer_row(rid, r) for rid, r in peer.items()],
    )
    for rid, r in results.items():
        for line in r["stall_lines"]:
            print(f"{rid} stall: {line}")
    if args.json:
        args.json.write_text(json.dumps(
            {"env": env, "quick": args.quick, "plan": vars_of(plan), "set": args.set,
             "rows": [{"id": rid, "raw": r} for rid, r in {**results, **peer}.items()]},
            indent=2,
        ))
    return 0


def vars_of(plan: Plan) -> Params:
    return {"seconds": plan.seconds, "segment_bytes": plan.segment_bytes,
            "retention_ms": plan.retention_ms}


if __name__ == "__main__":
    sys.exit(main())
