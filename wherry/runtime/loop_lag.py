"""How late the event loop runs what is due: the loop-lag monitor.

Everything a broker does runs on one event loop, so anything that holds it -- a blocking file
call, a long handler, a garbage-collector pass -- delays every request behind it. `monitor`
asks to be woken every `interval_ms` and records how late each wake-up came (`LoopLag`): a
histogram of the lags since the start and the largest lag of the last minute, plain numbers
read at scrape time (`/metrics`), as Kafka exports its request queue time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import field

from wherry.common.record import record

__all__ = ["BUCKETS_MS", "LoopLag", "monitor"]

# Upper bounds (ms) of the histogram's buckets; the last one is +Inf.
BUCKETS_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)
WINDOW_MS = 60_000  # the recent maximum covers this long, in `SLOTS` slots
SLOTS = 6


@record(slots=True)
class LoopLag:
    """The event loop's lag: a histogram, its sum and count, the maximum since the start and
    of each recent slot."""

    now_ms: Callable[[], int]  # a monotonic clock: the recent maximum's slots
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    sum_ms: float = 0.0
    count: int = 0
    max_ms: float = 0.0  # since the start
    # (slot start ms, largest lag in it) of the last `SLOTS` slots
    _recent: list[tuple[int, float]] = field(default_factory=list)

    def record(self, lag_ms: float) -> None:
        i = next((i for i, b in enumerate(BUCKETS_MS) if lag_ms <= b), len(BUCKETS_MS))
        self.counts[i] += 1
        self.sum_ms += lag_ms
        self.count += 1
        self.max_ms = max(self.max_ms, lag_ms)
        now_ms = self.now_ms()
        slot = now_ms - now_ms % (WINDOW_MS // SLOTS)
        if self._recent and self._recent[-1][0] == slot:
            self._recent[-1] = (slot, max(self._recent[-1][1], lag_ms))
        else:
            self._recent.append((slot, lag_ms))
            del self._recent[:-SLOTS]

    def recent_max_ms(self) -> float:
        """The largest lag recorded in the last minute."""
        since = self.now_ms() - WINDOW_MS
        return max((m for slot, m in self._recent if slot > since), default=0.0)

    def cumulative(self) -> list[tuple[str, int]]:
        """The histogram as Prometheus buckets: (upper bound, lags at most that)."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*map(str, BUCKETS_MS), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


async def monitor(lag: LoopLag, interval_ms: int) -> None:
    """Record, every `interval_ms` until cancelled, how late the running loop woke this task."""
    loop = asyncio.get_running_loop()
    interval_s = interval_ms / 1000
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        lag.record(max(0.0, (loop.time() - due) * 1000))
