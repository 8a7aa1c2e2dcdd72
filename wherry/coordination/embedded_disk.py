"""The embedded metadata store's disk: the space it keeps in reserve beside its file, and
what SQLite's errors say of the disk (full, or failing)."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

__all__ = ["RESERVE_BYTES", "RESERVE_FILE", "disk_failed", "disk_full", "keep_reserve",
           "release_reserve"]

logger = logging.getLogger(__name__)

RESERVE_FILE = "reserve"
RESERVE_BYTES = 1 << 20
"""Space the store keeps allocated beside its file (`__meta/reserve`): released when its disk
is too full to open the store, so a broker still starts (after a kill on a full disk)."""


def keep_reserve(path: Path) -> None:
    """Allocate the reserve if missing (no data written: `posix_fallocate`)."""
    if path.exists():
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        finally:
            os.close(fd)
    except OSError as e:  # no room for it now: the next start tries again
        logger.warning("could not reserve %d bytes for the metadata store at %s: %s",
                       RESERVE_BYTES, path, e.strerror or e)
        path.unlink(missing_ok=True)


def release_reserve(path: Path | None) -> bool:
    """Free the reserve for the store to open on a full disk; True if there was one."""
    if path is None or not path.exists():
        return False
    path.unlink()
    logger.warning("the metadata store's disk is full: released its reserve %s (%d bytes) to "
                   "open it; free space on that disk", path, RESERVE_BYTES)
    return True


def disk_full(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", 0) & 0xFF
    return code == sqlite3.SQLITE_FULL or "disk is full" in str(e)


def disk_failed(e: sqlite3.Error) -> bool:
    """A full disk or an I/O error (not a constraint, a lock, a misuse)."""
    code = getattr(e, "sqlite_errorcode", 0) & 0xFF
    return disk_full(e) or code == sqlite3.SQLITE_IOERR or "disk I/O error" in str(e)
