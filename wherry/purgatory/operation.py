"""Delayed operations (Kafka's ``DelayedOperation``), synchronous and asyncio-agnostic.

A delayed operation waits for a condition (e.g. enough bytes to fetch, all ISR acks for a produce)
or for its timeout.  It completes *at most once*, by whichever path gets there first:

* :meth:`DelayedOperation.try_complete` finds the condition satisfied and calls
  :meth:`force_complete`;
* someone calls :meth:`force_complete` directly;
* the timer fires (:meth:`run`): :meth:`on_expiration` then :meth:`on_complete`.

The losing paths do nothing.  ``on_complete`` typically resolves an ``asyncio.Future`` that the
request handler created and awaits; the operation itself knows nothing about asyncio.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable

from wherry.purgatory.timing_wheel import TimerTask

__all__ = ["DelayedOperation"]


class DelayedOperation(TimerTask):
    """Base class: override :meth:`try_complete` and :meth:`on_complete` (and optionally
    :meth:`on_expiration`)."""

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False
        self._expired = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    @property
    def is_expired(self) -> bool:
        """True if the operation completed because its timeout fired."""
        return self._expired

    def pending_on(self, key: Hashable) -> bool:
        """Whether the operation still waits on what `key` stands for, such that those
        watched after it under `key` wait too (`Purgatory.check_and_complete`'s `in_order`
        pass stops at it). False unless a subclass knows its order."""
        return False

    def force_complete(self) -> bool:
        """Complete now unless already completed: unschedule the timeout and call
        :meth:`on_complete`.  Returns True only for the call that completed the operation.

        Subclasses call this from :meth:`try_complete` once their condition holds; it is also
        called directly to complete early (e.g. on leader change).
        """
        if not self._claim():
            return False
        self.on_complete()
        return True

    def abandon(self) -> bool:
        """Complete now without :meth:`on_complete`: nobody waits for the answer any more (the
        request's connection closed). The timeout is unscheduled, and the watcher lists drop the
        operation at their next purge. Returns True only if this call completed it."""
        return self._claim()

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the completion condition; if satisfied, ``return self.force_complete()``.

        Returns True only if this call completed the operation.
        """

    @abstractmethod
    def on_complete(self) -> None:
        """The completion logic (build the response, resolve the waiter). Called exactly once."""

    def on_expiration(self) -> None:
        """Called when the timeout fired, just before :meth:`on_complete` (e.g. metrics)."""

    def run(self) -> None:
        """Timer callback: expire the operation if nothing completed it first."""
        if not self._claim():
            return
        self._expired = True
        try:
            self.on_expiration()
        finally:
            self.on_complete()

    def _claim(self) -> bool:
        if self._completed:
            return False
        self._completed = True
        self.cancel()  # drop the timeout entry, O(1)
        return True

    def __repr__(self) -> str:
        state = "expired" if self._expired else "completed" if self._completed else "pending"
        return f"<{type(self).__name__} delay_ms={self.delay_ms} {state}>"
