"""`BusyTimed`: await a coroutine and count the time it ran, not the time it waited.

Each step of the coroutine (from a resumption to its next suspension) is timed with
`time.perf_counter_ns`; awaiting a future, a sleep or a parked operation costs nothing. What
a request's handler spends of the event loop, as Kafka counts a request's thread time for the
request-time quota (a Fetch long-polling in the purgatory is not busy meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator
from typing import Any, Generic, TypeVar

__all__ = ["BusyTimed"]

_T = TypeVar("_T")


class BusyTimed(Generic[_T]):
    __slots__ = ("_work", "busy_ns")

    def __init__(self, work: Awaitable[_T]) -> None:
        self._work = work
        self.busy_ns = 0

    def __await__(self) -> Generator[Any, Any, _T]:
        coro = self._work.__await__()
        send: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(send)
            except StopIteration as done:
                self.busy_ns += time.perf_counter_ns() - started
                return done.value  # type: ignore[no-any-return,unused-ignore]
            except BaseException:
                self.busy_ns += time.perf_counter_ns() - started
                raise
            self.busy_ns += time.perf_counter_ns() - started
            try:
                send, error = (yield yielded), None
            except BaseException as e:  # thrown in (a cancellation): passed on to the coroutine
                send, error = None, e
