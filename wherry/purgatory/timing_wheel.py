"""Hierarchical timing wheel (Kafka's TimingWheel / TimerTaskList / SystemTimer), sans-I/O.

Design (after Kafka's KIP-era ``kafka.utils.timer``):

* A wheel has ``wheel_size`` buckets, each ``tick_ms`` wide, so it covers ``interval_ms =
  tick_ms * wheel_size`` past its current time.  Deadlines beyond that go to an *overflow* wheel
  whose tick is the lower wheel's interval; overflow wheels are created lazily, so a timer holding
  only short timeouts has a single level.
* A bucket is a set of task entries with O(1) insert and O(1) removal (an identity-keyed,
  insertion-ordered ``dict`` stands in for Kafka's doubly linked ``TimerTaskList``), so
  :meth:`TimerTask.cancel` is O(1).
* Buckets that hold entries are kept in a min-heap keyed by their expiration (Kafka keeps them in a
  ``DelayQueue``).  Advancing the clock only pops the buckets that are due, so it is cheap when
  nothing expires; a popped higher-level bucket is "flushed": its entries are re-inserted and fall
  into finer wheels (or run, when due).

Time is passed in.  All deadlines are rounded *up* to a multiple of ``tick_ms`` before bucketing,
so a task never runs before its deadline and runs no later than ``deadline + tick_ms - 1`` once
:meth:`Timer.advance_clock` has been called with a time at or past that.  (Kafka rounds down and
may fire up to one tick early; with the default ``tick_ms=1`` both are exact.)

Everything is synchronous and single-threaded: the broker drives the timer from its event loop,
calling :meth:`Timer.advance_clock` at :meth:`Timer.next_expiration_ms`.
"""

from __future__ import annotations

import heapq
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

logger = logging.getLogger(__name__)

__all__ = ["CallbackTimerTask", "Timer", "TimerStats", "TimerTask"]


class TimerTask(ABC):
    """A task to run once, ``delay_ms`` after it is added to a :class:`Timer`.

    A task is in at most one timer at a time; adding it again moves it (the old entry is dropped).
    """

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms: int = delay_ms
        self._timer_entry: _TimerTaskEntry | None = None

    @abstractmethod
    def run(self) -> None:
        """Called by the timer once the deadline has passed (or on add, if already passed)."""

    def cancel(self) -> None:
        """Remove this task from its timer, if scheduled. O(1); idempotent."""
        entry = self._timer_entry
        if entry is not None:
            self._timer_entry = None
            entry.remove()

    @property
    def is_scheduled(self) -> bool:
        """True while the task sits in a timer waiting for its deadline."""
        return self._timer_entry is not None

    @property
    def deadline_ms(self) -> int | None:
        """Absolute deadline given when last added to a timer, while scheduled; else None."""
        entry = self._timer_entry
        return None if entry is None else entry.expiration_ms

    def _set_timer_entry(self, entry: _TimerTaskEntry) -> None:
        # Like Kafka's setTimerTaskEntry: a task lives in one place at a time.
        old = self._timer_entry
        if old is not None and old is not entry:
            old.remove()
        self._timer_entry = entry


class CallbackTimerTask(TimerTask):
    """A :class:`TimerTask` that calls ``fn()`` when it fires."""

    def __init__(self, delay_ms: int, fn: Callable[[], object]) -> None:
        super().__init__(delay_ms)
        self._fn = fn

    def run(self) -> None:
        self._fn()


