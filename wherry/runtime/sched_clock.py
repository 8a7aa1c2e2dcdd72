"""What the operating system says of the thread running the event loop, as counters: how long
it ran, how long it waited for a CPU, how long the whole process ran, and how much CPU time the
host took from this machine (steal). Read from `/proc` (Linux); what a system does not give is
None. The loop-lag monitor reads them at each wake-up to tell what held a late one.

A `SchedClock` reads the thread that made it (`/proc/thread-self`): make it on the loop's
thread."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Final

from wherry.common.record import frozen_record

__all__ = ["SchedClock", "SchedSample"]

_NS_PER_MS: Final = 1_000_000


@frozen_record
class SchedSample:
    """Counters in ms since some start; differences of two samples are what counts."""

    ran_ms: float  # the thread's CPU time
    waited_ms: float | None  # runnable but without a CPU (schedstat's run delay)
    process_ms: float  # the CPU time of all the process's threads
    steal_ms: float | None  # taken by the host from all of this machine's CPUs


class SchedClock:
    """Samples of the calling thread (see the module docstring). `proc` is where procfs is."""

    def __init__(self, proc: str = "/proc") -> None:
        self._schedstat = _open(f"{proc}/thread-self/schedstat")
        self._stat = _open(f"{proc}/stat")
        self._ms_per_tick = 1000 / os.sysconf("SC_CLK_TCK") if self._stat is not None else 0.0

    def sample(self) -> SchedSample:
        ran_ms: float | None = None
        waited_ms: float | None = None
        if self._schedstat is not None:
            # "<on cpu ns> <run delay ns> <timeslices>"
            fields = os.pread(self._schedstat, 128, 0).split()
            if len(fields) >= 2:
                ran_ms = int(fields[0]) / _NS_PER_MS
                waited_ms = int(fields[1]) / _NS_PER_MS
        if ran_ms is None:
            ran_ms = time.thread_time_ns() / _NS_PER_MS
        return SchedSample(
            ran_ms, waited_ms, time.process_time_ns() / _NS_PER_MS, self._steal_ms()
        )

    def _steal_ms(self) -> float | None:
        if self._stat is None:
            return None
        # "cpu  user nice system idle iowait irq softirq steal ..." (in clock ticks)
        first = os.pread(self._stat, 256, 0).split(b"\n", 1)[0].split()
        if len(first) < 9 or first[0] != b"cpu":
            return None
        return int(first[8]) * self._ms_per_tick

    def close(self) -> None:
        for fd in (self._schedstat, self._stat):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._schedstat = self._stat = None


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
