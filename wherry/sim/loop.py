"""A virtual-time asyncio event loop: `time()` is simulated and jumps to the next timer
whenever nothing is ready, so sleeps and timeouts cost no wall-clock time.

Everything runs on one thread; the order of events depends only on the program and the seeded
choices it makes, so a seed replays exactly (given the same PYTHONHASHSEED for set orders of
strings, which the runner pins).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class SimDeadlock(RuntimeError):
    """Nothing is ready and no timer is pending: the simulation cannot make progress."""


class _VirtualSelector:
    """Stands in for the selector: there is no I/O, so waiting means advancing time."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise SimDeadlock("no ready callbacks and no timers")
        if timeout > 0:
            self._loop.advance(timeout)
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """`asyncio.BaseEventLoop` with a virtual clock; `after_step` runs after every loop
    iteration (one batch of ready callbacks), which is where invariants are checked."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        self._selector = _VirtualSelector(self)
        self.steps = 0
        self.after_step: Callable[[], None] | None = None

    def time(self) -> float:
        return self._now

    def now_ms(self) -> int:
        return int(self._now * 1000 + 1e-6)  # 2.0 s summed from floats is 1999.9999... ms

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """File work the broker hands to a thread runs here, inline, at once: a thread would
        finish at a moment of the real clock, and the run would no longer replay (the loop
        would find nothing ready and no timer while the thread works: a false deadlock)."""
        fut: asyncio.Future[T] = self.create_future()
        try:
            fut.set_result(func(*args))
        except Exception as e:  # delivered to the awaiting task, as from a thread
            fut.set_exception(e)
        return fut

    def _run_once(self) -> None:
        super()._run_once()  # type: ignore[misc]
        self.steps += 1
        if self.after_step is not None:
            self.after_step()


class NotSynchronous(RuntimeError):
    """A coordinator call suspended: it was expected to complete in one step."""


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the embedded coordinator's calls) to completion
    right here, so plain functions (fault injection, checks) can read and write the store."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise NotSynchronous("coordinator call suspended")
