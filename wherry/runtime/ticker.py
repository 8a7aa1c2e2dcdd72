"""The purgatory ticker: advances the timing wheels of delayed operations on the event loop.

Kafka gives each purgatory an "expiration reaper" thread; here one asyncio task serves all of a
broker's purgatories. It sleeps until the earliest deadline any of them reports, or until one
of them reports a new, earlier deadline (`earlier_deadline`, which a purgatory calls by itself
when a parked operation moves its next deadline earlier), and then advances each purgatory on its
own clock (produce and fetch waits run on the monotonic clock, the group coordinator's on
wall-clock time). A deadline that falls after the ticker's sleep ends anyway (a heartbeat's next
session expiry, tens of seconds away, when the ticker wakes at least every second) does not
wake it: every heartbeat would otherwise cost a pass over every purgatory.
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sleep_until: float | None = None  # the loop's time the sleep ends; None: awake

    def add(self, source: Clocked, now_ms: Callable[[], int]) -> None:
        """Advance `source` on the clock `now_ms` (the one its deadlines are on)."""
        self._sources.append((source, now_ms))
        self.wake()

    def wake(self) -> None:
        """A deadline earlier than the ones the ticker sleeps for has appeared."""
        self._wakeup.set()

    def earlier_deadline(self) -> None:
        """A source's next deadline moved earlier: wake the ticker if that deadline comes
        before its sleep ends (asleep, it wakes then anyway and advances every source)."""
        until, loop = self._sleep_until, self._loop
        if until is not None and loop is not None and not self._wakeup.is_set():
            left_ms = (until - loop.time()) * 1000
            for source, now_ms in self._sources:
                n = source.next_expiration_ms()
                if n is not None and n - now_ms() < left_ms:
                    break
            else:
                return
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
        self._loop = loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            wait = self.tick()
            # At least 1 ms: a deadline the wheels have just passed is handled on the next tick.
            timeout_ms = MAX_SLEEP_MS if wait is None else max(1, min(wait, MAX_SLEEP_MS))
            if self._wakeup.is_set():
                continue
            self._sleep_until = loop.time() + timeout_ms / 1000
            try:
                await wait_event(self._wakeup, timeout_ms / 1000)
            finally:
                self._sleep_until = None
