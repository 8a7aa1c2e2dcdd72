"""Replication cost benchmark: `python bench/cluster.py [--quick] [--dev] [--json PATH]`.

In one run, on this machine, against brokers this script starts (free loopback ports,
temporary data dirs, every process stopped by its PID):

  s1  single broker, acks=1, confluent-kafka Producer, 100 B records
  s2  the same with 1 KiB records
  r1  3 broker processes on a real ZooKeeper (`wherry server --zookeeper`, `ZkCluster`),
      topic RF 3 with min.insync.replicas=2, acks=all, 100 B records
  r2  the same with 1 KiB records
  x1, x2  the ratios r1/s1 and r2/s2 (records/s); the runs of s and r alternate, both
      targets up at once, so the two sides of a ratio see the same machine load
      Each s, r and p run's worker, connected and just before its clock starts, touches and
      frees as much memory as the run will write (`--no-pretouch` skips it): on this
      VM, memory the host has not backed yet (or has taken back, 2 s after the guest freed
      it) costs 5-15x to write into (see bench.common.pretouch_page_cache).
      The s and r rows show the brokers' CPU per MB split into user and system time (read
      by the worker as its clock starts and stops, as p1 and p3 count only their timed
      run), the client's, and how many of the machine's cores the run kept busy.
  p1  raw ceiling of an acks=1 produce's byte path, no broker code: loopback socket →
      recv_into → pwrite, 1 MiB chunks (MiB/s, CPU ms per MiB of the receiving side's
      threads; the sending thread stands for the client and is not counted)
  p3  the same plus RF 3's: os.sendfile of each written range to two follower sockets, each
      recv_into → pwrite to its own file
  px  p3/p1, and the bound it puts on x2: r2 cannot beat 2 cores / (client CPU per MB of r2
      + p3's CPU per MiB), i.e. brokers that did nothing but the raw byte path; in brackets,
      x2 if the single broker of s2 did nothing but its raw path (p1) either; and what
      x2 >= 0.6x asks of r2's brokers: at most s2's CPU per MB / 0.6 - r2's client's, and
      how much of that the raw path leaves for the three brokers' own code; and a model:
      x2 with a core per broker (s2's broker CPU per MB / r2's busiest broker's)
  sl1 single broker, acks=1: produce latency p50/p99 at 1000 records/s, linger.ms=0
  rl1 3 brokers, RF 3, acks=all: the same
  sl2, rl2  the same at 100 records/s
  sl3, rl3  the same at 10,000 records/s with linger.ms=5
  i1  10,000 partitions RF 3 on 3 broker processes (ZooKeeper): CreateTopics → every ISR full
  i2  the same cluster idle: each broker's CPU (% of a core over 30 s, /proc/PID/stat), RSS
  i3  a Metadata v12 answer for every topic of that cluster from one broker: round trip and
      broker CPU per request (after the first, whose time the detail gives)
  f1  kill -9 the controller: time until every broker's metadata shows a new leader for
      every partition it led (and the part of it after ZooKeeper dropped its session)

`--dev` runs the RF 3 rows on `wherry dev --brokers 3` (three brokers in ONE child process,
one event loop, embedded store) instead of three processes on ZooKeeper.

Every client runs in a process of its own (`python -m bench.workers ROLE JSON`, bench/run.py's
confluent-kafka workers), so the orchestrator, the brokers and the load generator never share a
GIL.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `wherry` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REPO_ROOT,
    BenchError,
    Broker,
    cpu_seconds,
    create_topic,
    env_line,
    environment,
    finish,
    log,
    print_table,
    run_worker,
    settle_writeback,
    stop_pid,
    temp_dir,
)

PARTITIONS = 3  # one leader per broker on the 3-broker cluster
X2_TARGET = 0.6  # issue 15: RF 3 acks=all / single acks=1 throughput, 1 KiB records
LAG_MS = 10_000
Params = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    small_records: int
    large_records: int
    latency_rates: tuple[int, ...]
    latency_duration_s: float
    repeats: int
    linger_rate: int = 10_000
    linger_ms: int = 5
    idle_partitions: int = 10_000
    idle_seconds: float = 30
    idle_session_timeout_ms: int = 6_000  # zookeeper.session.timeout.ms of the idle cluster
    raw_mib: int = 300  # bytes of each raw-path run (rows p1, p3)
    pretouch: bool = True  # see bench.common.pretouch_page_cache


FULL = Plan(
    small_records=500_000,
    large_records=300_000,
    latency_rates=(1000, 100),
    latency_duration_s=10,
    repeats=3,
)
QUICK = replace(
    FULL,
    small_records=50_000,
    large_records=15_000,
    latency_duration_s=3,
    repeats=1,
    idle_partitions=2_000,
    idle_seconds=10,
    raw_mib=50,
)


# ------------------------------------------------------------------------------- targets


@dataclass
class Target:
    """Where a row runs: a bootstrap string, the broker PIDs (for CPU), acks, RF."""

    name: str
    bootstrap: str
    pids: list[int]
    acks: str
    replication_factor: int

    def minor_faults(self) -> int:
        """Minor page faults of the target's broker processes so far (fresh memory touched)."""
        return sum(_minor_faults(pid) for pid in self.pids)

    def create_topic(self, name: str, partitions: int) -> None:
        """CreateTopics v7 (min.insync.replicas=2 when replicated), then wait until every
        partition has a leader and a full ISR."""
        from wherry.testing.cluster import wait_until
        from wherry.testing.metadata_probe import fetch_metadata

        configs = {"min.insync.replicas": "2"} if self.replication_factor > 1 else {}
        first = self.bootstrap.split(",")[0]
        create_topic(first, name, partitions, configs, self.replication_factor)

        def ready() -> bool:
            for address in self.bootstrap.split(","):
                parts = fetch_metadata(address, [name]).partitions(name)
                if len(parts) != partitions:
                    return False
                for pv in parts.values():
                    if pv.leader < 0 or len(pv.isr) != self.replication_factor:
                        return False
            return True

        if not wait_until(ready, 30):
            raise BenchError(f"topic {name} not online with full ISRs after 30 s")