class _TimerTaskEntry:
    """One scheduling of a task. Cancelled when the task no longer points at it."""

    __slots__ = ("bucket", "due_ms", "expiration_ms", "task")

    def __init__(self, task: TimerTask, expiration_ms: int, due_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms  # the task's real deadline
        self.due_ms = due_ms  # deadline rounded up to a multiple of the base tick
        self.bucket: _Bucket | None = None

    @property
    def cancelled(self) -> bool:
        return self.task._timer_entry is not self

    def remove(self) -> None:
        bucket = self.bucket
        if bucket is not None:
            bucket.remove(self)


class _Bucket:
    """Kafka's TimerTaskList: entries sharing one expiration slot of one wheel."""

    __slots__ = ("_counter", "entries", "expiration_ms")

    def __init__(self, counter: list[int]) -> None:
        self.entries: dict[_TimerTaskEntry, None] = {}
        self.expiration_ms = -1
        self._counter = counter  # shared one-element list: the timer's live entry count

    def add(self, entry: _TimerTaskEntry) -> None:
        # An entry is in at most one bucket (it was detached before being re-inserted).
        self.entries[entry] = None
        entry.bucket = self
        self._counter[0] += 1

    def remove(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is self:
            del self.entries[entry]
            entry.bucket = None
            self._counter[0] -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True if it changed (the bucket must then be (re)queued)."""
        if self.expiration_ms == expiration_ms:
            return False
        self.expiration_ms = expiration_ms
        return True

    def detach_all(self) -> list[_TimerTaskEntry]:
        """Remove and return every entry (insertion order) and reset the expiration."""
        entries = list(self.entries)
        self.entries.clear()
        for entry in entries:
            entry.bucket = None
        self._counter[0] -= len(entries)
        self.expiration_ms = -1
        return entries


class _TimingWheel:
    __slots__ = (
        "_counter",
        "_push",
        "buckets",
        "current_ms",
        "interval_ms",
        "overflow",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: list[int],
        push: Callable[[_Bucket], None],
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_ms = start_ms - (start_ms % tick_ms)  # rounded down to a tick
        self.buckets = [_Bucket(counter) for _ in range(wheel_size)]
        self.overflow: _TimingWheel | None = None
        self._counter = counter
        self._push = push

    def add(self, entry: _TimerTaskEntry) -> bool:
        """Insert into this wheel or an overflow wheel; False if due now (or cancelled)."""
        wheel = self
        due_ms = entry.due_ms
        if entry.cancelled:
            return False
        while True:
            if due_ms < wheel.current_ms + wheel.tick_ms:
                # Only reachable on the finest wheel: an overflow wheel is consulted only for
                # deadlines at least one of its ticks past its current time.
                return False
            if due_ms < wheel.current_ms + wheel.interval_ms:
                virtual_id = due_ms // wheel.tick_ms
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                bucket.add(entry)
                if bucket.set_expiration(virtual_id * wheel.tick_ms):
                    wheel._push(bucket)
                return True
            if wheel.overflow is None:
                wheel.overflow = _TimingWheel(
                    wheel.interval_ms,
                    wheel.wheel_size,
                    wheel.current_ms,
                    wheel._counter,
                    wheel._push,
                )
            wheel = wheel.overflow

    def advance_clock(self, time_ms: int) -> None:
        wheel: _TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_ms + wheel.tick_ms:
            wheel.current_ms = time_ms - (time_ms % wheel.tick_ms)
            time_ms = wheel.current_ms
            wheel = wheel.overflow

    @property
    def levels(self) -> int:
        n, wheel = 1, self.overflow
        while wheel is not None:
            n, wheel = n + 1, wheel.overflow
        return n


@dataclass(frozen=True, slots=True)
class TimerStats:
    """Operation counters, for tests and metrics (complexity is asserted by counts)."""

    added: int  # add() calls
    run: int  # tasks run (on add when already due, or by advance_clock)
    cascaded: int  # entries moved from a flushed bucket into another bucket
    buckets_flushed: int  # due buckets popped and emptied
    heap_pushes: int  # bucket (re)queueings
    heap_len: int  # current heap length (stale items included)
    levels: int  # wheels created so far (1 + lazily created overflow wheels)


class Timer:
    """Hierarchical timing wheel timer (Kafka's ``SystemTimer``), driven by explicit time.

    ``start_ms`` should be the caller's (monotonic) time at creation; all later times passed to
    :meth:`add` and :meth:`advance_clock` use the same clock.
    """

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self._now_ms = start_ms
        self._counter = [0]
        self._heap: list[tuple[int, int, _Bucket]] = []
        self._seq = count()
        self._wheel = _TimingWheel(tick_ms, wheel_size, start_ms, self._counter, self._push)
        self._added = 0
        self._run = 0
        self._cascaded = 0
        self._flushed = 0
        self._pushes = 0

    # -- public API ---------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of scheduled (not yet run, not cancelled) tasks."""
        return self._counter[0]

    @property
    def current_ms(self) -> int:
        """The latest time passed to :meth:`advance_clock` (or ``start_ms``)."""
        return self._now_ms

    def add(self, task: TimerTask, *, now_ms: int | None = None) -> bool:
        """Schedule ``task`` to run at ``(now_ms or current_ms) + task.delay_ms``. O(1).

        Pass ``now_ms`` when the timer may lag the caller's clock (the deadline is then relative to
        it); the timer's clock is not advanced.  A task whose deadline is not after the later of
        ``now_ms`` and :attr:`current_ms` runs immediately, inside this call.
        Returns True if the task was scheduled, False if it ran immediately.
        """
        self._added += 1
        base_ms = self._now_ms if now_ms is None else now_ms
        expiration_ms = base_ms + task.delay_ms
        tick = self.tick_ms
        entry = _TimerTaskEntry(task, expiration_ms, -((-expiration_ms) // tick) * tick)
        task._set_timer_entry(entry)
        if expiration_ms <= max(self._now_ms, base_ms):
            task._timer_entry = None
            self._run_task(task)
            return False
        return self._add_entry(entry)

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        """Run every task whose (tick-rounded) deadline is ``<= now_ms``; return them in run order.

        Cost is proportional to the buckets that are due (plus the tasks they hold), not to the
        number of scheduled tasks.  Times earlier than :attr:`current_ms` are ignored.
        Exceptions raised by tasks are logged and do not stop the advance.
        """
        if now_ms < self._now_ms:
            return []
        self._now_ms = now_ms
        fired: list[TimerTask] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            expiration_ms, _, bucket = heapq.heappop(heap)
            if bucket.expiration_ms != expiration_ms:
                continue  # stale: the bucket was flushed (and maybe re-queued) since
            self._flushed += 1
            self._wheel.advance_clock(expiration_ms)
            # Entries are detached first; one cancelled by a sibling's run() is skipped by add().
            for entry in bucket.detach_all():
                if self._wheel.add(entry):
                    self._cascaded += 1
                elif not entry.cancelled:
                    entry.task._timer_entry = None
                    self._run_task(entry.task)
                    fired.append(entry.task)
        # Nothing left is due; let the wheels catch up so new deadlines land in fine buckets.
        self._wheel.advance_clock(now_ms)
        return fired

    def next_expiration_ms(self) -> int | None:
        """Earliest time at which :meth:`advance_clock` has work, or None if nothing is scheduled.

        This is a lower bound on the next task deadline: it may be the time at which a coarse
        bucket must cascade into finer wheels, in which case ask again after advancing.
        """
        heap = self._heap
        while heap:
            expiration_ms, _, bucket = heap[0]
            if bucket.expiration_ms == expiration_ms and bucket.entries:
                return expiration_ms
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration_ms:  # live but emptied by cancellations
                bucket.expiration_ms = -1
        return None

    def clear(self) -> list[TimerTask]:
        """Unschedule every task without running it; return them."""
        removed: list[TimerTask] = []
        wheel: _TimingWheel | None = self._wheel
        while wheel is not None:
            for bucket in wheel.buckets:
                for entry in bucket.detach_all():
                    if not entry.cancelled:
                        entry.task._timer_entry = None
                        removed.append(entry.task)
            wheel = wheel.overflow
        self._heap.clear()
        return removed

    def stats(self) -> TimerStats:
        return TimerStats(
            added=self._added,
            run=self._run,
            cascaded=self._cascaded,
            buckets_flushed=self._flushed,
            heap_pushes=self._pushes,
            heap_len=len(self._heap),
            levels=self._wheel.levels,
        )

    # -- internals ----------------------------------------------------------------------------

    def _push(self, bucket: _Bucket) -> None:
        self._pushes += 1
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._seq), bucket))

    def _add_entry(self, entry: _TimerTaskEntry) -> bool:
        if self._wheel.add(entry):
            return True
        if not entry.cancelled:
            entry.task._timer_entry = None
            self._run_task(entry.task)
        return False

    def _run_task(self, task: TimerTask) -> None:
        self._run += 1
        try:
            task.run()
        except Exception:
            logger.exception("timer task %r failed", task)
