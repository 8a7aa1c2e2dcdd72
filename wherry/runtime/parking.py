"""Parking a request: start work that answers through a callback, await that answer.

The replica manager and the group coordinator are free of asyncio: they take a `respond`
callback and call it once, at once or later (from a purgatory, on the event loop). The
broker's handlers and the simulator await the answer with `answer_of`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Abandonable", "Parked", "answer_future", "answer_of"]

T = TypeVar("T")


class Abandonable(Protocol):
    """What `start` may return: the parked operation, given up when its waiter is."""

    def abandon(self) -> bool: ...


def answer_future(start: Callable[[Callable[[T], None]], Any]) -> asyncio.Future[T]:
    """Call `start(respond)`; the future holds the first value `respond` is called with
    (done already when `start` answered at once). `respond` must be called on the event
    loop's thread (purgatories complete operations there). When `start` returns the operation
    it parked (anything with `abandon()`), cancelling the future -- its waiter is gone: the
    request's connection closed -- abandons the operation, so it does not stay parked."""
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def respond(value: T) -> None:
        if not fut.done():
            fut.set_result(value)

    parked = start(respond)
    if not fut.done() and callable(getattr(parked, "abandon", None)):
        op: Abandonable = parked

        def given_up(f: asyncio.Future[T]) -> None:
            if f.cancelled():
                op.abandon()

        fut.add_done_callback(given_up)
    return fut


async def answer_of(start: Callable[[Callable[[T], None]], Any]) -> T:
    """Call `start(respond)` and return the first value `respond` is called with."""
    return await answer_future(start)


class Parked(Generic[T]):
    """A handler's result when its request's work is done and only the answer waits (an
    acks=all Produce appended and parked until the ISR has the records): the broker lets the
    connection handle its next request meanwhile (`network.Deferred`). `answer` gives the
    response body."""

    __slots__ = ("answer",)

    def __init__(self, answer: Awaitable[T]) -> None:
        self.answer = answer
