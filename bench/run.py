"""wherry benchmark: `python bench/run.py [--quick] [--json PATH]` (see bench/README.md).

Every row is measured in this run, on this machine, against brokers this script starts (free
loopback port, temporary data dir, stopped by PID). Rows:

  a   raw limit: loopback socket → file, 1 MiB size-prefixed frames (plain blocking sockets)
  b   broker ingest capacity: pre-encoded pipelined Produce requests (acks=1), ratio to (a)
  b2  the same with 100 B records (records/s)
  c1  confluent-kafka Producer, 100 B records;  c2  the same with 1 KiB records
  d0  raw limit: os.sendfile of the broker's segment files → loopback reader
  d3  broker consume capacity: pre-encoded pipelined Fetch requests of (c2)'s topic (ratio to d0)
  d1  confluent-kafka Consumer reading c1's topic;  d2  reading c2's topic (ratio to d0)
  e   produce latency p50/p99 at a fixed rate (acks=all, linger.ms=0)
  f1  startup: exec → first ApiVersions response;  f2  idle RSS;  f3  RSS after (c)
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `wherry` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BROKER_RUNTIME,
    MIB,
    PRETOUCH_MIB_PER_S,
    BenchError,
    Broker,
    Profiler,
    ServerWorker,
    api_versions_request,
    create_topic,
    decode_response,
    env_line,
    environment,
    finish,
    free_port,
    log,
    print_table,
    read_frame,
    run_worker,
    segment_files,
    settle_writeback,
    temp_dir,
)

PARTITIONS = 4


@dataclass(frozen=True, slots=True)
class Plan:
    """How much work each row does (`--quick` or full)."""

    pipe_duration_s: float
    ingest_connections: int
    ingest_in_flight: int
    small_records: int
    large_records: int
    latency_rate: int
    latency_duration_s: float
    startup_runs: int
    sendfile_bytes: int


FULL = Plan(
    pipe_duration_s=4.0, latency_duration_s=10.0, latency_rate=1000,
    small_records=2_000_000, large_records=500_000,
    ingest_connections=4, ingest_in_flight=4,
    startup_runs=5, sendfile_bytes=8192 * MIB,
)
QUICK = replace(
    FULL,
    pipe_duration_s=2.0, latency_duration_s=2.0,
    small_records=100_000, large_records=30_000,
    startup_runs=1, sendfile_bytes=512 * MIB,
)


@dataclass(slots=True)
class Row:
    id: str
    name: str
    metrics: dict[str, float]
    detail: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    def result_text(self) -> str:
        m = self.metrics
        parts = []
        if "mb_s" in m and "rec_s" in m:
            parts.append(f"{m['rec_s']:,.0f} rec/s  {m['mb_s']:,.1f} MB/s")
        elif "mb_s" in m:
            parts.append(f"{m['mb_s']:,.1f} MB/s")
        if "ratio" in m:
            parts.append(f"({m['ratio']:.2f}x)")
        if "p50_ms" in m:
            parts.append(f"p50 {m['p50_ms']:.2f} ms  p99 {m['p99_ms']:.2f} ms")
        if "ms" in m:
            parts.append(f"{m['ms']:.0f} ms")
        if "rss_mib" in m:
            parts.append(f"{m['rss_mib']:.1f} MiB")
        return "  ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "metrics": self.metrics,
            "detail": self.detail,
            "raw": self.raw,
        }


class Bench:
    def __init__(
        self, plan: Plan, base_dir: Path, overrides: list[str], log: Callable[[str], None]
    ):
        self.plan = plan
        self.base_dir = base_dir
        self.overrides = overrides
        self.log = log
        self.rows: dict[str, Row] = {}
        self.profile_dir: Path | None = None

    # --- helpers ---------------------------------------------------------------------------
    def _tmp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"wherry-bench-{name}-", dir=self.base_dir))

    @staticmethod
    def cpu_note(result: dict[str, Any], broker_cpu_s: float | None = None) -> str:
        """`broker CPU x%, client CPU y%` over the worker's measured window (100% = 1 core)."""
        elapsed = result["elapsed_s"]
        parts = []
        if broker_cpu_s is not None:
            result["broker_cpu_s"] = broker_cpu_s
            parts.append(f"broker CPU {broker_cpu_s / elapsed * 100:.0f}%")
        if "client_cpu_s" in result:
            parts.append(f"client CPU {result['client_cpu_s'] / elapsed * 100:.0f}%")
        return ", ".join(parts)

    def run_on(
        self, label: str, broker: Broker, role: str, params: dict[str, Any], timeout_s: float
    ) -> tuple[dict[str, Any], str]:
        """Run a worker against a broker; also return its CPU note. The broker's CPU time is
        taken over the whole worker run (the broker is idle while the worker process starts;
        its connect/warm-up requests are included) and divided by the measured window.
        With `--profile DIR` the broker is sampled by py-spy meanwhile."""
        cpu0 = broker.cpu_seconds()
        with Profiler(self.profile_dir, f"{label}-broker", broker.pid):
            r = run_worker(role, params, timeout_s)
        return r, self.cpu_note(r, broker.cpu_seconds() - cpu0)

    def add(self, row: Row) -> None:
        self.rows[row.id] = row
        self.log(f"  {row.id:<3} {row.name}: {row.result_text()}")

    # --- (a) + (b) ---------------------------------------------------------------------------
    def _pretouch(self, d: Path) -> dict[str, Any]:
        """What a/b/b2's client touches and frees just before its clock starts: as much memory
        as the run may write (`bench.common.pretouch_page_cache`)."""
        return {"dir": str(d), "mib": int(self.plan.pipe_duration_s * PRETOUCH_MIB_PER_S)}

    def pipe_and_ingest(self) -> None:
        plan = self.plan
        topic = "bench-ingest"
        load: dict[str, Any] = {
            "topic": topic,
            "partitions": PARTITIONS,
            "batch_bytes": MIB,
            "record_bytes": 1024,
            "acks": 1,
            "duration_s": plan.pipe_duration_s,
            "timeout_s": 60,
        }
        self.log("(a) raw loopback socket → file pipe")
        d = self._tmp("pipe")
        try:
            server = ServerWorker("raw_server", {"dir": str(d), "timeout_s": 60}, timeout_s=90)
            try:
                client = run_worker(
                    "raw_client",
                    {**load, "port": server.port, "pretouch": self._pretouch(d)},
                    timeout_s=90,
                )
                srv = server.result()
            finally:
                server.kill()
        finally:
            shutil.rmtree(d, ignore_errors=True)
        a = client["mb_s"]
        self.add(
            Row(
                "a",
                "raw limit: loopback socket → file, 1 conn",
                {"mb_s": a},
                f"{client['frames']} frames of {client['frame_bytes']} B in "
                f"{client['elapsed_s']:.1f} s; {self.cpu_note(client)}",
                {"client": client, "server": srv},
            )
        )

        self._ingest("b", load, a)
        self._ingest("b2", {**load, "topic": "bench-ingest-100b", "record_bytes": 100}, a)

    def _ingest(self, rid: str, load: dict[str, Any], a: float) -> None:
        """(b) / (b2): the lean Produce generator against a fresh broker."""
        plan = self.plan
        topic = load["topic"]
        size = load["record_bytes"]
        self.log(f"({rid}) broker ingest capacity, {size} B records")
        d = self._tmp("ingest")
        try:
            with Broker(d / "data", self.overrides) as broker:
                broker.start()
                create_topic(broker.bootstrap, topic, PARTITIONS)
                r, cpu = self.run_on(
                    rid,
                    broker,
                    "ingest",
                    {
                        **load,
                        "bootstrap": broker.bootstrap,
                        "connections": plan.ingest_connections,
                        "in_flight": plan.ingest_in_flight,
                        "pretouch": self._pretouch(d),
                    },
                    timeout_s=120,
                )
                written = sum(f.stat().st_size for f in segment_files(d / "data", topic))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        self.add(
            Row(
                rid,
                f"broker ingest: Produce, {size} B records, acks=1, "
                f"{plan.ingest_connections} conns x {plan.ingest_in_flight} in flight",
                {"rec_s": r["rec_s"], "mb_s": r["mb_s"], "ratio": r["mb_s"] / a},
                f"{r['requests']} requests ({r['req_s']:.0f}/s) of {r['records_per_request']} "
                f"records in {r['elapsed_s']:.1f} s; {written / MIB:.0f} MiB in segments; {cpu}",
                {"ingest": r, "segment_bytes": written},
            )
        )

    # --- (f) + (c) + (d) + (e) ---------------------------------------------------------------
    def startup_once(self, data_dir: Path) -> tuple[Broker, float]:
        """Exec a broker as `wherry server` starts by default (its console and metrics
        listener on, moved to a free loopback port) and poll it until an ApiVersions request
        is answered."""
        broker = Broker(data_dir, [*self.overrides, f"http.listeners=http://127.0.0.1:{free_port()}"])
        port = free_port()
        request = api_versions_request()
        t0 = broker.spawn(port)
        deadline = t0 + 30
        try:
            while True:
                now = time.perf_counter()
                if now > deadline or (broker.proc is not None and broker.proc.poll() is not None):
                    raise BenchError(
                        "broker did not answer ApiVersions:\n" + "".join(broker.output)
                    )
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                        s.sendall(request)
                        resp = decode_response(18, 3, read_frame(s))
                        elapsed_ms = (time.perf_counter() - t0) * 1000
                        broker.answer_cpu_ms = broker.cpu_seconds() * 1000
                    if int(resp.error_code) != 0:
                        raise BenchError(f"ApiVersions error {resp.error_code}")
                    break
                except (ConnectionRefusedError, ConnectionResetError, ConnectionError):
                    time.sleep(0.0005)
            broker.wait_ready(30)
        except BaseException:
            broker.stop()
            raise
        return broker, elapsed_ms

    def clients(self, only_startup: bool = False) -> None:
        d = self._tmp("clients")
        try:
            broker, data = self.startup(d)
            with broker:  # the last broker of (f) stays up for (c), (d), (e)
                if not only_startup:
                    self._produce_consume(broker, data)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def startup(self, d: Path) -> tuple[Broker, Path]:
        """(f1), (f2): fresh brokers started one after the other (an untimed one first, so
        the bytecode cache is warm); returns the last, still running, and its data dir."""
        plan = self.plan
        self.log("(f) startup")
        times: list[float] = []
        ready: list[float] = []
        cpu: list[float] = []  # the broker's CPU time when it answered: robust to a busy host
        bind_cpu: list[float] = []  # ... when its listeners were bound (its own log line)
        self.startup_once(d / "warmup")[0].stop()
        for i in range(plan.startup_runs):
            data = d / f"data{i}"
            broker, ms = self.startup_once(data)
            times.append(ms)
            cpu.append(broker.answer_cpu_ms)
            if broker.bind_cpu_ms is not None:
                bind_cpu.append(broker.bind_cpu_ms)
            if broker.ready_at is not None:
                ready.append((broker.ready_at - broker.spawned_at) * 1000)
            if i < plan.startup_runs - 1:
                broker.stop()
        time.sleep(1.0)
        idle = broker.rss_kib() / 1024
        self.add(
            Row(
                "f1",
                "startup: exec → first ApiVersions answered (`wherry server` defaults, console on)",
                {"ms": statistics.median(times)},
                f"median of {len(times)}: " + ", ".join(f"{t:.0f}" for t in times) + " ms; "
                f"start complete (ready line) median {statistics.median(ready):.0f} ms; "
                f"broker CPU at the answer median {statistics.median(cpu):.0f} ms"
                + (
                    f", at the bind median {statistics.median(bind_cpu):.0f} ms; "
                    if bind_cpu
                    else "; "
                )
                + ("bytecode cached" if BROKER_RUNTIME.pycache else "bytecode as the env says"),
                {
                    "runs_ms": times,
                    "ready_ms": ready,
                    "answer_cpu_ms": cpu,
                    "bind_cpu_ms": bind_cpu,
                },
            )
        )
        self.add(
            Row(
                "f2",
                "broker RSS idle after startup (no topics)",
                {"rss_mib": idle},
                "VmRSS",
            )
        )
        return broker, data

    def _produce_consume(self, broker: Broker, data: Path) -> None:
        plan = self.plan
        bs = broker.bootstrap
        sizes = (("c1", "d1", 100, plan.small_records), ("c2", "d2", 1024, plan.large_records))
        for cid, _, size, count in sizes:
            topic = f"bench-{size}b"
            create_topic(bs, topic, PARTITIONS)
            self.log(f"(c) confluent-kafka produce {count} x {size} B")
            r, cpu = self.run_on(
                cid,
                broker,
                "cf_produce",
                {
                    "bootstrap": bs,
                    "topic": topic,
                    "record_bytes": size,
                    "count": count,
                    "linger_ms": 5,
                    "batch_size": 1_000_000,
                    "timeout_s": 150,
                },
                timeout_s=180,
            )
            self.add(
                Row(
                    cid,
                    f"confluent-kafka produce {size} B (acks=all, linger 5 ms)",
                    {"rec_s": r["rec_s"], "mb_s": r["mb_s"]},
                    f"{count} records in {r['elapsed_s']:.2f} s; {cpu}",
                    r,
                )
            )
        after = broker.rss_kib() / 1024
        self.add(Row("f3", "broker RSS after (c)", {"rss_mib": after}, "VmRSS"))

        self.log("(d) raw sendfile limit")
        files = segment_files(data, "bench-1024b")
        log_bytes = sum(f.stat().st_size for f in files)
        server = ServerWorker(
            "sendfile_server",
            {"files": [str(f) for f in files], "min_bytes": plan.sendfile_bytes, "timeout_s": 60},
            timeout_s=90,
        )
        try:
            sf = run_worker("sendfile_client", {"port": server.port, "timeout_s": 60}, 90)
            srv = server.result()
        finally:
            server.kill()
        if sf["bytes"] != log_bytes * srv["passes"]:
            raise BenchError(
                f"sendfile moved {sf['bytes']} B, expected {srv['passes']} x {log_bytes}"
            )
        self.add(
            Row(
                "d0",
                "raw limit: os.sendfile of (c2) segments → socket",
                {"mb_s": sf["mb_s"]},
                f"{srv['passes']} x {log_bytes / MIB:.0f} MiB in {sf['elapsed_s']:.2f} s",
                {**sf, "passes": srv["passes"], "segment_bytes": log_bytes},
            )
        )
        self.log("(d3) lean consumer: pre-encoded Fetch requests")
        r, cpu = self.run_on(
            "d3",
            broker,
            "fetch_load",
            {
                "bootstrap": bs,
                "topic": "bench-1024b",
                "partitions": PARTITIONS,
                "connections": 1,
                "in_flight": plan.ingest_in_flight,
                "max_bytes": MIB,
                "duration_s": plan.pipe_duration_s,
                "timeout_s": 60,
            },
            timeout_s=120,
        )
        self.add(
            Row(
                "d3",
                f"broker consume: Fetch of (c2)'s {PARTITIONS} partitions, 1 conn x "
                f"{plan.ingest_in_flight} in flight (ratio to d0)",
                {"mb_s": r["mb_s"], "ratio": r["mb_s"] / sf["mb_s"]},
                f"{r['requests']} responses ({r['req_s']:.0f}/s), {r['passes']:.1f} passes "
                f"over the log in {r['elapsed_s']:.1f} s; {cpu}",
                r,
            )
        )
        for _, did, size, count in sizes:
            topic = f"bench-{size}b"
            seg = sum(f.stat().st_size for f in segment_files(data, topic))
            self.log(f"(d) confluent-kafka consume {count} x {size} B")
            r, cpu = self.run_on(
                did,
                broker,
                "cf_consume",
                {
                    "bootstrap": bs,
                    "topic": topic,
                    "partitions": PARTITIONS,
                    "expected": count,
                    "timeout_s": 150,
                },
                timeout_s=180,
            )
            log_mb_s = seg / r["elapsed_s"] / MIB
            self.add(
                Row(
                    did,
                    f"confluent-kafka consume {size} B (assign, from start)",
                    {"rec_s": r["rec_s"], "mb_s": r["mb_s"], "ratio": log_mb_s / sf["mb_s"]},
                    f"{count} records in {r['elapsed_s']:.2f} s; log read at {log_mb_s:.0f} MB/s; "
                    f"{cpu}",
                    {**r, "segment_bytes": seg, "log_mb_s": log_mb_s},
                )
            )

        self.log("(e) produce latency")
        topic = "bench-latency"
        create_topic(bs, topic, 1)
        # the GBs the rows before wrote go to disk first: while the kernel writes them back an
        # appender's latency is the disk's (bench/cluster.py's latency rows do the same)
        self.log(f"    page cache written back in {settle_writeback():.1f} s")
        r = run_worker(
            "cf_latency",
            {
                "bootstrap": bs,
                "topic": topic,
                "record_bytes": 100,
                "rate": plan.latency_rate,
                "duration_s": plan.latency_duration_s,
            },
            timeout_s=plan.latency_duration_s + 60,
        )
        self.add(
            Row(
                "e",
                f"produce latency, {plan.latency_rate}/s x 100 B (acks=all, linger 0)",
                {"p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]},
                f"{r['records']} records at {r['rate']:.0f}/s; max {r['max_ms']:.1f} ms;"
                f" client CPU {r['client_cpu_s'] / r['sent_s']:.0%}",
                r,
            )
        )


ORDER = ("a", "b", "b2", "c1", "c2", "d0", "d3", "d1", "d2", "e", "f1", "f2", "f3")


def render(env: dict[str, Any], rows: list[Row]) -> None:
    print(env_line(env))
    print_table(
        "wherry benchmark (MB = 2^20 bytes)",
        [(r.id, r.name, r.result_text(), r.detail) for r in rows],
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (~20 s) for smoke tests")
    ap.add_argument("--json", type=Path, help="also write the table as JSON to this path")
    ap.add_argument("--tmp-dir", type=Path, default=None, help="where brokers and files live")
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="K=V",
        help="broker config override for every broker started (repeatable)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample the broker with py-spy (if on PATH) during b, c and d; write stacks there",
    )
    ap.add_argument(
        "--only", choices=["f"], help="only these rows: f = the startup rows f1 and f2"
    )
    ap.add_argument(
        "--broker-tree",
        type=Path,
        default=BROKER_RUNTIME.tree,
        metavar="DIR",
        help="run brokers from this source tree (e.g. another worktree, for a before/after)",
    )
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="brokers compile their modules on every start if the environment says so "
        "(PYTHONDONTWRITEBYTECODE); by default they keep bytecode in the run's temp dir",
    )
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    env = environment()
    t0 = time.monotonic()
    with temp_dir("wherry-bench-", args.tmp_dir) as base:
        BROKER_RUNTIME.tree = args.broker_tree.resolve()
        BROKER_RUNTIME.pycache = None if args.no_bytecode_cache else base / "pycache"
        bench = Bench(plan, base, args.override, log)
        bench.profile_dir = args.profile
        if args.only != "f":
            bench.pipe_and_ingest()
        bench.clients(only_startup=args.only == "f")
    finish(env, t0)
    rows = [bench.rows[i] for i in ORDER if i in bench.rows]
    render(env, rows)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "quick": args.quick,
                    "duration_s": time.monotonic() - t0,
                    "rows": [r.to_json() for r in rows],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
