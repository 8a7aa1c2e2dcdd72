"""`BusyTimed` counts the time a coroutine runs, not the time it waits, and passes results,
exceptions and cancellations through."""

from __future__ import annotations

import asyncio
import time

import pytest

from wherry.runtime.busy_time import BusyTimed


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _work() -> str:
    _spin(0.05)
    await asyncio.sleep(0.3)
    _spin(0.05)
    return "done"


def test_busy_time_leaves_out_waiting() -> None:
    async def main() -> tuple[str, int, float]:
        timed = BusyTimed(_work())
        started = time.perf_counter()
        result = await timed
        return result, timed.busy_ns, time.perf_counter() - started

    result, busy_ns, elapsed = asyncio.run(main())
    assert result == "done"
    assert 0.09 <= busy_ns / 1e9 < 0.25, busy_ns
    assert elapsed >= 0.39


def test_exceptions_and_cancellation_pass_through() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    async def waits(seen: list[str]) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> list[str]:
        with pytest.raises(KeyError):
            await BusyTimed(fails())
        seen: list[str] = []
        task = asyncio.ensure_future(BusyTimed(waits(seen)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(main()) == ["cancelled"]
