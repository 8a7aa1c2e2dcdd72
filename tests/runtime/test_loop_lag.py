"""The loop-lag monitor: a loop held by a blocking call shows in the lag it records, and a
stall is put down to what held it -- the loop's own work, waiting for a CPU, or stopped --
from the scheduler's real counters of the loop's thread."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from wherry.runtime.loop_lag import (
    BUCKETS_MS,
    WINDOW_MS,
    LoopLag,
    StackWatch,
    Stall,
    attribute,
    monitor,
)
from wherry.runtime.sched_clock import SchedSample


def test_a_blocked_loop_is_recorded_late() -> None:
    lag = LoopLag(lambda: time.monotonic_ns() // 1_000_000)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(monitor(lag, 20))
        await asyncio.sleep(0.1)  # a few on-time wake-ups
        time.sleep(0.25)  # the loop held: the monitor's next wake-up is ~230 ms late
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(main())
    assert lag.count >= 4
    assert 150 <= lag.max_ms < 2000
    assert lag.recent_max_ms() == lag.max_ms
    buckets = dict(lag.cumulative())
    assert buckets["+Inf"] == lag.count
    assert buckets["100.0"] < lag.count  # the late one is above 100 ms
    assert buckets["20.0"] >= 1  # and the others on time


def test_the_recent_maximum_forgets_after_a_minute() -> None:
    now = [0]
    lag = LoopLag(lambda: now[0])
    lag.record(300.0)
    now[0] = WINDOW_MS // 2
    lag.record(3.0)
    assert lag.recent_max_ms() == 300.0
    now[0] = WINDOW_MS + WINDOW_MS // 6
    assert lag.recent_max_ms() == 3.0
    now[0] = 3 * WINDOW_MS
    assert lag.recent_max_ms() == 0.0
    assert lag.max_ms == 300.0  # since the start
    assert [n for _, n in lag.cumulative()][-1] == 2
    assert len(lag.counts) == len(BUCKETS_MS) + 1


# --- what held a stall -------------------------------------------------------------------


def _sample(ran: float, waited: float | None, process: float, steal: float | None) -> SchedSample:
    return SchedSample(ran, waited, process, steal)


def test_a_stall_is_put_down_to_the_largest_of_its_parts() -> None:
    zero = _sample(0.0, 0.0, 0.0, 0.0)
    # 45 ms late after a 20 ms sleep: the loop's thread ran 44 ms of it
    ran = attribute(45.0, 65.0, 20.0, zero, _sample(44.0, 0.5, 46.0, 0.0))
    assert (ran.cause, ran.stopped_ms, ran.others_ms) == ("ran", 0.5, 2.0)
    # it wanted a CPU for 40 ms
    waited = attribute(45.0, 65.0, 20.0, zero, _sample(3.0, 40.0, 3.0, 0.0))
    assert (waited.cause, waited.stopped_ms) == ("waited", 2.0)
    # it neither ran nor waited: 42 ms beyond the sleep it asked for; the host took 80 ms
    stopped = attribute(45.0, 65.0, 20.0, zero, _sample(3.0, 0.0, 9.0, 80.0))
    assert (stopped.cause, stopped.stopped_ms, stopped.others_ms) == ("stopped", 42.0, 6.0)
    assert stopped.steal_ms == 80.0
    text = stopped.describe()
    assert "45.0 ms late" in text and "stopped 42.0 ms" in text and "took 80 ms (steal)" in text
    # without schedstat or /proc/stat: what is not known is not guessed
    before, after = _sample(0.0, None, 0.0, None), _sample(3.0, None, 3.0, None)
    unknown = attribute(45.0, 65.0, 20.0, before, after)
    assert (unknown.waited_ms, unknown.steal_ms, unknown.cause) == (None, None, "stopped")
    assert "for a CPU" not in unknown.describe() and "steal" not in unknown.describe()


def test_a_busy_loop_s_usual_work_is_not_taken_for_the_stall() -> None:
    """A loop that works 30 % of the time, woken 30 ms late after a 100 ms sleep: it asked to
    sleep 70 ms of the interval. Stopped 30 ms by the host, it ran only its usual 30 ms; held
    by 30 ms of extra work, it ran 60 ms and was never stopped."""
    zero = _sample(0.0, 0.0, 0.0, 0.0)
    paused = attribute(30.0, 130.0, 100.0, zero, _sample(30.0, 0.0, 30.0, 0.0), busy_share=0.3)
    assert paused.usual_ms == pytest.approx(30.0)
    assert paused.stopped_ms == pytest.approx(30.0) and paused.cause == "stopped"
    worked = attribute(30.0, 130.0, 100.0, zero, _sample(60.0, 0.0, 60.0, 0.0), busy_share=0.3)
    assert worked.stopped_ms == pytest.approx(0.0) and worked.cause == "ran"
    # without knowing the usual share, the pause would be taken for the loop's own work
    assert attribute(30.0, 130.0, 100.0, zero, _sample(30.0, 0.0, 30.0, 0.0)).cause == "ran"


def _stalls_of(hold: Callable[[], None], watch: bool = False) -> list[Stall]:
    """The stalls the monitor (every 20 ms) records while `hold` runs on the loop (with a
    `StackWatch` when `watch`)."""
    lag = LoopLag(lambda: time.monotonic_ns() // 1_000_000)
    stalls: list[Stall] = []

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(
            monitor(lag, 20, stalls.append, watch=StackWatch if watch else None)
        )
        await asyncio.sleep(0.1)
        hold()
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(main())
    assert sum(lag.stalls.values()) == len(stalls)
    return stalls


def test_a_loop_held_by_its_own_work_stalls_for_what_it_ran() -> None:
    def spin() -> None:
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            pass

    stalls = _stalls_of(spin)
    assert stalls, "no stall recorded"
    held = max(stalls, key=lambda s: s.lag_ms)
    assert held.lag_ms >= 150
    # a loaded machine may take the CPU away for part of it: then the thread waited
    assert held.ran_ms >= 80 and held.stopped_ms <= 50, held.describe()
    assert held.cause in ("ran", "waited")


def test_a_loop_blocked_in_a_call_stalls_as_stopped() -> None:
    stalls = _stalls_of(lambda: time.sleep(0.2))
    held = max(stalls, key=lambda s: s.lag_ms)
    assert held.lag_ms >= 150
    assert held.cause == "stopped" and held.stopped_ms >= 120 and held.ran_ms < 50, held.describe()


def _sleep_in_a_handler() -> None:
    time.sleep(0.2)


def _spin_in_a_handler() -> None:
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("hold", [_spin_in_a_handler, _sleep_in_a_handler])
def test_a_stall_s_line_says_where_the_loop_was(hold: Callable[[], None]) -> None:
    """Running Python code (the watcher gets the GIL at the next switch) or blocked in a call
    (it has let go of the GIL): either way the handler is named, innermost first, and the
    event loop's own frames are left out."""
    held = max(_stalls_of(hold, watch=True), key=lambda s: s.lag_ms)
    assert held.stack, held
    assert held.stack[0].startswith(f"test_loop_lag.py:{hold.__name__}:"), held.stack
    assert held.stack[-1].startswith("test_loop_lag.py:main:"), held.stack  # the task's
    assert f"20 ms into it the loop was in {held.stack[0]} < " in held.describe()
    # without a watch, nothing is said of it
    plain = max(_stalls_of(hold), key=lambda s: s.lag_ms)
    assert plain.stack is None and "into it" not in plain.describe()


