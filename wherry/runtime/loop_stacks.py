"""The stack of the event loop's thread in the middle of a stall, for its log line.

The loop cannot look at itself while something holds it, and a Python thread watching it would
need the GIL the stall may be holding. `faulthandler`'s watchdog is a C thread that needs no
GIL: armed with a timeout at every wake-up of the loop-lag monitor, it writes the stack of
every thread to a temporary file if the monitor does not wake (and arm it again) in time, that
is `STALL_MS` into a stall. The monitor then reads the loop thread's part of it (`take`).

faulthandler has one watchdog a process: one `StackWatch` a process, for the process's one
event loop (`wherry server`; brokers sharing a process, as `wherry dev` runs them, go
without). A whole process stopped (a paused machine, SIGSTOP) stops the watchdog too: such a
stall may come without a stack."""

from __future__ import annotations

import faulthandler
import os
import struct
import tempfile
import threading
from typing import Final

__all__ = ["StackWatch", "loop_frames"]

# Frames of the start and of the event loop itself: the loop thread's stack is cut below the
# innermost of them (what the loop was running, from its callback up).
_LOOP_FILES: Final = (
    "/asyncio/events.py",
    "/asyncio/base_events.py",
    "/asyncio/runners.py",
    "/uvloop/__init__.py",
)
MAX_FRAMES: Final = 30
# faulthandler writes a thread's id as hex digits of a C unsigned long, zero-padded
_ID_DIGITS: Final = 2 * struct.calcsize("L")


class StackWatch:
    """Made on the loop's thread (the one whose stack it takes)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - kept open until `close`
        self._fd = self._file.fileno()
        self._header = f"Thread 0x{threading.get_ident():0{_ID_DIGITS}x}"

    def arm(self, timeout_s: float) -> None:
        """Write the stacks if not armed again (or closed) within `timeout_s`."""
        faulthandler.dump_traceback_later(timeout_s, repeat=False, file=self._fd)

    def take(self) -> tuple[str, ...] | None:
        """The loop thread's frames (innermost first, `File "...", line N in f`) written since
        the last take, None if the watchdog wrote nothing; clears what was written."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return None
        text = os.pread(self._fd, size, 0).decode(errors="replace")
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        return loop_frames(text, self._header)

    def clear(self) -> None:
        """Drop anything written (a dump that raced with an on-time wake-up)."""
        if os.fstat(self._fd).st_size:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self._file.close()


def loop_frames(dump: str, header: str) -> tuple[str, ...] | None:
    """The frames of the thread `header` ("Thread 0x...") in a faulthandler dump, innermost
    first, cut below the event loop's own frames and to `MAX_FRAMES`; None if it is not
    there."""
    lines = dump.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        return None
    frames: list[str] = []
    for line in lines[start + 1 :]:
        line = line.strip()
        if not line.startswith("File "):
            break
        if any(f in line for f in _LOOP_FILES):
            break
        frames.append(line)
    return tuple(frames[:MAX_FRAMES])
