"""A log dir's lock: an exclusive `flock` on its `.lock` file, held while a broker uses the
dir, so a second broker started on the same dir stops at once instead of corrupting it. The
file records the holder's pid, so the second one can say which process holds it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from wherry.log.errors import LogDirLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "lock_dir", "lock_holder", "unlock_dir"]

LOCK_FILE = ".lock"


def lock_dir(dir: Path) -> int | None:
    """Lock `dir`: the open lock file's descriptor (None where locks are not supported);
    LogDirLockedError, naming the holder, if another process holds it."""
    if fcntl is None:
        return None
    path = dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        holder = lock_holder(path)
        who = (f"process {holder} (another broker using this directory)" if holder
               else "another process or broker instance")
        raise LogDirLockedError(f"log dir {dir} is locked by {who}; lock file {path}") from None
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock_dir(fd: int) -> None:
    """Release a lock taken by `lock_dir` (closing the descriptor drops the `flock`)."""
    with contextlib.suppress(OSError):
        os.close(fd)


def lock_holder(path: Path) -> int | None:
    """The pid a log dir's `.lock` file records, if that process is alive."""
    try:
        pid = int(path.read_text().strip() or "0")
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # signal 0: is it alive?
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid
