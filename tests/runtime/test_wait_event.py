"""`runtime.tasks.wait_event`: a cancellation that arrives as the event fires is not lost (on
Python 3.11 `asyncio.wait_for` loses it, and a loop waiting with it never stops)."""

from __future__ import annotations

import asyncio

import pytest

from wherry.runtime.tasks import wait_event


async def _cancel_as_event_fires() -> asyncio.Task[bool]:
    event = asyncio.Event()
    task = asyncio.create_task(wait_event(event, 5.0))
    await asyncio.sleep(0)  # the task waits
    event.set()
    task.cancel()
    return task


def test_a_cancellation_racing_the_event_is_kept() -> None:
    async def main() -> None:
        task = await _cancel_as_event_fires()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_set_event_and_timeout() -> None:
    async def main() -> None:
        event = asyncio.Event()
        assert await wait_event(event, 0.01) is False
        event.set()
        assert await wait_event(event, 0.01) is True
        assert await wait_event(event, None) is True

    asyncio.run(main())


def test_a_loop_on_wait_event_stops_when_cancelled_as_it_is_woken() -> None:
    asyncio.run(_loop_stops())


async def _loop_stops() -> None:
    event = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            event.clear()
            await wait_event(event, 1.0)
            rounds += 1

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2.0)
    assert task in done and task.cancelled()
