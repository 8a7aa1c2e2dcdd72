"""A small asyncio periodic-task scheduler for broker housekeeping (Kafka's ``KafkaScheduler``).

Each scheduled job runs in its own asyncio task, first after ``delay_ms`` and then every
``period_ms`` (fixed rate; runs missed while a slow run was in progress are skipped, not bunched).
A failing run is logged and counted; it never stops the job or the scheduler.  Blocking sync jobs
(fsync, file deletion) can run in the loop's default executor with ``executor=True``; a scheduler
built with ``blocking_in_executor=False`` runs them inline on the loop instead (the simulator:
deterministic, no threads).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from wherry.runtime.clock import Clock, SystemClock

logger = logging.getLogger(__name__)

__all__ = ["Job", "ScheduledTask", "Scheduler"]

Job = Callable[[], Any]
"""A no-argument callable: sync, or async (returning an awaitable)."""


class ScheduledTask:
    """Handle for one scheduled job: run counters and cancellation."""

    def __init__(
        self, name: str, fn: Job, period_ms: int | None, delay_ms: int, executor: bool
    ) -> None:
        self.name = name
        self.fn = fn
        self.period_ms = period_ms
        self.delay_ms = delay_ms
        self.executor = executor
        self.runs = 0  # completed runs, successful or not
        self.failures = 0
        self.last_error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        """True once cancelled, or after the single run of a one-shot job."""
        return self._task is not None and self._task.done()

    def cancel(self) -> None:
        """Stop future runs (an in-flight executor run finishes in its thread)."""
        if self._task is not None:
            self._task.cancel()

    async def wait(self) -> None:
        """Wait until the job is done (one-shot finished, or cancelled)."""
        if self._task is not None:
            await asyncio.wait([self._task])

    def __repr__(self) -> str:
        return (
            f"<ScheduledTask {self.name!r} period_ms={self.period_ms} runs={self.runs} "
            f"failures={self.failures}{' done' if self.done else ''}>"
        )


class Scheduler:
    """Runs named periodic jobs on the running event loop."""

    def __init__(self, clock: Clock | None = None, *, blocking_in_executor: bool = True) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        # False: ``executor=True`` jobs run inline on the loop, in the order they fall due.
        self.blocking_in_executor = blocking_in_executor
        self._tasks: dict[str, ScheduledTask] = {}
        self._shut_down = False

    def schedule(
        self,
        name: str,
        fn: Job,
        *,
        period_ms: int | None,
        delay_ms: int = 0,
        executor: bool = False,
    ) -> ScheduledTask:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` (``None``: run once).

        ``fn`` is a sync callable or an async function.  ``executor=True`` runs a sync ``fn`` in
        the loop's default executor (inline when the scheduler's ``blocking_in_executor`` is
        False).  Names must be unique among live jobs.  Must be called
        with a running event loop.
        """
        if self._shut_down:
            raise RuntimeError("scheduler is shut down")
        if period_ms is not None and period_ms <= 0:
            raise ValueError(f"period_ms must be > 0 or None, got {period_ms}")
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        if executor and inspect.iscoroutinefunction(fn):
            raise ValueError("executor=True needs a sync callable, got an async function")
        existing = self._tasks.get(name)
        if existing is not None and not existing.done:
            raise ValueError(f"a job named {name!r} is already scheduled")
        loop = asyncio.get_running_loop()
        handle = ScheduledTask(name, fn, period_ms, delay_ms, executor)
        task = loop.create_task(self._loop(handle), name=f"scheduler:{name}")
        handle._task = task
        self._tasks[name] = handle
        task.add_done_callback(lambda _t: self._forget(handle))
        return handle

    def cancel(self, name: str) -> bool:
        """Cancel the live job named ``name``; False if there is none."""
        handle = self._tasks.get(name)
        if handle is None or handle.done:
            return False
        handle.cancel()
        return True

    def get(self, name: str) -> ScheduledTask | None:
        return self._tasks.get(name)

    @property
    def names(self) -> list[str]:
        """Names of live jobs."""
        return [n for n, h in self._tasks.items() if not h.done]

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    async def shutdown(self) -> None:
        """Cancel every job and wait for them to stop (including in-flight executor runs).
        Idempotent; no job may be scheduled afterwards."""
        self._shut_down = True
        tasks = [h._task for h in self._tasks.values() if h._task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    def cancel_all(self) -> None:
        """Cancel every job at once without waiting (a killed process: nothing more runs;
        an in-flight executor run still ends in its thread)."""
        for handle in list(self._tasks.values()):
            handle.cancel()

    # -- internals ----------------------------------------------------------------------------

    def _forget(self, handle: ScheduledTask) -> None:
        if self._tasks.get(handle.name) is handle:
            del self._tasks[handle.name]

    async def _loop(self, handle: ScheduledTask) -> None:
        clock = self.clock
        next_ms = clock.monotonic_ms() + handle.delay_ms
        while True:
            wait_ms = next_ms - clock.monotonic_ms()
            await asyncio.sleep(max(wait_ms, 0) / 1000)
            await self._run_once(handle)
            if handle.period_ms is None:
                return
            now_ms = clock.monotonic_ms()
            next_ms += handle.period_ms
            if next_ms < now_ms:  # overran: skip the missed runs instead of bunching them
                logger.debug("scheduled job %s overran its period", handle.name)
                next_ms = now_ms

    async def _run_once(self, handle: ScheduledTask) -> None:
        try:
            if handle.executor and self.blocking_in_executor:
                await _run_in_executor(handle.fn)
            else:
                result = handle.fn()
                if inspect.isawaitable(result):
                    await result
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are being cancelled (shutdown / cancel())
            handle.runs += 1
            handle.failures += 1
            handle.last_error = exc
            logger.error("scheduled job %s was cancelled from inside", handle.name)
        except Exception as exc:
            handle.runs += 1
            handle.failures += 1
            handle.last_error = exc
            logger.exception("scheduled job %s failed", handle.name)
        else:
            handle.runs += 1


async def _run_in_executor(fn: Callable[[], Any]) -> None:
    """Run ``fn`` in the default executor; if cancelled meanwhile, still wait for it to end so
    that shutdown does not race an in-flight fsync/delete, then re-raise the cancellation."""
    fut: Awaitable[Any] = asyncio.get_running_loop().run_in_executor(None, fn)
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:
        try:
            await fut
        except Exception:
            logger.exception("executor job failed while being cancelled")
        raise
