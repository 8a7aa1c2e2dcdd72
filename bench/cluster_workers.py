"""bench/cluster.py's own worker: `python -m bench.cluster_workers ROLE 'JSON params'`.

`latency`: produce `record_bytes` records (100 B) at `rate`/s for `duration_s` with
`linger_ms` (0 by default) and `acks`; latency = produce() → delivery report. Prints one JSON
line last. Every loop is bounded by a deadline.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

Params = dict[str, Any]


class WorkerError(Exception):
    pass


def latency(p: Params) -> Params:
    from confluent_kafka import KafkaError, Message, Producer

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
    latencies: list[float] = []
    failures: list[str] = []
    perf = time.perf_counter

    def callback(t_sent: float) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                latencies.append(perf() - t_sent)

        return done

    rate = p["rate"]
    count = int(rate * p["duration_s"])
    interval = 1.0 / rate
    t0 = perf()
    next_at = t0
    for _ in range(count):
        while (now := perf()) < next_at:
            prod.poll(min(next_at - now, 0.001))
        prod.produce(topic, value, on_delivery=callback(perf()))
        prod.poll(0)
        next_at += interval
    sent_s = perf() - t0
    remaining = prod.flush(p.get("flush_timeout_s", 30.0))
    elapsed = perf() - t0
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
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": latencies[-1] * 1000,
    }


ROLES: dict[str, Callable[[Params], Params]] = {"latency": latency}


def main(argv: list[str]) -> int:
    role, params = argv[1], json.loads(argv[2])
    print(json.dumps(ROLES[role](params)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
