"""Runtime helpers for the broker: clocks and an asyncio periodic-task scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.common.lazy import lazy_attributes

if TYPE_CHECKING:
    from wherry.runtime.clock import Clock, ManualClock, SystemClock
    from wherry.runtime.scheduler import ScheduledTask, Scheduler

__all__ = ["Clock", "ManualClock", "ScheduledTask", "Scheduler", "SystemClock"]

# submodule → the names it gives this package, imported on first access (PEP 562): a broker
# imports the clock before its listeners are bound, the scheduler only once they are.
_LAZY: dict[str, tuple[str, ...]] = {
    "wherry.runtime.clock": ("Clock", "ManualClock", "SystemClock"),
    "wherry.runtime.scheduler": ("ScheduledTask", "Scheduler"),
}

__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
