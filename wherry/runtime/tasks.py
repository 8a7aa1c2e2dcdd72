"""Stopping background tasks, and waiting for an event without losing a cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait", "wait_event"]


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended. The `asyncio.CancelledError` it ends with
    is swallowed; any other exception it raises propagates."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` passes (None: no limit); True if it was set.

    Not `asyncio.wait_for`: on Python 3.11 it loses a cancellation that arrives just as the
    awaited event fires (gh-86296), so a task looping on it may never stop."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
