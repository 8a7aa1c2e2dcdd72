"""Moving replicas between this broker's log dirs in the background (Kafka's
ReplicaAlterLogDirsManager and its thread).

AlterReplicaLogDirs creates a future log (`LogManager.create_future_log`) and kicks the mover.
One asyncio task then copies, round after round, a chunk of each moving partition into its
future log, each step's blocking file I/O in an executor so the event loop keeps serving (inline
in the simulator, `blocking_in_executor=False`: deterministic, no threads); a
partition whose copy reached the current log's end is promoted (`promote_future_log`: the
last batches under the log's lock, then the directory swap). The task ends when nothing is
left to move and is kicked again by the next request, or at start for moves a restart
interrupted. `replica.alter.log.dirs.io.max.bytes.per.second` bounds the copy rate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from wherry.common.topic_partition import TopicPartition
from wherry.log.errors import LogError
from wherry.log.manager import LogManager
from wherry.runtime.tasks import wait_event

__all__ = ["LogDirMover"]

log = logging.getLogger(__name__)

UNLIMITED = 2**63 - 1
CHUNK_BYTES = 1 << 20
IDLE_RETRY_S = 0.05

_T = TypeVar("_T")


class LogDirMover:
    def __init__(
        self,
        log_manager: LogManager,
        *,
        io_max_bytes_per_second: int = UNLIMITED,
        chunk_bytes: int = CHUNK_BYTES,
        blocking_in_executor: bool = True,
    ) -> None:
        self.log_manager = log_manager
        self.blocking_in_executor = blocking_in_executor
        self._max_chunk_bytes = chunk_bytes
        self.set_rate(io_max_bytes_per_second)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self.moves_completed = 0

    def set_rate(self, io_max_bytes_per_second: int) -> None:
        """Bound the copy rate (bytes/s; 0 or less: unbounded), from the next step on."""
        self.rate = io_max_bytes_per_second if io_max_bytes_per_second > 0 else UNLIMITED
        # A step copies at most a second's worth under a rate limit (at least one batch).
        self.chunk_bytes = max(1, min(self._max_chunk_bytes, self.rate))

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def kick(self) -> None:
        """Start moving (or wake the mover): new future logs exist."""
        if self._stopping:
            return
        if self.running:
            self._wake.set()
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-log-dirs")

    async def stop(self) -> None:
        """Stop after the step in progress (a copy or a promotion is never cut short); the
        future logs stay on disk and the move resumes at the next start."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            try:
                await self._task
            except Exception:  # pragma: no cover - logged by _run
                pass

    def abandon(self) -> None:
        """The process is gone (the simulator's crash): the mover ends where it is, between
        two steps (a step is never cut short), and writes nothing more."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()

    async def _blocking(self, fn: Callable[..., _T], *args: Any) -> _T:
        if not self.blocking_in_executor:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            moving = [f.topic_partition for f in self.log_manager.future_logs()]
            if not moving:
                return
            copied = 0
            for tp in moving:
                if self._stopping:
                    return
                copied += await self._step(tp)
            if self.rate != UNLIMITED and copied:
                await wait_event(self._wake, copied / self.rate)
            elif not copied:
                await wait_event(self._wake, IDLE_RETRY_S)

    async def _step(self, tp: TopicPartition) -> int:
        lm = self.log_manager
        try:
            step = await self._blocking(lm.copy_to_future, tp, self.chunk_bytes)
            # The copy reached the current log's end: promote (what arrived since is copied
            # under the log's lock).
            if (
                step.caught_up
                and not self._stopping
                and await self._blocking(lm.promote_future_log, tp)
            ):
                self.moves_completed += 1
            return step.copied
        except (LogError, OSError, ValueError) as e:
            future = lm.future_log(tp)
            if future is None or future.closed:
                return 0  # the move was cancelled or the partition deleted meanwhile
            log.error("moving %s to %s failed, giving up the move: %s",
                      tp, lm.future_dir_of(tp), e)
            await self._blocking(lm.remove_future_log, tp)
            return 0
