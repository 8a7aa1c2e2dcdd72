"""The loop-lag monitor: a loop held by a blocking call shows in the lag it records."""

from __future__ import annotations

import asyncio
import time

from wherry.runtime.loop_lag import BUCKETS_MS, WINDOW_MS, LoopLag, monitor


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
