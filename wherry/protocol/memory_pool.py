"""The memory every connection's requests are received into, counted against one bound
(Kafka's `queued.max.request.bytes` and its SimpleMemoryPool), sans-I/O.

A request's bytes are reserved as they arrive, a window at a time (`framing.FrameDecoder`),
never the size its frame announces, and given back once the request is handled. When the
pool has nothing left, a connection that needs more waits (`wait`): its reading pauses and
resumes when a release makes room, first come first served.

As Kafka's pool (built non-strict by the broker), a reservation succeeds while anything is
available, so the pool may go over its bound by at most one window; a pool with nothing
reserved always grants (a frame larger than the whole pool can still be received, alone).
Unbounded (`capacity` None, Kafka's -1) it only counts.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

# Kafka reports an unbounded pool's available memory as Long.MAX_VALUE
UNBOUNDED_AVAILABLE = 2**63 - 1


class MemoryPool:
    __slots__ = ("_waiters", "capacity", "used")

    def __init__(self, capacity: int | None = None) -> None:
        """`capacity` in bytes; None (or a negative number: Kafka's -1) for no bound."""
        self.capacity = capacity if capacity is not None and capacity >= 0 else None
        self.used = 0
        self._waiters: collections.deque[Callable[[], bool]] = collections.deque()

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

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve `nbytes` if the pool is not exhausted (or holds nothing); False otherwise."""
        if self._room():
            self.used += nbytes
            return True
        return False

    def force_reserve(self, nbytes: int) -> None:
        """Count `nbytes` that are already held (received before the pool could say no)."""
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        """Give `nbytes` back; waiters are called, oldest first, while memory is left."""
        self.used -= nbytes
        if self.used < 0:  # a bug elsewhere must not make the pool unbounded
            self.used = 0
        waiters = self._waiters
        for _ in range(len(waiters)):
            if not self._room():
                break
            # a waiter returns False when it still needs memory: it waits again, last
            waiter = waiters.popleft()
            if not waiter():
                waiters.append(waiter)

    def _room(self) -> bool:
        return self.capacity is None or self.used == 0 or self.used < self.capacity

    def wait(self, waiter: Callable[[], bool]) -> None:
        """Call `waiter` once memory is released. It returns whether it got what it needed;
        if not it waits again. A waiter is removed with `cancel`."""
        self._waiters.append(waiter)

    def cancel(self, waiter: Callable[[], bool]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
