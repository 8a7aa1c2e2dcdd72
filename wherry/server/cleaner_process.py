"""The log cleaner's worker process in `wherry server`: the cleaner's threads hand each clean's
job (`wherry.log.clean_job.run_clean_job`: reading the dirty segments, the offset map, the
rebuilt batches, the fsynced `.cleaned` files) to it, so that this CPU work does not hold the
broker's GIL while the event loop serves requests; the broker keeps the choice of the log, the
snapshot and the swap.

One worker (`concurrent.futures.ProcessPoolExecutor`, `forkserver` start: nothing is forked
from the threaded broker), started at the first clean that has work, not at broker start, and
run at a lower CPU priority than the broker.
A worker that dies mid-clean fails that clean (`CleanerWorkerLost`, logged): its output is
deleted and the next round starts a new one. The broker's stop kills it (`close`); a broker
killed outright takes it along: the worker reads a pipe whose only write end the broker holds,
and exits when it closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING

from wherry.log.clean_job import CleanerWorkerLost, CleanJob, CleanOutput, run_clean_job

if TYPE_CHECKING:  # imported at the first clean: not part of the broker's start
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing.connection import Connection

__all__ = ["CleanerProcess"]

log = logging.getLogger(__name__)

# How much nicer than its broker the worker runs. Cleaning is background work: on a busy
# machine the broker's event loop and its clients must get a core the moment they wake, or a
# request waits behind a clean for a scheduler time slice (bench/sustained.py at 1,000
# records/s, cleaning every second: p99 2.0-2.4 ms with the worker at the broker's priority,
# 1.2-1.7 ms at 10 or 19 nicer, 0.7-0.8 ms with the cleaner off). At 10 it still gets about a
# tenth of a core that the broker keeps busy, so compaction goes on under full load.
WORKER_NICENESS = 10


def _init_worker(broker_end: Connection) -> None:
    """In the worker: a lower CPU priority (`WORKER_NICENESS`), Ctrl-C left to the broker (it
    stops the worker), and an exit as soon as the broker's end of the `broker_end` pipe closes
    (the broker exited, however)."""
    os.nice(WORKER_NICENESS)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(
        target=_exit_with_broker, args=(broker_end,), name="cleaner-broker-watch", daemon=True
    ).start()


def _exit_with_broker(broker_end: Connection) -> None:
    with contextlib.suppress(EOFError, OSError):
        while True:
            broker_end.recv_bytes()
    os._exit(0)


class CleanerProcess:
    """Runs clean jobs in one worker process (a `LogCleaner` runner); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._pipe: tuple[Connection, Connection] | None = None  # the worker's, the broker's
        self._pid: int | None = None  # the worker's, asked of it once it runs
        self._closed = False

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise CleanerWorkerLost("the log cleaner is stopped")
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                ctx = multiprocessing.get_context("forkserver")
                # the forkserver imports the cleaning code only, not the broker's main module
                ctx.set_forkserver_preload(["wherry.log.clean_job"])
                self._drop_pipe()
                self._pipe = ctx.Pipe(duplex=False)  # only the broker holds the write end
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=ctx,
                    initializer=_init_worker,
                    initargs=(self._pipe[0],),
                )
                self._pid = self._pool.submit(os.getpid).result()
                log.info("Log cleaner worker process started (pid %d)", self._pid)
            return self._pool

    def __call__(self, job: CleanJob) -> CleanOutput | None:
        from concurrent.futures.process import BrokenProcessPool

        pool = self._executor()
        try:
            return pool.submit(run_clean_job, job).result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool, self._pid = None, None
                closed = self._closed
            pool.shutdown(wait=False, cancel_futures=True)
            if not closed:
                log.error(
                    "The log cleaner's worker process died while cleaning %s; its output is "
                    "deleted, a new worker starts next round",
                    job.dir,
                )
            raise CleanerWorkerLost(str(exc)) from exc

    def _drop_pipe(self) -> None:
        if self._pipe is not None:
            for end in self._pipe:
                end.close()
            self._pipe = None

    def pids(self) -> list[int]:
        """The worker's process id, once started."""
        with self._lock:
            return [self._pid] if self._pool is not None and self._pid is not None else []

    def close(self) -> None:
        """Stop the worker (killed: a clean in progress fails, its output is deleted)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            pid, self._pid = self._pid, None
            self._drop_pipe()
        if pool is None:
            return
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pool.shutdown(wait=True, cancel_futures=True)
