"""Parking a request: start work that answers through a callback, await that answer.

The replica manager and the group coordinator are free of asyncio: they take a `respond`
callback and call it once, at once or later (from a purgatory, on the event loop). The
broker's handlers and the simulator await the answer with `answer_of`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["answer_of"]

T = TypeVar("T")


async def answer_of(start: Callable[[Callable[[T], None]], Any]) -> T:
    """Call `start(respond)` and return the first value `respond` is called with. `respond`
    must be called on the event loop's thread (purgatories complete operations there)."""
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def respond(value: T) -> None:
        if not fut.done():
            fut.set_result(value)

    start(respond)
    return await fut
