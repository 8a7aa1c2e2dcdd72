"""Request purgatory (Kafka's ``DelayedOperationPurgatory``), synchronous and sans-I/O.

Operations wait under one or more *watch keys* (e.g. a topic-partition) and in a timing wheel for
their timeout.  When something changes for a key (new records appended, high watermark moved),
the broker calls :meth:`DelayedOperationPurgatory.check_and_complete` for that key; when time
passes it calls :meth:`DelayedOperationPurgatory.advance_clock`, ideally at
:meth:`DelayedOperationPurgatory.next_expiration_ms`.

Completed operations are removed from the list of the key that completed them, but may linger in
the lists of their other keys; like Kafka, the purgatory estimates how many such "completed but
still watched" operations exist and purges all watcher lists when the estimate exceeds
``purge_interval_requests``.

A purgatory belongs to one thread (the event loop's): the first thread that adds or completes
operations owns it, and a call from another thread raises :class:`ForeignThreadError` before
anything changes (completions run callbacks that resolve asyncio futures, which only the loop's
thread may do).  Whoever sleeps until :meth:`DelayedOperationPurgatory.next_expiration_ms`
sets ``on_earlier_deadline``: it is called when a parked operation makes that time earlier.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from wherry.purgatory.operation import DelayedOperation
from wherry.purgatory.timing_wheel import Timer

logger = logging.getLogger(__name__)

__all__ = ["DelayedOperationPurgatory", "ForeignThreadError"]

T = TypeVar("T", bound=DelayedOperation)


class ForeignThreadError(RuntimeError):
    """A purgatory was used from a thread other than the one that owns it."""


class _Watchers(Generic[T]):
    """Operations watched under one key, in insertion order; O(1) add and remove."""

    __slots__ = ("key", "ops")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.ops: dict[int, T] = {}  # id(op) -> op: ops may define __eq__, identity matters

    def purge_completed(self) -> int:
        done = [k for k, op in self.ops.items() if op.is_completed]
        for k in done:
            del self.ops[k]
        return len(done)


class DelayedOperationPurgatory(Generic[T]):
    """Holds delayed operations until they complete or time out.

    Each purgatory should own its :class:`Timer` (``delayed`` is the timer's size).  Use the same
    monotonic clock for ``now_ms`` everywhere.  Single-threaded: call it from the event loop only.
    Operation callbacks may re-enter the purgatory (e.g. ``on_complete`` watching a new operation).
    """

    def __init__(
        self,
        name: str,
        timer: Timer | None = None,
        purge_interval_requests: int = 1000,
    ) -> None:
        self.name = name
        self.timer = timer if timer is not None else Timer()
        self.purge_interval_requests = purge_interval_requests
        self._watchers: dict[Hashable, _Watchers[T]] = {}
        # Kafka's estimatedTotalOperations: watched operations, completed or not, since last purge.
        self._estimated_total = 0
        self._shut_down = False
        self._owner_thread: int | None = None
        # Called when a newly parked operation makes next_expiration_ms earlier (a ticker that
        # sleeps until then must wake up); None: nobody sleeps on it.
        self.on_earlier_deadline: Callable[[], None] | None = None

    def _check_thread(self) -> None:
        me = threading.get_ident()
        if self._owner_thread is None:
            self._owner_thread = me
        elif self._owner_thread != me:
            raise ForeignThreadError(
                f"purgatory {self.name!r} is owned by thread {self._owner_thread}, "
                f"called from thread {me}"
            )

    # -- adding and completing ----------------------------------------------------------------

    def try_complete_else_watch(
        self, op: T, keys: Iterable[Hashable], *, now_ms: int | None = None
    ) -> bool:
        """Complete ``op`` now if it can be; otherwise watch it under every key and schedule its
        timeout (``delay_ms`` after ``now_ms``, default the timer's current time).

        Kafka's order: check, watch, check again, so a state change (and the
        ``check_and_complete`` it triggers) that lands between the first check and the watch is
        not lost.  Returns True if ``op`` was completed by this call's checks.  (If ``delay_ms``
        has already elapsed, the operation expires inside this call and False is returned.)
        """
        if self._shut_down:
            raise RuntimeError(f"purgatory {self.name!r} is shut down")
        self._check_thread()
        if op.try_complete():
            return True
        watched = False
        for key in keys:
            if op.is_completed:  # completed meanwhile (e.g. forced by a callback)
                return False
            watchers = self._watchers.get(key)
            if watchers is None:
                watchers = self._watchers[key] = _Watchers(key)
            watchers.ops[id(op)] = op
            watched = True
        if watched:
            self._estimated_total += 1
            self._maybe_purge()
        if op.try_complete():
            return True
        if not op.is_completed:
            notify = self.on_earlier_deadline
            before = self.timer.next_expiration_ms() if notify is not None else None
            self.timer.add(op, now_ms=now_ms)
            if op.is_completed:  # expired on add, or completed by a callback meanwhile
                op.cancel()
            elif notify is not None:
                after = self.timer.next_expiration_ms()
                if after is not None and (before is None or after < before):
                    notify()
        return False

    def check_and_complete(self, key: Hashable, *, in_order: bool = False) -> int:
        """Re-check the operations watched under ``key``; return how many this call completed.

        Completed operations leave the key's list; an empty list is dropped.  An exception from
        an operation's ``try_complete`` is logged and the operation stays watched.  With
        ``in_order`` (the operations under ``key`` wait for it in the order they were watched,
        e.g. acks=all produces on a partition's high watermark) the pass stops at the first
        one still ``pending_on(key)``.
        """
        self._check_thread()
        watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed = 0
        # Iterate over a snapshot: callbacks may watch or complete operations re-entrantly.
        for op_id, op in list(watchers.ops.items()):
            if op.is_completed:
                watchers.ops.pop(op_id, None)
                continue
            try:
                done = op.try_complete()
            except Exception:
                logger.exception("purgatory %s: try_complete failed for %r", self.name, op)
                continue
            if done:
                completed += 1
                watchers.ops.pop(op_id, None)
            elif op.is_completed:
                watchers.ops.pop(op_id, None)
            elif in_order and op.pending_on(key):
                break
        self._remove_key_if_empty(key, watchers)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``: drop its list and unschedule the timeouts of its pending
        operations, which are returned *not completed* (the caller decides what to do with them).
        They stay in the lists of their other keys, if any."""
        watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        cancelled: list[T] = []
        for op in watchers.ops.values():
            if not op.is_completed:
                op.cancel()
                cancelled.append(op)
        watchers.ops.clear()
        return cancelled

    # -- time -----------------------------------------------------------------------------

    def advance_clock(self, now_ms: int) -> int:
        """Expire operations whose timeout passed (``on_expiration`` then ``on_complete``),
        purge watcher lists if due, and return the number of operations expired."""
        self._check_thread()
        expired = self.timer.advance_clock(now_ms)
        self._maybe_purge()
        return len(expired)

    def next_expiration_ms(self) -> int | None:
        """When :meth:`advance_clock` next has work (see :meth:`Timer.next_expiration_ms`)."""
        return self.timer.next_expiration_ms()

    # -- introspection ----------------------------------------------------------------------

    def watched(self, key: Hashable | None = None) -> int:
        """Operations in ``key``'s watcher list (all lists if None), including completed ones
        not yet purged; an operation watched under n keys counts n times in the total."""
        if key is None:
            return sum(len(w.ops) for w in self._watchers.values())
        watchers = self._watchers.get(key)
        return 0 if watchers is None else len(watchers.ops)

    @property
    def delayed(self) -> int:
        """Operations waiting for their timeout (Kafka's ``numDelayed``)."""
        return self.timer.size

    @property
    def watch_keys(self) -> int:
        """Number of keys with a (non-empty or not yet dropped) watcher list."""
        return len(self._watchers)

    # -- housekeeping -----------------------------------------------------------------------

    def purge_completed(self) -> int:
        """Drop completed operations from every watcher list (and empty lists); return how many
        entries were removed."""
        self._estimated_total = self.delayed
        purged = 0
        for key, watchers in list(self._watchers.items()):
            purged += watchers.purge_completed()
            self._remove_key_if_empty(key, watchers)
        if purged:
            logger.debug("purgatory %s: purged %d completed operations", self.name, purged)
        return purged

    def shutdown(self) -> list[T]:
        """Stop: unschedule every timeout and drop every watcher list.  Returns the operations
        that were still pending (not completed), so the caller can fail their requests."""
        self._shut_down = True
        pending: dict[int, T] = {}
        for watchers in self._watchers.values():
            for op_id, op in watchers.ops.items():
                if not op.is_completed:
                    pending[op_id] = op
        self._watchers.clear()
        for task in self.timer.clear():
            if isinstance(task, DelayedOperation) and not task.is_completed:
                pending[id(task)] = task  # type: ignore[assignment]
        self._estimated_total = 0
        return list(pending.values())

    def _maybe_purge(self) -> None:
        if self._estimated_total - self.delayed > self.purge_interval_requests:
            self.purge_completed()

    def _remove_key_if_empty(self, key: Hashable, watchers: _Watchers[T]) -> None:
        if not watchers.ops and self._watchers.get(key) is watchers:
            del self._watchers[key]

    def __repr__(self) -> str:
        return (
            f"<DelayedOperationPurgatory {self.name!r} delayed={self.delayed} "
            f"watch_keys={self.watch_keys}>"
        )
