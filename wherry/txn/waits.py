"""Requests waiting for a transactional id's change in progress (`TxnWaits`).

A change of a transaction is one write at a time (Kafka's pending state), and between an
end's PrepareCommit/PrepareAbort and its Complete* record the markers are being written. An
add arriving meanwhile (AddPartitionsToTxn, AddOffsetsToTxn, a partition leader's add for a
transactions v2 client) waits here for that change to end and is then decided again, or is
answered CONCURRENT_TRANSACTIONS at its deadline. Pure: time is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

__all__ = ["TxnWaits", "Waiter"]


@dataclass(frozen=True, slots=True)
class Waiter:
    """A request waiting for its transaction's change in progress: decided again
    (`again(now_ms)`) when the change ends, answered with an error (`respond`) when its
    deadline passes or its coordinator moves."""

    deadline_ms: int
    again: Callable[[int], None]
    respond: Callable[[ErrorCode], None]


class TxnWaits:
    def __init__(self) -> None:
        self._waiting: dict[str, list[Waiter]] = {}
        # Called when a wait ends earlier than every other one (the runtime's ticker wakes
        # up for it).
        self.on_earlier_deadline: Callable[[], None] | None = None

    def __len__(self) -> int:
        return sum(len(ws) for ws in self._waiting.values())

    def add(self, tid: str, waiter: Waiter) -> None:
        earliest = self.earliest_deadline_ms()
        self._waiting.setdefault(tid, []).append(waiter)
        if (earliest is None or waiter.deadline_ms < earliest) and self.on_earlier_deadline:
            self.on_earlier_deadline()

    def earliest_deadline_ms(self) -> int | None:
        return min((w.deadline_ms for ws in self._waiting.values() for w in ws), default=None)

    def changed(self, tid: str, now_ms: int) -> None:
        """`tid`'s change ended: decide its waiting requests again, in their order (one may
        start the next change, and the others then wait for that one)."""
        for w in self._waiting.pop(tid, ()):
            w.again(now_ms)

    def fail(self, tids: Callable[[str], bool], error: ErrorCode) -> None:
        """Answer `error` to every request waiting for an id `tids` accepts."""
        for tid in [t for t in self._waiting if tids(t)]:
            for w in self._waiting.pop(tid):
                w.respond(error)

    def expire(self, now_ms: int, error: ErrorCode) -> None:
        """Answer `error` to the requests whose deadline has come."""
        for tid, waiters in list(self._waiting.items()):
            late = [w for w in waiters if w.deadline_ms <= now_ms]
            if not late:
                continue
            rest = [w for w in waiters if w.deadline_ms > now_ms]
            if rest:
                self._waiting[tid] = rest
            else:
                del self._waiting[tid]
            for w in late:
                w.respond(error)
