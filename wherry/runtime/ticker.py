"""The purgatory ticker: advances the timing wheels of delayed operations on the event loop.

Kafka gives each purgatory an "expiration reaper" thread; here one asyncio task serves all of a
broker's purgatories. It sleeps until the earliest deadline any of them reports, or until one
of them reports a new, earlier deadline (`wake`, which a purgatory calls by itself when an
operation is parked), and then advances each purgatory on its own clock (produce and fetch
waits run on the monotonic clock, the group coordinator's on wall-clock time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from wherry.runtime.tasks import wait_event

__all__ = ["Clocked", "PurgatoryTicker"]

MAX_SLEEP_MS = 1_000  # re-check at least this often (a source's clock may jump)


class Clocked(Protocol):
    """A purgatory, or anything holding purgatories, that the ticker advances."""

    def advance_clock(self, now_ms: int) -> Any: ...

    def next_expiration_ms(self) -> int | None: ...


class PurgatoryTicker:
    def __init__(self) -> None:
        self._sources: list[tuple[Clocked, Callable[[], int]]] = []
        self._wakeup = asyncio.Event()

    def add(self, source: Clocked, now_ms: Callable[[], int]) -> None:
        """Advance `source` on the clock `now_ms` (the one its deadlines are on)."""
        self._sources.append((source, now_ms))
        self.wake()

    def wake(self) -> None:
        """A deadline earlier than the ones the ticker sleeps for has appeared."""
        self._wakeup.set()

    def tick(self) -> int | None:
        """Advance every source; return how long until the earliest next deadline (ms)."""
        wait: int | None = None
        for source, now_ms in self._sources:
            now = now_ms()
            source.advance_clock(now)
            n = source.next_expiration_ms()
            if n is not None and (wait is None or n - now < wait):
                wait = n - now
        return wait

    async def run(self) -> None:
        while True:
            self._wakeup.clear()
            wait = self.tick()
            # At least 1 ms: a deadline the wheels have just passed is handled on the next tick.
            timeout_ms = MAX_SLEEP_MS if wait is None else max(1, min(wait, MAX_SLEEP_MS))
            if self._wakeup.is_set():
                continue
            await wait_event(self._wakeup, timeout_ms / 1000)