def test_a_long_garbage_collection_shows_in_its_stall() -> None:
    """A full collection over a million container objects, run on the loop: a stall of the
    loop's own work, most of it collecting garbage, generation 2."""
    heap = [[i] for i in range(1_000_000)]
    try:
        held = max(_stalls_of(lambda: gc.collect(2)), key=lambda s: s.lag_ms)
    finally:
        del heap
    assert held.gc_generation == 2 and held.gc_longest_ms >= 0.5 * held.lag_ms, held
    assert held.gc_ms >= held.gc_longest_ms
    assert "a generation 2 collection of" in held.describe()
    # a stall without collections says so
    quiet = max(_stalls_of(_sleep_in_a_handler), key=lambda s: s.lag_ms)
    assert quiet.gc_longest_ms < 5, quiet


WAITER = """
import asyncio, os, sys, time
from wherry.runtime.loop_lag import LoopLag, monitor
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # any runnable task goes first
lag = LoopLag(lambda: time.monotonic_ns() // 1_000_000)
stalls = []
async def main():
    task = asyncio.get_running_loop().create_task(monitor(lag, 20, stalls.append))
    print("ready", flush=True)
    await asyncio.sleep(1.5)
    task.cancel()
asyncio.run(main())
print(*sorted({s.cause for s in stalls}), flush=True)
"""

HOG = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    pass
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="needs Linux's SCHED_IDLE")
def test_a_loop_kept_from_its_cpu_stalls_as_waited() -> None:
    """The loop's thread on one CPU at the lowest priority, beside a busy process on the same
    CPU: each time it wakes it waits for the CPU."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, str(cpu)], stdout=subprocess.PIPE, text=True
    )
    hog = None
    try:
        assert waiter.stdout is not None
        assert waiter.stdout.readline().strip() == "ready"
        hog = subprocess.Popen([sys.executable, "-c", HOG, str(cpu), "1.0"])
        out, _ = waiter.communicate(timeout=30)
        assert "waited" in out.split(), out
    finally:
        for p in (waiter, hog):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
