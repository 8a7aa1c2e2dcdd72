"""The memory every connection's requests are received into, counted against one bound
(Kafka's `queued.max.request.bytes` and its SimpleMemoryPool), sans-I/O.

A request's bytes are reserved as they arrive, a window at a time (`framing.FrameDecoder`),
never the size its frame announces, and given back once the request is handled. When the
pool has nothing left, a connection that needs more waits (`wait`): its reading pauses and
resumes when a release makes room, first come first served.

As Kafka's pool (built non-strict by the broker), a reservation succeeds while anything is
available, so the pool may go over its bound by a window; a pool with nothing reserved always
grants. Unbounded (`capacity` None, Kafka's -1) it only counts.

Reserving as bytes arrive can do what Kafka's all-at-once reservation cannot: fill the pool
with half-received frames, none of which can complete, while nothing that is whole would
give memory back. Then the oldest waiter may go over the bound with the whole rest of its
frame (one at a time: the overdraft), so some request always completes; the bound is
exceeded by at most one request (`socket.request.max.bytes`), as Kafka's non-strict pool
may be. A peer that stalls with the overdraft is closed as idle, which frees it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

# Kafka reports an unbounded pool's available memory as Long.MAX_VALUE
UNBOUNDED_AVAILABLE = 2**63 - 1

# A waiter, called when memory may be had: `waiter(False)` (there is room) answers whether it
# got what it needed (if not it waits again, last); `waiter(True)` (the overdraft: it may take
# its whole frame over the bound) answers whether it now holds the overdraft, which it gives
# back with `end_overdraft` once that frame is whole or dropped.
Waiter = Callable[[bool], bool]


class MemoryPool:
    __slots__ = ("_overdraft", "_waiters", "capacity", "queued", "used")

    def __init__(self, capacity: int | None = None) -> None:
        """`capacity` in bytes; None (or a negative number: Kafka's -1) for no bound."""
        self.capacity = capacity if capacity is not None and capacity >= 0 else None
        self.used = 0
        self.queued = 0  # of `used`: bytes of whole frames (given back once handled)
        self._overdraft = False
        self._waiters: collections.deque[Waiter] = collections.deque()

    @property
    def bounded(self) -> bool:
        return self.capacity is not None

    @property
    def available(self) -> int:
        if self.capacity is None:
            return UNBOUNDED_AVAILABLE
        return self.capacity - self.used

    @property
    def exhausted(self) -> bool:
        """Whether a reservation would be refused now."""
        return not self._room()

    @property
    def waiting(self) -> int:
        """Connections waiting for memory."""
        return len(self._waiters)

    def _room(self) -> bool:
        return self.capacity is None or self.used == 0 or self.used < self.capacity

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve `nbytes` if the pool is not exhausted (or holds nothing); False otherwise."""
        if self._room():
            self.used += nbytes
            return True
        return False

    def force_reserve(self, nbytes: int) -> None:
        """Count `nbytes` that are held whatever the bound (received before the pool could
        say no, or taken with the overdraft)."""
        self.used += nbytes

    def completed(self, nbytes: int) -> None:
        """`nbytes` reserved for a frame now make a whole frame, to be released once handled."""
        self.queued += nbytes

    def release(self, nbytes: int, *, whole: bool = True) -> None:
        """Give `nbytes` back: a handled frame's (`whole`) or a dropped half-received one's.
        Waiters are called, oldest first, while memory is left."""
        self.used = max(0, self.used - nbytes)  # a bug elsewhere must not unbound the pool
        if whole:
            self.queued = max(0, self.queued - nbytes)
        self._wake()

    def wait(self, waiter: Waiter) -> None:
        """Call `waiter` once memory may be had (see `Waiter`); removed with `cancel`."""
        self._waiters.append(waiter)
        self._wake()

    def cancel(self, waiter: Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    def end_overdraft(self) -> None:
        """The frame that went over the bound is whole (or dropped)."""
        self._overdraft = False
        self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        for _ in range(len(waiters)):
            if not self._room():
                break
            waiter = waiters.popleft()
            if not waiter(False):
                waiters.append(waiter)
        # Nothing whole to give memory back, no room, nobody over the bound: the oldest
        # waiter goes over it, or nothing would ever complete.
        while waiters and not self._room() and self.queued <= 0 and not self._overdraft:
            self._overdraft = waiters.popleft()(True)
