"""A producer sending at a steady rate and timing each record to its delivery report: the
latency rows' client (bench/workers.py `cf_latency`, bench/cluster_workers.py `latency`).

Between two sends the producer does not spin. librdkafka's poll takes whole milliseconds (a
shorter timeout is 0), so a loop polling until the next send time (1 ms apart at 1,000/s)
kept a core busy: on this 2-core machine the client then took a core from the brokers (three
of them on the RF 3 rows) and the rows measured a CPU shortage. Here a thread of its own
waits in `poll` (it returns as soon as a delivery report is there, so each is timed when it
arrives), while the sending thread sleeps until the next send time; both leave the GIL while
they wait."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

POLL_S = 0.05  # the poller's wait when no report comes (it returns at once when one does)


@dataclass
class PacedRun:
    """What a paced run gave: each delivered record's latency (seconds) with its send time
    (seconds on `time.perf_counter`'s clock), the errors, when the sending started and how
    long it took, and the CPU seconds the client process (librdkafka's threads included)
    spent meanwhile."""

    latencies: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    t0: float = 0.0
    sent_s: float = 0.0
    cpu_s: float = 0.0


def produce_paced(
    prod: Any,
    topic: str,
    value: bytes,
    rate: float,
    count: int,
    keys: int | None = None,
) -> PacedRun:
    """Send `count` records of `value` to `topic` at `rate`/s with `prod` (a confluent-kafka
    Producer), key `i % keys` when `keys` is given; return once all are sent (flush after)."""
    run = PacedRun()
    perf = time.perf_counter

    def callback(t_sent: float) -> Any:
        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                run.failures.append(str(err))
            else:
                run.latencies.append(perf() - t_sent)
                run.sent_at.append(t_sent)

        return done

    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            prod.poll(POLL_S)

    thread = threading.Thread(target=poller, name="delivery-reports", daemon=True)
    thread.start()
    try:
        interval = 1.0 / rate
        cpu0 = time.process_time()
        run.t0 = next_at = perf()
        for i in range(count):
            if (wait := next_at - perf()) > 0:
                time.sleep(wait)
            key = None if keys is None else str(i % keys).encode()
            prod.produce(topic, value, key=key, on_delivery=callback(perf()))
            next_at += interval
        run.sent_s = perf() - run.t0
        run.cpu_s = time.process_time() - cpu0
    finally:
        stop.set()
        thread.join(timeout=10)
    return run
