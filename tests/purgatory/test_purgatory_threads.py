"""A purgatory belongs to one thread and tells a sleeping ticker of earlier deadlines."""

from __future__ import annotations

import threading

from wherry.purgatory.operation import DelayedOperation
from wherry.purgatory.purgatory import DelayedOperationPurgatory, ForeignThreadError


class _Op(DelayedOperation):
    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass


def test_a_purgatory_refuses_calls_from_a_foreign_thread() -> None:
    purgatory: DelayedOperationPurgatory[_Op] = DelayedOperationPurgatory("test")
    purgatory.try_complete_else_watch(_Op(10_000), ["k"], now_ms=0)
    errors: list[BaseException] = []

    def other_thread() -> None:
        for call_it in (
            lambda: purgatory.check_and_complete("k"),
            lambda: purgatory.try_complete_else_watch(_Op(10_000), ["k"], now_ms=0),
            lambda: purgatory.advance_clock(1),
        ):
            try:
                call_it()
            except ForeignThreadError as e:
                errors.append(e)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert len(errors) == 3
    assert purgatory.watched("k") == 1  # nothing changed


def test_parking_an_earlier_deadline_wakes_whoever_sleeps_on_the_purgatory() -> None:
    purgatory: DelayedOperationPurgatory[_Op] = DelayedOperationPurgatory("test")
    woken: list[int] = []
    purgatory.on_earlier_deadline = lambda: woken.append(1)
    purgatory.try_complete_else_watch(_Op(5_000), ["a"], now_ms=0)
    assert len(woken) == 1  # first deadline
    purgatory.try_complete_else_watch(_Op(9_000), ["a"], now_ms=0)
    assert len(woken) == 1  # later than the earliest: the sleeper's plan holds
    purgatory.try_complete_else_watch(_Op(1_000), ["b"], now_ms=0)
    assert len(woken) == 2