@contextmanager
def single_broker(base: Path) -> Iterator[Target]:
    with Broker(base / "single") as broker:
        broker.start()
        yield Target("single broker, acks=1", broker.bootstrap, [broker.pid], "1", 1)


def _cluster_overrides() -> dict[str, str]:
    return {
        "replica.lag.time.max.ms": str(LAG_MS),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
    }


@contextmanager
def zk_cluster(base: Path) -> Iterator[Target]:
    from wherry.testing.cluster import ZkCluster, wait_until
    from wherry.testing.zookeeper import ZooKeeperServer

    reason = ZooKeeperServer.unavailable_reason()
    if reason is not None:
        raise BenchError(f"ZooKeeper is not available ({reason}); use --dev")
    with ZkCluster(
        base / "zk", brokers=3, overrides=_cluster_overrides(), session_timeout_ms=10_000
    ) as cluster:
        if not wait_until(
            lambda: set(cluster.metadata(0).brokers) == {0, 1, 2}, 30
        ):  # every broker registered and known
            raise BenchError("the ZooKeeper cluster did not come up")
        yield Target(
            "3 broker processes (ZooKeeper), RF 3, acks=all",
            cluster.bootstrap,
            [cluster.pid(b) for b in range(3)],
            "all",
            3,
        )


@contextmanager
def dev_cluster(base: Path) -> Iterator[Target]:
    """`wherry dev --brokers 3` as a child process (3 brokers on one event loop)."""
    cmd = [sys.executable, "-m", "wherry", "dev", "--brokers", "3", "--base-port", "0"]
    cmd += ["--dir", str(base / "dev"), "--log-level", "WARNING"]
    for k, v in _cluster_overrides().items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    ready = threading.Event()
    found: list[str] = []
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if len(output) < 2000:
                output.append(line)
            m = re.search(r"bootstrap servers (\S+),", line)
            if m:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(60) or not found:
            raise BenchError("wherry dev did not start:\n" + "".join(output[-40:]))
        yield Target(
            "wherry dev --brokers 3 (one process), RF 3, acks=all", found[0], [proc.pid], "all", 3
        )
    finally:
        stop_pid(proc)


# ------------------------------------------------------------------------------- rows


@dataclass
class Row:
    id: str
    name: str
    result: str
    detail: str
    raw: Params


