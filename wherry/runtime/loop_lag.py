"""How late the event loop runs what is due: the loop-lag monitor.

Everything a broker does runs on one event loop, so anything that holds it -- a blocking file
call, a long handler, a garbage-collector pass -- delays every request behind it. `monitor`
asks to be woken every `interval_ms` and records how late each wake-up came (`LoopLag`): a
histogram of the lags since the start and the largest lag of the last minute, plain numbers
read at scrape time (`/metrics`), as Kafka exports its request queue time.

A wake-up late by `STALL_MS` or more is a stall, and the monitor tells what held it from the
scheduler's counters of the loop's thread (`sched_clock.py`) between this wake-up and the one
before (a `Stall`): the loop ran (its own work: a long handler, a blocking call's CPU, a
collection), it waited for a CPU (other processes or the broker's own threads had them), or it
was stopped, neither running nor waiting for a CPU beyond the sleep it asked for (blocked in a
call, waiting for the GIL, or not run at all: a paused machine, whose host then often reports
the time as steal). The line also tells the time spent collecting garbage over the window
(`GcTime`) and, where a `StackWatch` runs, where the loop's thread was `STALL_MS` into the
stall. Stalls are counted by cause for `/metrics` and logged, one line a minute at most
(`StallLog`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import field
from typing import Final

from wherry.common.record import frozen_record, record
from wherry.runtime.sched_clock import SchedClock, SchedSample

__all__ = [
    "BUCKETS_MS",
    "CAUSES",
    "STALL_MS",
    "GcTime",
    "LoopLag",
    "StackWatch",
    "Stall",
    "StallLog",
    "attribute",
    "monitor",
]

# Upper bounds (ms) of the histogram's buckets; the last one is +Inf.
BUCKETS_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)
WINDOW_MS = 60_000  # the recent maximum covers this long, in `SLOTS` slots
SLOTS = 6
STALL_MS: Final = 20.0  # a wake-up at least this late is a stall
# What held a stall: the loop's own work, waiting for a CPU, stopped (see the module docstring)
CAUSES: Final = ("ran", "waited", "stopped")
BUSY_WEIGHT: Final = 0.1  # of a wake-up in the loop thread's usual busy share (a moving mean)


@frozen_record
class Stall:
    """A wake-up `lag_ms` late, `window_ms` after the one before, which asked to sleep
    `interval_ms`. Over the window the loop's thread ran `ran_ms` and waited `waited_ms` for
    a CPU (None: not known), where it usually runs or waits `usual_ms` in an interval (its
    recent share of the time); it was stopped `stopped_ms` beyond the sleep it asked for. The
    process's other threads ran `others_ms`; the host took `steal_ms` of the machine's CPUs
    (None: not known)."""

    lag_ms: float
    window_ms: float
    interval_ms: float
    ran_ms: float
    waited_ms: float | None
    usual_ms: float
    stopped_ms: float
    others_ms: float
    steal_ms: float | None
    # time collecting garbage over the window (any thread's collection holds the GIL), and
    # the longest collection in it with its generation (-1: none)
    gc_ms: float = 0.0
    gc_longest_ms: float = 0.0
    gc_generation: int = -1
    # where the loop's thread was STALL_MS into the stall, innermost frame first ("file:
    # function:line"; `StackWatch`); None: not read
    stack: tuple[str, ...] | None = None

    @property
    def cause(self) -> str:
        """What held the most of it: "ran" (beyond the usual), "waited" or "stopped" (one of
        `CAUSES`)."""
        parts = (self.ran_ms - self.usual_ms, self.waited_ms or 0.0, self.stopped_ms)
        return CAUSES[parts.index(max(parts))]

    def describe(self) -> str:
        waited = "" if self.waited_ms is None else f", waited {self.waited_ms:.1f} ms for a CPU"
        steal = "" if self.steal_ms is None else f"; the host took {self.steal_ms:.0f} ms (steal)"
        held = {
            "ran": "its own work held it",
            "waited": "it waited for a CPU",
            "stopped": "it was stopped (blocked in a call, waiting for the GIL, or not run)",
        }[self.cause]
        return (
            f"the event loop woke {self.lag_ms:.1f} ms late: {held}. Over the "
            f"{self.window_ms:.0f} ms since it last woke its thread ran {self.ran_ms:.1f} ms"
            f"{waited} (usually {self.usual_ms:.1f} ms in {self.interval_ms:.0f} ms) and was "
            f"stopped {self.stopped_ms:.1f} ms beyond the sleep it asked for; the broker's "
            f"other threads ran {self.others_ms:.1f} ms{steal}{self._gc_text()}"
            f"{self._stack_text()}"
        )

    def _stack_text(self) -> str:
        if self.stack is None:
            return ""
        if not self.stack:
            return f"; {STALL_MS:.0f} ms into it the loop was between callbacks"
        return f"; {STALL_MS:.0f} ms into it the loop was in " + " < ".join(self.stack)

    def _gc_text(self) -> str:
        if self.gc_generation < 0:
            return "; no garbage collection"
        return (
            f"; garbage collection took {self.gc_ms:.1f} ms, the longest a generation "
            f"{self.gc_generation} collection of {self.gc_longest_ms:.1f} ms"
        )


def attribute(
    lag_ms: float,
    window_ms: float,
    interval_ms: float,
    before: SchedSample,
    after: SchedSample,
    busy_share: float = 0.0,
) -> Stall:
    """The `Stall` of a wake-up from the samples taken at it (`after`) and at the one before,
    where the loop's thread usually runs or waits for a CPU `busy_share` of the time. The
    thread's time over the window is what it ran, what it waited for a CPU and what it slept;
    it asked to sleep the part of `interval_ms` it usually does not work, and what it slept
    beyond that is `stopped_ms` (an estimate, as `busy_share` is)."""
    ran = max(0.0, after.ran_ms - before.ran_ms)
    waited = None
    if after.waited_ms is not None and before.waited_ms is not None:
        waited = max(0.0, after.waited_ms - before.waited_ms)
    usual = interval_ms * min(1.0, max(0.0, busy_share))
    stopped = max(0.0, window_ms - ran - (waited or 0.0) - (interval_ms - usual))
    others = max(0.0, after.process_ms - before.process_ms - ran)
    steal = None
    if after.steal_ms is not None and before.steal_ms is not None:
        steal = max(0.0, after.steal_ms - before.steal_ms)
    return Stall(lag_ms, window_ms, interval_ms, ran, waited, usual, stopped, others, steal)


@record(slots=True)
class LoopLag:
    """The event loop's lag: a histogram, its sum and count, the maximum since the start and
    of each recent slot."""

    now_ms: Callable[[], int]  # a monotonic clock: the recent maximum's slots
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    sum_ms: float = 0.0
    count: int = 0
    max_ms: float = 0.0  # since the start
    # stalls (wake-ups at least STALL_MS late) by cause, since the start
    stalls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    # (slot start ms, largest lag in it) of the last `SLOTS` slots
    _recent: list[tuple[int, float]] = field(default_factory=list)

    def record_stall(self, stall: Stall) -> None:
        self.stalls[stall.cause] += 1

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


class GcTime:
    """Time spent collecting garbage, from `gc.callbacks`: a collection in any thread holds
    the GIL, and so the loop. `close` removes the callback."""

    def __init__(self) -> None:
        self.total_ms = 0.0
        self.longest_ms = 0.0
        self.longest_generation = -1
        self._started: float | None = None
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            ms = (time.perf_counter() - self._started) * 1000
            self._started = None
            self.total_ms += ms
            if ms > self.longest_ms:
                self.longest_ms, self.longest_generation = ms, info["generation"]

    def take_longest(self) -> tuple[float, int]:
        """The longest collection since the last take and its generation (-1: none)."""
        longest = self.longest_ms, self.longest_generation
        self.longest_ms, self.longest_generation = 0.0, -1
        return longest

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._observe)


class StackWatch:
    """A thread that reads where the loop's thread is when the monitor's next wake-up is
    `STALL_MS` late: `sys._current_frames()`, taken holding the GIL, so the loop's thread is
    paused at a point where the interpreter lets go of it (a thread running Python code gives
    it up within the switch interval, one blocked in a system call has let go already, C code
    holding it is read once it is done). It wakes once an interval, at the armed deadline;
    when the loop has armed a later one meanwhile (it woke in time) it reads nothing. Its
    frames are the innermost `depth` of the loop thread's, up to (not into) the event loop's
    own."""

    def __init__(self, depth: int = 8) -> None:
        self.depth = depth
        self._loop_thread = threading.get_ident()  # made on the loop's thread
        self._lock = threading.Lock()
        self._deadline = 0.0  # time.monotonic(); 0: not armed
        self._taken: tuple[float, tuple[str, ...]] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="loop-stall-watch", daemon=True)
        self._thread.start()

    def arm(self, deadline: float) -> None:
        """Read the loop's stack at `deadline` (`time.monotonic()`) unless armed again first."""
        with self._lock:
            self._deadline, self._taken = deadline, None

    def take(self) -> tuple[str, ...] | None:
        """The stack read at the armed deadline, if it came and was read."""
        with self._lock:
            taken = self._taken
            return taken[1] if taken is not None and taken[0] == self._deadline else None

    def close(self) -> None:
        self._closed = True

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                deadline, taken = self._deadline, self._taken
            if not deadline or taken is not None:  # not armed, or read: until armed again
                time.sleep(STALL_MS / 2000)
                continue
            wait = deadline - time.monotonic()
            if wait > 0:
                time.sleep(wait)
                continue
            stack = _frames(sys._current_frames().get(self._loop_thread), self.depth)
            with self._lock:
                if self._deadline == deadline:
                    self._taken = (deadline, stack)


