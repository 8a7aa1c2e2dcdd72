"""Clocks: wall-clock and monotonic milliseconds, real or manual (tests, simulation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FunctionClock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time, milliseconds since the Unix epoch (record timestamps, retention)."""
        ...

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds from an arbitrary origin (timeouts, purgatory, scheduling)."""
        ...


class SystemClock:
    """The real clocks."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to; wall and monotonic time move together.

    ``monotonic_ms()`` starts at ``monotonic_start_ms`` (default: ``start_ms``).
    """

    __slots__ = ("_monotonic_offset_ms", "_now_ms")

    def __init__(self, start_ms: int = 0, *, monotonic_start_ms: int | None = None) -> None:
        self._now_ms = start_ms
        self._monotonic_offset_ms = (
            0 if monotonic_start_ms is None else monotonic_start_ms - start_ms
        )

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms + self._monotonic_offset_ms

    def advance(self, ms: int) -> int:
        """Move both clocks forward by ``ms`` (>= 0); return the new ``now_ms()``."""
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards ({ms} ms)")
        self._now_ms += ms
        return self._now_ms

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms}, monotonic_ms={self.monotonic_ms()})"


class FunctionClock:
    """Both clocks from one function (a simulated loop's time has no wall/monotonic split)."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms()

    def monotonic_ms(self) -> int:
        return self._now_ms()
