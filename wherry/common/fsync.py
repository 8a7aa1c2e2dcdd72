"""`fsync_path`: make a file's or a directory's contents durable, by its path."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync the file or directory at `path`; nothing if it is missing (deleted meanwhile,
    or never written)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
