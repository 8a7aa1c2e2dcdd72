"""Offset commits still being written, per group, and who waits for them.

Kafka 4's group coordinator answers an OffsetFetch that asks for stable offsets
(`require_stable`) as a write: after every commit written before it, with their offsets. It
answers UNSTABLE_OFFSET_COMMIT only for transactional offsets awaiting their marker. Pure:
callbacks, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["OffsetWritesInFlight"]


class OffsetWritesInFlight:
    """Each write gets a number when it starts; a waiter is called once every write that had
    started when it came has ended (however it ended), later writes not waited for."""

    def __init__(self) -> None:
        self._last = 0
        self._open: dict[str, set[int]] = {}
        self._waiters: dict[str, list[tuple[int, Callable[[], None]]]] = {}

    def begin(self, group_id: str) -> int:
        self._last += 1
        self._open.setdefault(group_id, set()).add(self._last)
        return self._last

    def end(self, group_id: str, write: int) -> None:
        open_writes = self._open.get(group_id)
        if open_writes is None:
            return
        open_writes.discard(write)
        oldest = min(open_writes, default=None)
        if oldest is None:
            del self._open[group_id]
        waiting = self._waiters.pop(group_id, [])
        due = [then for upto, then in waiting if oldest is None or oldest > upto]
        rest = [(upto, then) for upto, then in waiting if oldest is not None and oldest <= upto]
        if rest:
            self._waiters[group_id] = rest
        for then in due:
            then()

    def after(self, group_id: str, then: Callable[[], None]) -> None:
        """Call `then` once the group's writes open now have ended (at once if none)."""
        open_writes = self._open.get(group_id)
        if not open_writes:
            then()
            return
        self._waiters.setdefault(group_id, []).append((max(open_writes), then))
