"""Request purgatory: delayed operations, watcher lists and a hierarchical timing wheel."""

from wherry.purgatory.operation import DelayedOperation
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.purgatory.timing_wheel import CallbackTimerTask, Timer, TimerStats, TimerTask

__all__ = [
    "CallbackTimerTask",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "Timer",
    "TimerStats",
    "TimerTask",
]