_LOOP_FILES: Final = ("asyncio" + os.sep, "uvloop" + os.sep)
_LOOP_FUNCTIONS: Final = frozenset(
    ("run", "run_forever", "run_until_complete", "_run_once", "_run", "wrapper")
)


def _frames(frame: object, depth: int) -> tuple[str, ...]:
    """`frame` and its callers, innermost first, up to the event loop's own frames (none: the
    loop was between callbacks, or in its own code)."""
    out: list[str] = []
    f = frame
    while f is not None and len(out) < depth:
        code = f.f_code  # type: ignore[attr-defined]
        name = code.co_filename
        if code.co_name in _LOOP_FUNCTIONS and any(part in name for part in _LOOP_FILES):
            break
        out.append(f"{os.path.basename(name)}:{code.co_name}:{f.f_lineno}")  # type: ignore[attr-defined]
        f = f.f_back  # type: ignore[attr-defined]
    return tuple(out)


class StallLog:
    """Logs stalls at WARN: the first, then at most one a `every_ms` (with how many more came
    since the last line)."""

    def __init__(
        self, log: logging.Logger, now_ms: Callable[[], int], every_ms: int = 60_000
    ) -> None:
        self.log = log
        self.now_ms = now_ms
        self.every_ms = every_ms
        self._last_ms: int | None = None
        self._unlogged = 0

    def __call__(self, stall: Stall, prefix: str = "") -> None:
        now = self.now_ms()
        if self._last_ms is not None and now - self._last_ms < self.every_ms:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more stalls since the last such line)" if self._unlogged else ""
        self.log.warning("%s%s%s", f"{prefix} " if prefix else "", stall.describe(), more)
        self._last_ms, self._unlogged = now, 0