class Bench:
    def __init__(self, plan: Plan, log: Callable[[str], None], scratch: Path | None = None) -> None:
        self.plan = plan
        self.log = log
        self.rows: dict[str, Row] = {}
        self.scratch = scratch  # where workers pre-touch page cache (None: never)

    def _pretouch(self, mib: int) -> Params:
        """Worker params that make the worker pre-touch `mib` MiB of page cache right before
        its clock starts (see `pretouch_page_cache`); none when pre-touching is off."""
        if not self.plan.pretouch or self.scratch is None:
            return {}
        return {"pretouch": {"dir": str(self.scratch), "mib": mib}}

    def _log_pretouch(self, mib: int, result: Params) -> None:
        if "pretouch_s" in result:
            self.log(f"    pre-touched {mib:,} MiB of page cache in {result['pretouch_s']:.2f} s")

    def add(self, row: Row) -> None:
        self.rows[row.id] = row
        self.log(f"  {row.id:<3} {row.name}: {row.result}")

    def throughput(self, single: Target, cluster: Target) -> None:
        """s1, s2, r1, r2: for each record size, runs on the single broker and on the cluster
        alternate (s, r, s, r, ...), so both see the same machine load (other processes on
        this 2-core machine come and go); the best run of each counts."""
        plan = self.plan
        for n, size, count in ((1, 100, plan.small_records), (2, 1024, plan.large_records)):
            topics = {}
            for prefix, target in (("s", single), ("r", cluster)):
                topics[prefix] = f"bench-{prefix}-{size}b"
                target.create_topic(topics[prefix], PARTITIONS)
            runs: dict[str, list[Params]] = {"s": [], "r": []}
            for rep in range(plan.repeats):
                for prefix, target in (("s", single), ("r", cluster)):
                    rid = f"{prefix}{n}"
                    self.log(f"({rid}) {target.name}: produce {count} x {size} B, run {rep + 1}")
                    # what the run writes on all its replicas, and a quarter more
                    mib = count * size * target.replication_factor * 5 // 4 // 2**20
                    r = self._produce_run(target, topics[prefix], size, count, self._pretouch(mib))
                    self._log_pretouch(mib, r)
                    runs[prefix].append(r)
            for prefix, target in (("s", single), ("r", cluster)):
                self._throughput_row(f"{prefix}{n}", target, size, count, runs[prefix])

    def _produce_run(
        self, target: Target, topic: str, size: int, count: int, extra: Params
    ) -> Params:
        faults0 = target.minor_faults()
        load0 = os.getloadavg()[0]
        r = run_worker(
            "cf_produce",
            {
                "bootstrap": target.bootstrap,
                "topic": topic,
                "acks": target.acks,
                "record_bytes": size,
                "count": count,
                "timeout_s": 300,
                "broker_pids": target.pids,
                **extra,
            },
            timeout_s=360,
        )
        r["broker_minor_faults"] = target.minor_faults() - faults0
        # read by the worker as its clock starts and stops: not the worker's own start, its
        # connection set-up or its pre-touch, during which the brokers idle
        spent: list[tuple[float, float]] = r["broker_cpu_split_s"]
        r["broker_user_s"] = sum(u for u, _ in spent)
        r["broker_sys_s"] = sum(k for _, k in spent)
        r["broker_cpu_s"] = r["broker_user_s"] + r["broker_sys_s"]
        r["broker_cpu_each_s"] = [u + k for u, k in spent]  # one per broker process
        r["loadavg_1m"] = [load0, os.getloadavg()[0]]
        return r

    def _throughput_row(
        self, rid: str, target: Target, size: int, count: int, runs: list[Params]
    ) -> None:
        best = max(runs, key=lambda r: r["rec_s"])
        mib = best["bytes"] / 2**20
        self.add(
            Row(
                rid,
                f"{target.name}: produce {size} B",
                f"{best['rec_s']:,.0f} rec/s  {best['mb_s']:,.1f} MB/s",
                f"best of {len(runs)} runs of {count} records ("
                + ", ".join(f"{r['rec_s'] / 1000:,.0f}k" for r in runs)
                + f" rec/s); best: {best['elapsed_s']:.2f} s, broker CPU "
                f"{best['broker_cpu_s'] / best['elapsed_s'] * 100:.0f}% (all broker "
                f"processes, {best['broker_cpu_s'] * 1000 / mib:.1f} ms per MB: user "
                f"{best['broker_user_s'] * 1000 / mib:.1f}, system "
                f"{best['broker_sys_s'] * 1000 / mib:.1f}), client CPU "
                f"{best['client_cpu_s'] / best['elapsed_s'] * 100:.0f}% "
                f"({best['client_cpu_s'] * 1000 / mib:.1f} ms per MB); cores busy "
                f"{(best['broker_cpu_s'] + best['client_cpu_s']) / best['elapsed_s']:.2f} of "
                f"{os.cpu_count()}; load {best['loadavg_1m'][0]:.1f}",
                {**best, "runs": runs},
            )
        )

    def raw_ceiling(self) -> None:
        """p1, p3, px (see the module docstring); runs alternate, best of `repeats`."""
        runs: dict[int, list[Params]] = {0: [], 2: []}
        for rep in range(self.plan.repeats):
            for followers in runs:
                self.log(f"(p) raw byte path, {followers} followers, run {rep + 1}")
                mib = self.plan.raw_mib * (1 + followers) * 5 // 4
                params = {"total_mib": self.plan.raw_mib, "followers": followers}
                r = run_cluster_worker("raw_path", {**params, **self._pretouch(mib)}, 120)
                self._log_pretouch(mib, r)
                runs[followers].append(r)
        best = {f: max(rs, key=lambda r: r["mib_s"]) for f, rs in runs.items()}
        cpu = {f: min(r["cpu_ms_per_mib"] for r in rs) for f, rs in runs.items()}
        for rid, f, what in (("p1", 0, "acks=1"), ("p3", 2, "RF 3 (+2 sendfile followers)")):
            self.add(
                Row(
                    rid,
                    f"raw byte path of an {what} produce, no broker code",
                    f"{best[f]['mib_s']:,.0f} MB/s  {cpu[f]:.2f} ms CPU per MB",
                    f"best of {len(runs[f])} runs of {self.plan.raw_mib} MiB ("
                    + ", ".join(f"{r['mib_s']:,.0f}" for r in runs[f])
                    + " MB/s)",
                    {"best": best[f], "cpu_ms_per_mib": cpu[f], "runs": runs[f]},
                )
            )
        r2, s2 = self.rows["r2"].raw, self.rows["s2"].raw

        def per_mib(r: Params, key: str) -> float:
            return float(r[key]) * 1000 / (r["bytes"] / 2**20)

        client = per_mib(r2, "client_cpu_s")
        s2_client, s2_broker = per_mib(s2, "client_cpu_s"), per_mib(s2, "broker_cpu_s")
        s2_cpu = s2_client + s2_broker
        r2_brokers = per_mib(r2, "broker_cpu_s")
        r2_user, r2_sys = per_mib(r2, "broker_user_s"), per_mib(r2, "broker_sys_s")
        cores = os.cpu_count() or 1
        bound = cores * 1000 / (client + cpu[2])
        x2_bound = s2_cpu / (client + cpu[2])
        # the same with the single broker reduced to its raw path too: the ratio two brokers
        # that cost nothing beyond their bytes' system calls would give
        x2_raw_bound = (s2_client + cpu[0]) / (client + cpu[2])
        # what x2 >= 0.6 asks of r2's three brokers, both runs CPU-bound: r2's CPU per MB (its
        # client's + its brokers') at most s2's / 0.6
        budget = s2_cpu / X2_TARGET - client
        # a model, not a measurement: brokers on cores (machines) of their own, as a cluster
        # runs, and clients that keep up; then the busiest broker sets the pace
        busiest = max(r2.get("broker_cpu_each_s") or [r2["broker_cpu_s"]]) * 1000
        busiest /= r2["bytes"] / 2**20
        per_broker = s2_broker / busiest
        detail = [
            f"CPU per MB of the broker side {cpu[2]:.2f} vs {cpu[0]:.2f} ms (leader and follower"
            " threads; the sending thread, the client's part, not counted).",
            f"CPU-bound, x2 is at most s2's CPU per MB (client + broker: {s2_cpu:.2f} ms) / r2's"
            f" if its brokers did nothing but the raw RF 3 path (client {client:.2f} +"
            f" {cpu[2]:.2f} ms); on {cores} cores r2 <= {bound:,.0f} MB/s.",
            "If the single broker, too, did nothing but its raw path (client"
            f" {s2_client:.2f} + {cpu[0]:.2f} ms), x2 would be {x2_raw_bound:.2f}x.",
            f"x2 >= {X2_TARGET}x needs r2's client + brokers <= {s2_cpu / X2_TARGET:.2f} ms per"
            f" MB: brokers <= {budget:.2f} ms (measured {r2_brokers:.2f}: user {r2_user:.2f},"
            f" system {r2_sys:.2f}). The raw path alone takes {cpu[2]:.2f}, leaving"
            f" {budget - cpu[2]:.2f} ms for the three brokers' own code (measured"
            f" {r2_brokers - cpu[2]:.2f}; s2's one broker beyond its raw path:"
            f" {s2_broker - cpu[0]:.2f}). Their system time alone leaves"
            f" {budget - r2_sys:.2f} ms of user time (s2's broker spent"
            f" {per_mib(s2, 'broker_user_s'):.2f}).",
            f"Per broker: r2's busiest broker process spent {busiest:.2f} ms per MB, s2's"
            f" broker {s2_broker:.2f}; with a core (or a machine) for each broker and clients"
            f" that keep up, x2 would be about {per_broker:.2f}x (a model from these CPU"
            " figures, not a run).",
        ]
        self.add(
            Row(
                "px",
                "raw RF 3 / raw acks=1 path, and the bound on x2 it implies",
                f"{best[2]['mib_s'] / best[0]['mib_s']:.2f}x  x2 <= {x2_bound:.2f}x "
                f"({x2_raw_bound:.2f}x); x2 {X2_TARGET}x needs r2 brokers <= {budget:.2f} ms "
                f"per MB (measured {r2_brokers:.2f})",
                " ".join(detail),
                {
                    "ratio": best[2]["mib_s"] / best[0]["mib_s"],
                    "x2_bound": x2_bound,
                    "x2_raw_bound": x2_raw_bound,
                    "r2_bound_mb_s": bound,
                    "r2_brokers_budget_ms_per_mb": budget,
                    "r2_brokers_ms_per_mb": r2_brokers,
                    "r2_brokers_user_ms_per_mb": r2_user,
                    "r2_brokers_sys_ms_per_mb": r2_sys,
                    "r2_busiest_broker_ms_per_mb": busiest,
                    "x2_core_per_broker_model": per_broker,
                },
            )
        )

    def latency(self, target: Target, prefix: str) -> None:
        plan = self.plan
        topic = f"bench-{prefix}-latency"
        target.create_topic(topic, 1)
        for i, rate in enumerate(plan.latency_rates):
            rid = f"{prefix}l{i + 1}"
            settled_s = settle_writeback()
            self.log(f"({rid}) {target.name}: latency at {rate}/s "
                     f"(page cache written back in {settled_s:.1f} s first)")
            r = run_worker(
                "cf_latency",
                {
                    "bootstrap": target.bootstrap,
                    "topic": topic,
                    "acks": target.acks,
                    "rate": rate,
                    "duration_s": plan.latency_duration_s,
                    "flush_timeout_s": max(30.0, plan.latency_duration_s * 5),
                    "quiet": True,
                },
                timeout_s=plan.latency_duration_s * 10 + 60,
            )
            self.add(
                Row(
                    rid,
                    f"{target.name}: latency {rate}/s x 100 B, linger 0",
                    f"p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms",
                    f"{r['records']} records, delivered at {r['records'] / r['elapsed_s']:.0f}/s;"
                    f" max {r['max_ms']:.1f} ms; client CPU {_client_cpu(r)}",
                    r,
                )
            )
        rid = f"{prefix}l{len(plan.latency_rates) + 1}"
        settle_writeback()
        rate, linger = plan.linger_rate, plan.linger_ms
        self.log(f"({rid}) {target.name}: latency at {rate}/s, linger.ms={linger}")
        r = run_cluster_worker(
            "latency",
            {
                "bootstrap": target.bootstrap,
                "topic": topic,
                "acks": target.acks,
                "rate": rate,
                "linger_ms": linger,
                "duration_s": plan.latency_duration_s,
                "flush_timeout_s": max(30.0, plan.latency_duration_s * 5),
            },
            timeout_s=plan.latency_duration_s * 10 + 60,
        )
        self.add(
            Row(
                rid,
                f"{target.name}: latency {rate:,}/s x 100 B, linger {linger}",
                f"p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms",
                f"{r['records']} records, delivered at {r['rate']:.0f}/s; max {r['max_ms']:.1f} ms;"
                f" client CPU {_client_cpu(r)}",
                r,
            )
        )

    def ratios(self) -> None:
        for size, (s, r) in ((100, ("s1", "r1")), (1024, ("s2", "r2"))):
            a, b = self.rows[s].raw, self.rows[r].raw
            self.add(
                Row(
                    f"x{s[-1]}",
                    f"ratio RF 3 acks=all / single acks=1, {size} B",
                    f"{b['rec_s'] / a['rec_s']:.2f}x",
                    f"{b['rec_s']:,.0f} / {a['rec_s']:,.0f} rec/s",
                    {"ratio": b["rec_s"] / a["rec_s"]},
                )
            )

    def rf3_efficiency(self, cluster: Target) -> None:
        """r2 and p3 alone (`--rows rf3`), runs alternating, and e3: r2's brokers' CPU per MB
        over p3's. CPU per MB is the figure, not wall time: each side's best (lowest) run
        counts."""
        plan = self.plan
        size, count = 1024, plan.large_records
        topic = "bench-r-1024b"
        cluster.create_topic(topic, PARTITIONS)
        self.log(f"    broker PIDs {cluster.pids} (attach a profiler to them)")
        r_runs: list[Params] = []
        p_runs: list[Params] = []
        for rep in range(plan.repeats):
            self.log(f"(r2) {cluster.name}: produce {count} x {size} B, run {rep + 1}")
            mib = count * size * cluster.replication_factor * 5 // 4 // 2**20
            r = self._produce_run(cluster, topic, size, count, self._pretouch(mib))
            self._log_pretouch(mib, r)
            self.log(
                f"    {_brokers_ms_per_mb(r):.2f} ms broker CPU per MB,"
                f" {r['broker_minor_faults'] / (r['bytes'] / 2**20):.0f} page faults per MB"
            )
            r_runs.append(r)
            self.log(f"(p3) raw byte path, 2 followers, run {rep + 1}")
            mib = plan.raw_mib * 3 * 5 // 4
            params = {"total_mib": plan.raw_mib, "followers": 2}
            p = run_cluster_worker("raw_path", {**params, **self._pretouch(mib)}, 120)
            self._log_pretouch(mib, p)
            self.log(f"    {p['cpu_ms_per_mib']:.2f} ms CPU per MB")
            p_runs.append(p)
        self._throughput_row("r2", cluster, size, count, r_runs)
        best_p = max(p_runs, key=lambda r: r["mib_s"])
        p3 = min(r["cpu_ms_per_mib"] for r in p_runs)
        self.add(
            Row(
                "p3",
                "raw byte path of an RF 3 (+2 sendfile followers) produce, no broker code",
                f"{best_p['mib_s']:,.0f} MB/s  {p3:.2f} ms CPU per MB",
                f"best of {len(p_runs)} runs of {plan.raw_mib} MiB ("
                + ", ".join(f"{r['cpu_ms_per_mib']:.2f}" for r in p_runs)
                + " ms per MB)",
                {"best": best_p, "cpu_ms_per_mib": p3, "runs": p_runs},
            )
        )
        r2 = min(_brokers_ms_per_mb(r) for r in r_runs)
        self.add(
            Row(
                "e3",
                "r2's brokers' CPU per MB / p3's",
                f"{r2 / p3:.2f}x",
                f"{r2:.2f} / {p3:.2f} ms per MB (lowest run of each; r2 runs: "
                + ", ".join(f"{_brokers_ms_per_mb(r):.2f}" for r in r_runs)
                + " ms, load "
                + ", ".join(f"{r['loadavg_1m'][0]:.1f}" for r in r_runs)
                + "; brokers' minor page faults per MB "
                + ", ".join(
                    f"{r['broker_minor_faults'] / (r['bytes'] / 2**20):.0f}" for r in r_runs
                )
                + ")",
                {"ratio": r2 / p3, "r2_brokers_ms_per_mb": r2, "p3_ms_per_mb": p3},
            )
        )

    # -- idle partitions and failover ------------------------------------------------------
    def idle(self, base: Path) -> None:
        """i1, i2, i3, f1 on a fresh 3-process ZooKeeper cluster (see the module docstring)."""
        from wherry.testing.cluster import ZkCluster, wait_until
        from wherry.testing.zookeeper import ZooKeeperServer

        reason = ZooKeeperServer.unavailable_reason()
        if reason is not None:
            raise BenchError(f"ZooKeeper is not available ({reason})")
        plan = self.plan
        n = plan.idle_partitions
        per_topic = min(n, 1000)
        topics = {f"idle-{i}": min(per_topic, n - i * per_topic) for i in range(-(-n // per_topic))}
        with ZkCluster(
            base / "idle",
            brokers=3,
            overrides=_cluster_overrides(),
            session_timeout_ms=plan.idle_session_timeout_ms,
            start_timeout_s=60,
        ) as cluster:
            if not wait_until(lambda: set(cluster.metadata(0).brokers) == {0, 1, 2}, 30):
                raise BenchError("the ZooKeeper cluster did not come up")
            pids = {b: cluster.pid(b) for b in range(3)}
            self.log(f"(i1) creating {n:,} partitions RF 3 in {len(topics)} topics")
            t0 = time.monotonic()
            for name, count in topics.items():
                _create_big_topic(cluster.address(0), name, count)
            created = time.monotonic() - t0
            full = _wait_full_isr(cluster, topics, timeout_s=max(120.0, n / 20))
            self.add(
                Row(
                    "i1",
                    f"{n:,} partitions RF 3, 3 broker processes: create → every ISR full",
                    f"{full:.1f} s",
                    f"CreateTopics answered after {created:.1f} s; {n:,} replicas per broker",
                    {"seconds": full, "create_s": created, "partitions": n},
                )
            )
            time.sleep(min(5.0, plan.idle_seconds))  # settle: checkpoints, first expiry checks
            self.log(f"(i2) idle for {plan.idle_seconds:.0f} s")
            c0 = {b: cpu_seconds(pid) for b, pid in pids.items()}
            t1 = time.monotonic()
            time.sleep(plan.idle_seconds)
            dt = time.monotonic() - t1
            cpu = {b: (cpu_seconds(pid) - c0[b]) / dt * 100 for b, pid in pids.items()}
            rss = {b: rss_mb(pid) for b, pid in pids.items()}
            self.add(
                Row(
                    "i2",
                    f"{n:,} partitions RF 3 idle: CPU and RSS per broker",
                    f"max {max(cpu.values()):.1f}% of a core  max {max(rss.values()):.0f} MB",
                    "; ".join(
                        f"broker {b}: {cpu[b]:.1f}% CPU, {rss[b]:.0f} MB RSS" for b in sorted(cpu)
                    )
                    + f" (over {dt:.0f} s)",
                    {
                        "cpu_pct": cpu,
                        "rss_mb": rss,
                        "max_cpu_pct": max(cpu.values()),
                        "max_rss_mb": max(rss.values()),
                    },
                )
            )
            self._metadata_answer(cluster, pids[0], n)
            self._failover(cluster, topics)

    def _metadata_answer(self, cluster: Any, pid: int, n: int) -> None:
        """i3: one broker's answer to Metadata v12 for every topic, asked by one client on
        its own connection one request at a time: this client's first answer, then the broker's
        CPU and the round trip over the next ones (up to 500 in 5 s, at least 5)."""
        from bench.common import decode_response, encode_request
        from bench.request_cpu import Client

        body = {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        frame = encode_request(3, 12, body)
        client = Client(int(cluster.address(0).rsplit(":", 1)[1]))
        try:
            t0 = time.perf_counter()
            answer = client.call(frame)
            first_ms = (time.perf_counter() - t0) * 1000
            got = sum(len(t.partitions) for t in decode_response(3, 12, answer).topics)
            if got < n:
                raise BenchError(f"the Metadata answer holds {got} partitions, not {n}")
            times: list[float] = []
            c0 = cpu_seconds(pid)
            until = time.perf_counter() + 5.0
            while len(times) < 5 or (len(times) < 500 and time.perf_counter() < until):
                t0 = time.perf_counter()
                client.call(frame)
                times.append((time.perf_counter() - t0) * 1000)
            cpu_ms = (cpu_seconds(pid) - c0) / len(times) * 1000
        finally:
            client.close()
        p50 = sorted(times)[len(times) // 2]
        self.add(
            Row(
                "i3",
                f"Metadata v12 of all {n:,} partitions from one broker of that cluster",
                f"{p50:.1f} ms round trip, {cpu_ms:.1f} ms broker CPU",
                f"median of {len(times)} requests after the first, which took "
                f"{first_ms:.1f} ms; {len(answer):,} bytes",
                {"p50_ms": p50, "broker_cpu_ms": cpu_ms, "first_ms": first_ms,
                 "bytes": len(answer)},
            )
        )

    def _failover(self, cluster: Any, topics: dict[str, int]) -> None:
        from wherry.testing.metadata_probe import fetch_metadata

        victim = cluster.controller()
        if victim is None:
            raise BenchError("no controller registered")
        survivors = [b for b in range(3) if b != victim]
        view = fetch_metadata(cluster.address(survivors[0]), list(topics))
        led = {
            (t, p) for t in topics for p, pv in view.partitions(t).items() if pv.leader == victim
        }
        self.log(f"(f1) kill -9 controller {victim}, leader of {len(led):,} partitions")
        zk = cluster.zk()
        left = {b: {t for t, _ in led} for b in survivors}
        t0 = time.monotonic()
        cluster.kill(victim)
        expired: float | None = None
        done: float | None = None
        deadline = t0 + 120
        while time.monotonic() < deadline:
            now = time.monotonic()
            if expired is None and zk.exists(f"/brokers/ids/{victim}") is None:
                expired = now
            if expired is not None and _moved(cluster, left, led, victim):
                done = time.monotonic()
                break
            # Metadata of thousands of partitions costs the brokers time: one topic a look
            # (see _moved), 10 looks a second, so the measuring does not slow down what it
            # measures.
            time.sleep(0.1 if expired is not None else 0.02)
        if done is None or expired is None:
            raise BenchError("leaders did not move within 120 s of the kill")
        self.add(
            Row(
                "f1",
                f"controller failover, {len(led):,} partitions to move (kill -9)",
                f"{done - expired:.2f} s after the session ended",
                f"{done - t0:.2f} s after the kill; ZooKeeper ended the dead broker's session "
                f"after {expired - t0:.2f} s (zookeeper.session.timeout.ms="
                f"{cluster.session_timeout_ms}); new leaders seen on brokers {survivors}",
                {
                    "seconds": done - expired,
                    "since_kill_s": done - t0,
                    "session_end_s": expired - t0,
                    "partitions": len(led),
                },
            )
        )


def _create_big_topic(address: str, name: str, partitions: int) -> None:
    """CreateTopics v7 of an RF 3 topic, waiting as long as the broker takes (up to 10 min):
    creating thousands of partitions may outlast bench.common's 30 s socket timeout."""
    import socket

    from bench.common import decode_response, encode_request, read_frame

    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 3,
                "assignments": [],
                "configs": [{"name": "min.insync.replicas", "value": "2"}],
            }
        ],
        "timeout": 600_000,
        "validate_only": False,
    }
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=660) as sock:
        sock.sendall(encode_request(19, 7, body))
        t = decode_response(19, 7, read_frame(sock)).topics[0]
    if int(t.error_code) not in (0, 7):  # 7: REQUEST_TIMED_OUT (still being created)
        raise BenchError(f"CreateTopics {name} failed: {t.error_code} {t.error_message}")


def _wait_full_isr(cluster: Any, topics: dict[str, int], timeout_s: float) -> float:
    """Seconds until every broker's metadata shows every partition led, with 3 in its ISR."""
    from wherry.testing.metadata_probe import fetch_metadata

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        ok = True
        for b in range(3):
            view = fetch_metadata(cluster.address(b), list(topics))
            for t, count in topics.items():
                parts = view.partitions(t)
                if len(parts) != count or any(
                    pv.leader < 0 or len(pv.isr) != 3 for pv in parts.values()
                ):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return time.monotonic() - t0
        time.sleep(1.0)
    raise BenchError(f"ISRs not full after {timeout_s:.0f} s")


def _moved(
    cluster: Any,
    left: dict[int, set[str]],
    led: set[tuple[str, int]],
    victim: int,
) -> bool:
    """Whether every survivor's metadata shows a new leader for every partition in `led`.
    `left` (survivor → topics not yet seen moved there) shrinks as topics are seen moved. Each
    Metadata request asks for ONE topic (1,000 partitions, not all 10,000): while nothing has
    moved a look costs the brokers a tenth of a whole-cluster answer, and once a topic is seen
    moved the next is asked at once."""
    from wherry.testing.metadata_probe import fetch_metadata

    wanted: dict[str, list[int]] = {}
    for t, p in led:
        wanted.setdefault(t, []).append(p)
    for b, topics in left.items():
        for t in sorted(topics):
            try:
                parts = fetch_metadata(cluster.address(b), [t]).partitions(t)
            except OSError:
                return False
            if not all(
                (pv := parts.get(p)) is not None and pv.leader not in (victim, -1)
                for p in wanted.get(t, ())
            ):
                return False
            topics.discard(t)
    return True


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _minor_faults(pid: int) -> int:
    """Field 10 of /proc/PID/stat (minflt); 0 where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[7])


def _brokers_ms_per_mb(r: Params) -> float:
    """All broker processes' CPU (user + system) per MB a produce run wrote."""
    return float(r["broker_cpu_s"]) * 1000 / (r["bytes"] / 2**20)


def _client_cpu(r: Params) -> str:
    """A latency run's client CPU, as a share of a core while it sent (bench/paced.py)."""
    return f"{r['client_cpu_s'] / r['sent_s']:.0%}"


def run_cluster_worker(role: str, params: Params, timeout_s: float) -> Params:
    """`python -m bench.cluster_workers ROLE PARAMS` (bench/cluster_workers.py), its JSON."""
    return run_worker(role, params, timeout_s, module="bench.cluster_workers")


ORDER = (
    "s1",
    "s2",
    "r1",
    "r2",
    "x1",
    "x2",
    "p1",
    "p3",
    "px",
    "sl1",
    "rl1",
    "sl2",
    "rl2",
    "sl3",
    "rl3",
)
IDLE_ORDER = ("i1", "i2", "i3", "f1")
RF3_ORDER = ("r2", "p3", "e3")


def render(env: Params, rows: list[Row], mode: str) -> None:
    print(f"{env_line(env)}; RF 3 rows on {mode}")
    print_table(
        "wherry replication benchmark (MB = 2^20 bytes)",
        [(r.id, r.name, r.result, r.detail) for r in rows],
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run, a tenth of the records")
    ap.add_argument("--dev", action="store_true", help="RF 3 rows on `wherry dev --brokers 3`")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this path")
    ap.add_argument("--tmp-dir", type=Path, default=None, help="where data dirs live")
    ap.add_argument("--idle-partitions", type=int, help="partitions of rows i1, i2, i3, f1")
    ap.add_argument("--idle-seconds", type=float, help="idle measurement time of row i2")
    ap.add_argument(
        "--broker-tree",
        type=Path,
        metavar="DIR",
        help="run the brokers from this source tree (e.g. another worktree, for a before/after);"
        " clients and this script stay on this one",
    )
    ap.add_argument(
        "--no-pretouch",
        action="store_true",
        help="do not touch and free the memory a throughput run will write just before it "
        "(see bench.common.pretouch_page_cache)",
    )
    ap.add_argument(
        "--rows",
        choices=("all", "throughput", "idle", "rf3"),
        default="all",
        help="throughput: s/r/x/sl/rl rows only; idle: i1, i2, i3, f1 only; rf3: r2 and p3 only,"
        " alternating, and e3, r2's brokers' CPU per MB over p3's",
    )
    ap.add_argument("--repeats", type=int, help="runs of each throughput row (best counts)")
    ap.add_argument("--large-records", type=int, help="1 KiB records of each s2/r2 run")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.idle_partitions:
        plan = replace(plan, idle_partitions=args.idle_partitions)
    if args.idle_seconds:
        plan = replace(plan, idle_seconds=args.idle_seconds)
    if args.no_pretouch:
        plan = replace(plan, pretouch=False)
    if args.repeats:
        plan = replace(plan, repeats=args.repeats)
    if args.large_records:
        plan = replace(plan, large_records=args.large_records)
    if args.json:
        args.json = args.json.resolve()
    if args.broker_tree:
        # The single broker runs in BROKER_RUNTIME.tree; ZkCluster's `python -m wherry`
        # processes inherit the working directory and PYTHONPATH. Workers run in REPO_ROOT.
        from bench.common import BROKER_RUNTIME

        tree = args.broker_tree.resolve()
        BROKER_RUNTIME.tree = tree
        os.environ["PYTHONPATH"] = str(tree)
        os.chdir(tree)
    env = environment()
    bench = Bench(plan, log)
    mode = "`wherry dev --brokers 3` (one process)" if args.dev else "3 processes + ZooKeeper"
    t0 = time.monotonic()
    order: tuple[str, ...] = ()
    with temp_dir("wherry-bench-cluster-", args.tmp_dir) as base:
        bench.scratch = base
        if args.rows in ("all", "throughput"):
            with (
                single_broker(base) as single,
                dev_cluster(base) if args.dev else zk_cluster(base) as cluster,
            ):
                bench.throughput(single, cluster)
                bench.raw_ceiling()
                bench.latency(single, "s")
                bench.latency(cluster, "r")
            shutil.rmtree(base / "single", ignore_errors=True)
            shutil.rmtree(base / "zk", ignore_errors=True)
            bench.ratios()
            order += ORDER
        if args.rows == "rf3":
            with dev_cluster(base) if args.dev else zk_cluster(base) as cluster:
                bench.rf3_efficiency(cluster)
            order += RF3_ORDER
        if args.rows in ("all", "idle"):
            bench.idle(base)
            order += IDLE_ORDER
    finish(env, t0)
    rows = [bench.rows[i] for i in order]
    render(env, rows, mode)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "quick": args.quick,
                    "mode": mode,
                    "rows": [{"id": r.id, "name": r.name, "raw": r.raw} for r in rows],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
