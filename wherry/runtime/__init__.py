"""Runtime helpers for the broker: clocks and an asyncio periodic-task scheduler."""

from wherry.runtime.clock import Clock, ManualClock, SystemClock
from wherry.runtime.scheduler import ScheduledTask, Scheduler

__all__ = ["Clock", "ManualClock", "ScheduledTask", "Scheduler", "SystemClock"]