async def monitor(
    lag: LoopLag,
    interval_ms: int,
    on_stall: Callable[[Stall], None] | None = None,
    clock: Callable[[], SchedClock] = SchedClock,
    watch: Callable[[], StackWatch] | None = None,
) -> None:
    """Record, every `interval_ms` until cancelled, how late the running loop woke this task;
    a stall is counted by cause and handed to `on_stall`. `clock` makes the scheduler clock
    of the loop's thread (called here, on it); `watch`, when given, the `StackWatch` that
    reads where the loop was in each stall."""
    loop = asyncio.get_running_loop()
    interval_s = interval_ms / 1000
    sched = clock()
    stacks = watch() if watch is not None else None
    collections = GcTime()
    busy_share = 0.0  # of the loop's thread, over the recent wake-ups that were not stalls
    try:
        woke, before = loop.time(), sched.sample()
        gc_before = collections.total_ms
        while True:
            due = loop.time() + interval_s
            if stacks is not None:
                stacks.arm(time.monotonic() + interval_s + STALL_MS / 1000)
            await asyncio.sleep(interval_s)
            now = loop.time()
            lag_ms = max(0.0, (now - due) * 1000)
            lag.record(lag_ms)
            after = sched.sample()
            window_ms = (now - woke) * 1000
            if lag_ms >= STALL_MS:
                stall = attribute(lag_ms, window_ms, interval_ms, before, after, busy_share)
                longest_ms, generation = collections.take_longest()
                stall = dataclasses.replace(
                    stall,
                    gc_ms=collections.total_ms - gc_before,
                    gc_longest_ms=longest_ms,
                    gc_generation=generation,
                    stack=stacks.take() if stacks is not None else None,
                )
                lag.record_stall(stall)
                if on_stall is not None:
                    on_stall(stall)
            else:
                collections.take_longest()
                if window_ms > 0:
                    busy = after.ran_ms - before.ran_ms
                    if after.waited_ms is not None and before.waited_ms is not None:
                        busy += after.waited_ms - before.waited_ms
                    busy_share += BUSY_WEIGHT * (min(1.0, busy / window_ms) - busy_share)
            woke, before, gc_before = now, after, collections.total_ms
    finally:
        collections.close()
        sched.close()
        if stacks is not None:
            stacks.close()
