"""bench/cluster.py's own worker: `python -m bench.cluster_workers ROLE 'JSON params'`.

`latency`: produce `record_bytes` records (100 B) at `rate`/s for `duration_s` with
`linger_ms` (0 by default) and `acks`; latency = produce() → delivery report (the paced
producer of bench/paced.py). Prints one JSON line last. Every loop is bounded by a deadline.

`raw_path`: the byte path of a produce with no broker code at all, as a ceiling: a sender
thread writes `total_mib` MiB in 1 MiB chunks to a loopback socket; a "leader" thread
`recv_into`s each chunk, `pwrite`s it to a file and, with `followers` > 0, `os.sendfile`s
that file range to each follower's socket, where a "follower" thread `recv_into`s and
`pwrite`s it to its own file. Every syscall releases the GIL, so the threads use the cores
like processes would; the answer is MiB/s and the CPU seconds per MiB of the leader and
follower threads (the sender's, the client's part, reported apart).

`raw_path` pre-touches page cache right before its clock starts when asked (`pretouch`, see
bench.common.pretouch_page_cache).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.common import pretouch_param
from bench.paced import produce_paced

Params = dict[str, Any]


class WorkerError(Exception):
    pass


def latency(p: Params) -> Params:
    from confluent_kafka import Producer

    conf: Params = {
        "bootstrap.servers": p["bootstrap"],
        "linger.ms": p.get("linger_ms", 0),
        "acks": p.get("acks", "all"),
        "log_level": 0,
    }
    prod = Producer(conf)
    topic = p["topic"]
    value = os.urandom(p.get("record_bytes", 100))
    prod.produce(topic, value)  # warm-up: connection, metadata, first batch
    if prod.flush(10) != 0:
        raise WorkerError("latency warm-up message was not delivered")
    count = int(p["rate"] * p["duration_s"])
    run = produce_paced(prod, topic, value, p["rate"], count)
    remaining = prod.flush(p.get("flush_timeout_s", 30.0))
    elapsed = time.perf_counter() - run.t0
    latencies, failures, sent_s = run.latencies, run.failures, run.sent_s
    if failures or remaining or len(latencies) != count:
        raise WorkerError(f"latency run: {remaining} undelivered, errors {failures[:5]}")
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    return {
        "records": count,
        "sent_s": sent_s,
        "elapsed_s": elapsed,
        "rate": count / elapsed,
        "client_cpu_s": run.cpu_s,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": latencies[-1] * 1000,
    }


def raw_path(p: Params) -> Params:
    import socket
    import tempfile
    import threading

    chunk, total, followers = 1 << 20, int(p["total_mib"]), int(p["followers"])
    deadline = time.monotonic() + float(p.get("timeout_s", 120))
    errors: list[BaseException] = []

    def pair() -> tuple[socket.socket, socket.socket]:
        """A connected loopback TCP pair (what a broker's peers use)."""
        with socket.create_server(("127.0.0.1", 0)) as server:
            a = socket.create_connection(server.getsockname()[:2])
            b, _ = server.accept()
        return a, b  # blocking: os.sendfile needs it; a stuck run ends at the join timeout

    def recv_chunk(sock: socket.socket, buf: bytearray) -> None:
        view, got = memoryview(buf), 0
        while got < len(buf):
            n = sock.recv_into(view[got:])
            if n == 0:
                raise WorkerError("peer closed early")
            got += n

    thread_cpu: dict[str, float] = {}  # each role's own CPU seconds (time.thread_time)

    def guarded(name: str, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            cpu0 = time.thread_time()
            try:
                fn()
            except BaseException as e:  # reported after the join
                errors.append(e)
            finally:
                thread_cpu[name] = time.thread_time() - cpu0

        return run

    with tempfile.TemporaryDirectory(dir=p.get("dir")) as d:
        produce_out, leader_in = pair()
        links = [pair() for _ in range(followers)]

        def sender() -> None:
            data = os.urandom(chunk)
            for _ in range(total):
                produce_out.sendall(data)

        def leader() -> None:
            fd = os.open(os.path.join(d, "leader.log"), os.O_RDWR | os.O_CREAT)
            buf = bytearray(chunk)
            try:
                for i in range(total):
                    recv_chunk(leader_in, buf)
                    os.pwrite(fd, buf, i * chunk)
                    for out, _ in links:
                        offset, left = i * chunk, chunk
                        while left:
                            sent = os.sendfile(out.fileno(), fd, offset, left)
                            offset += sent
                            left -= sent
            finally:
                os.close(fd)

        def follower(k: int) -> Callable[[], None]:
            def run() -> None:
                fd = os.open(os.path.join(d, f"follower-{k}.log"), os.O_WRONLY | os.O_CREAT)
                buf = bytearray(chunk)
                try:
                    for i in range(total):
                        recv_chunk(links[k][1], buf)
                        os.pwrite(fd, buf, i * chunk)
                finally:
                    os.close(fd)

            return run

        roles = {"sender": sender, "leader": leader}
        roles.update({f"follower-{k}": follower(k) for k in range(followers)})
        threads = [threading.Thread(target=guarded(n, f), daemon=True) for n, f in roles.items()]
        pretouch_s = pretouch_param(p)
        cpu0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        for s in (produce_out, leader_in, *(s for link in links for s in link)):
            s.close()
    if errors or any(t.is_alive() for t in threads):
        raise WorkerError(f"raw path failed: {errors or 'timed out'}")
    # the broker side: what the leader and follower threads spent; the sender stands for the
    # producing client, whose CPU the produce rows count as the client's
    brokers = sum(v for n, v in thread_cpu.items() if n != "sender")
    return {
        "mib": total,
        "elapsed_s": elapsed,
        "mib_s": total / elapsed,
        "cpu_s": cpu,
        "thread_cpu_s": thread_cpu,
        "cpu_ms_per_mib": brokers * 1000 / total,
        "sender_cpu_ms_per_mib": thread_cpu.get("sender", 0.0) * 1000 / total,
        **({} if pretouch_s is None else {"pretouch_s": pretouch_s}),
    }


ROLES: dict[str, Callable[[Params], Params]] = {"latency": latency, "raw_path": raw_path}


def main(argv: list[str]) -> int:
    role, params = argv[1], json.loads(argv[2])
    print(json.dumps(ROLES[role](params)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
