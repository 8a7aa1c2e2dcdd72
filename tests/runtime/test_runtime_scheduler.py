"""Scheduler tests with a real event loop and small periods."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from wherry.runtime import ManualClock, Scheduler

T = TypeVar("T")


def run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(coro_fn())


def test_periodic_sync_job_runs_repeatedly() -> None:
    async def main() -> int:
        scheduler = Scheduler()
        count = [0]
        handle = scheduler.schedule(
            "tick", lambda: count.__setitem__(0, count[0] + 1), period_ms=10
        )
        await asyncio.sleep(0.2)
        await scheduler.shutdown()
        assert handle.done
        assert handle.runs == count[0]
        return count[0]

    n = run(main)
    assert 5 <= n <= 25


def test_delay_before_first_run() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        started = time.monotonic()
        ran_at: list[float] = []
        scheduler.schedule(
            "late", lambda: ran_at.append(time.monotonic()), period_ms=None, delay_ms=80
        )
        await asyncio.sleep(0.03)
        assert ran_at == []
        await asyncio.sleep(0.15)
        assert len(ran_at) == 1
        assert ran_at[0] - started >= 0.075
        await scheduler.shutdown()

    run(main)


def test_one_shot_job_runs_once_and_is_forgotten() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        calls: list[int] = []
        handle = scheduler.schedule("once", lambda: calls.append(1), period_ms=None)
        await handle.wait()
        await asyncio.sleep(0.05)
        assert calls == [1]
        assert handle.done and handle.runs == 1
        assert scheduler.names == []
        # the name is free again
        scheduler.schedule("once", lambda: calls.append(2), period_ms=None)
        await asyncio.sleep(0.02)
        assert calls == [1, 2]
        await scheduler.shutdown()

    run(main)


def test_async_job() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        seen: list[str] = []

        async def job() -> None:
            await asyncio.sleep(0)
            seen.append("ran")

        scheduler.schedule("async", job, period_ms=10)
        await asyncio.sleep(0.06)
        await scheduler.shutdown()
        assert len(seen) >= 2

    run(main)


def test_failures_are_logged_and_do_not_stop_the_job(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        scheduler = Scheduler()
        calls = [0]

        def flaky() -> None:
            calls[0] += 1
            if calls[0] % 2 == 1:
                raise RuntimeError(f"flaky failure {calls[0]}")

        async def async_boom() -> None:
            raise ValueError("async boom")

        h1 = scheduler.schedule("flaky", flaky, period_ms=5)
        h2 = scheduler.schedule("boom", async_boom, period_ms=5)
        await asyncio.sleep(0.1)
        assert not h1.done and not h2.done
        assert h1.runs >= 4 and h1.failures >= 2 and h1.failures < h1.runs
        assert h2.failures == h2.runs >= 2
        assert isinstance(h2.last_error, ValueError)
        await scheduler.shutdown()

    with caplog.at_level(logging.ERROR, logger="wherry.runtime.scheduler"):
        run(main)
    assert "flaky failure 1" in caplog.text
    assert "async boom" in caplog.text


def test_executor_job_runs_off_the_loop_thread() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        loop_thread = threading.get_ident()
        threads: list[int] = []
        scheduler.schedule(
            "fsync", lambda: threads.append(threading.get_ident()), period_ms=10, executor=True
        )
        await asyncio.sleep(0.06)
        await scheduler.shutdown()
        assert threads and all(t != loop_thread for t in threads)

    run(main)


def test_executor_jobs_run_inline_when_the_scheduler_has_no_executor() -> None:
    async def main() -> None:
        scheduler = Scheduler(blocking_in_executor=False)
        loop = asyncio.get_running_loop()
        ran: list[tuple[int, bool]] = []

        def fsync() -> None:  # inline: on the loop's thread, inside a loop callback
            ran.append((threading.get_ident(), asyncio.get_running_loop() is loop))

        scheduler.schedule("fsync", fsync, period_ms=10, executor=True)
        await asyncio.sleep(0.06)
        await scheduler.shutdown()
        assert ran and set(ran) == {(threading.get_ident(), True)}

    run(main)


def test_shutdown_waits_for_in_flight_executor_run() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        started = threading.Event()
        finished = threading.Event()

        def slow_fsync() -> None:
            started.set()
            time.sleep(0.15)
            finished.set()

        handle = scheduler.schedule("slow", slow_fsync, period_ms=1_000, executor=True)
        while not started.is_set():
            await asyncio.sleep(0.005)
        await scheduler.shutdown()
        assert finished.is_set()  # shutdown did not return while the fsync was running
        assert handle.done

    run(main)


def test_shutdown_cancels_a_blocked_async_job() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        cancelled = asyncio.Event()

        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        h = scheduler.schedule("forever", forever, period_ms=10)
        await asyncio.sleep(0.02)
        await asyncio.wait_for(scheduler.shutdown(), timeout=1)
        assert cancelled.is_set()
        assert h.done and h.failures == 0
        assert scheduler.is_shut_down and scheduler.names == []
        with pytest.raises(RuntimeError):
            scheduler.schedule("again", lambda: None, period_ms=10)
        await scheduler.shutdown()  # idempotent

    run(main)


def test_cancel_one_job_leaves_the_others() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        a, b = [0], [0]
        scheduler.schedule("a", lambda: a.__setitem__(0, a[0] + 1), period_ms=5)
        scheduler.schedule("b", lambda: b.__setitem__(0, b[0] + 1), period_ms=5)
        await asyncio.sleep(0.03)
        assert scheduler.cancel("a") is True
        assert scheduler.cancel("missing") is False
        await asyncio.sleep(0.01)
        a_then, b_then = a[0], b[0]
        await asyncio.sleep(0.05)
        assert a[0] == a_then
        assert b[0] > b_then
        assert scheduler.names == ["b"]
        await scheduler.shutdown()

    run(main)


def test_invalid_schedules() -> None:
    async def main() -> None:
        scheduler = Scheduler(ManualClock(0))

        async def job() -> None:
            return None

        with pytest.raises(ValueError):
            scheduler.schedule("x", lambda: None, period_ms=0)
        with pytest.raises(ValueError):
            scheduler.schedule("x", lambda: None, period_ms=10, delay_ms=-1)
        with pytest.raises(ValueError):
            scheduler.schedule("x", job, period_ms=10, executor=True)
        scheduler.schedule("dup", lambda: None, period_ms=10)
        with pytest.raises(ValueError):
            scheduler.schedule("dup", lambda: None, period_ms=10)
        await scheduler.shutdown()

    run(main)


def test_schedule_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError):
        Scheduler().schedule("x", lambda: None, period_ms=10)


def test_overrunning_job_does_not_bunch_runs() -> None:
    async def main() -> None:
        scheduler = Scheduler()
        stamps: list[float] = []

        async def slow() -> None:
            stamps.append(time.monotonic())
            if len(stamps) == 1:
                await asyncio.sleep(0.1)  # overrun ten periods once

        scheduler.schedule("slow", slow, period_ms=10)
        await asyncio.sleep(0.16)
        await scheduler.shutdown()
        # After the overrun, runs resume at the period instead of catching up ~10 at once: about
        # 6 in the 60 ms left, not 15. (One gap may be short on a loaded host: a run woken late
        # and the next on time.)
        gaps = [b - a for a, b in itertools.pairwise(stamps[1:])]
        assert gaps and len(stamps) <= 10, stamps
        assert sum(g < 0.005 for g in gaps) <= 1, gaps

    run(main)
