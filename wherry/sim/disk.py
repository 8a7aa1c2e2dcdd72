"""What a power loss keeps: the bytes of each file that were fsynced.

`DurableFiles` wraps `os.fsync` while a simulation runs and records, per file path, the size
the file had when it was last fsynced (across process incarnations: a restarted broker's
recovery point comes from a checkpoint and can lag what an earlier incarnation already made
durable). It follows renames (`os.rename`, `os.replace`, and so `Path.rename`): a file or a
directory moved keeps what was durable of it under its new path -- a log promoted from another
log dir, a cleaned segment swapped in -- and a file replaced loses what was durable of the old
one. (A rename itself is taken as durable: the log code fsyncs the directories it renames in.)
On a power loss, a segment file keeps its durable prefix plus a seeded random part of what was
written after it, possibly cut mid-batch.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from wherry.common.closeable import Startable


class DurableFiles(Startable):
    """Records fsynced sizes from `start` (``with`` entry) to `stop` (``with`` exit)."""

    def __init__(self) -> None:
        self.durable: dict[str, int] = {}
        self._real_fsync: Any = None  # os.fsync while patched
        self._real_rename: Any = None  # and os.rename, os.replace
        self._real_replace: Any = None

    def start(self) -> DurableFiles:
        self._real_fsync = real = os.fsync

        def fsync(fd: Any) -> None:
            real(fd)
            try:
                no = fd if isinstance(fd, int) else fd.fileno()
                self.durable[os.readlink(f"/proc/self/fd/{no}")] = os.fstat(no).st_size
            except OSError:
                pass

        os.fsync = fsync
        self._real_rename, self._real_replace = os.rename, os.replace
        os.rename = self._following(os.rename)
        os.replace = self._following(os.replace)
        return self

    def _following(self, real: Any) -> Any:
        def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            old, new = _real(src), _real(dst)
            real(src, dst, *args, **kwargs)
            self.moved(old, new)

        return rename

    def moved(self, old: str, new: str) -> None:
        """`old` was renamed `new`: what was durable under `old` (the file, or every file
        beneath the directory) is durable under `new`; a file `new` replaced is gone."""
        durable = self.durable
        if not os.path.isdir(new):
            durable.pop(new, None)
            if (size := durable.pop(old, None)) is not None:
                durable[new] = size
            return
        prefix = old + os.sep
        for key in [k for k in durable if k.startswith(prefix)]:
            durable[new + key[len(old):]] = durable.pop(key)

    def stop(self) -> None:
        if self._real_fsync is not None:
            os.fsync = self._real_fsync
            self._real_fsync = None
        if self._real_rename is not None:
            os.rename, os.replace = self._real_rename, self._real_replace
            self._real_rename = self._real_replace = None

    def lose_unsynced(self, files: list[Path], rng: random.Random) -> list[tuple[Path, int, int]]:
        """Cut each file to its durable size plus a random part of the rest; returns
        (file, size before, size after) for the files that lost bytes."""
        cut: list[tuple[Path, int, int]] = []
        for path in files:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            durable = min(self.durable.get(str(path.resolve()), 0), size)
            if durable < size:
                keep = rng.randint(durable, size)
                if keep < size:
                    os.truncate(path, keep)
                    self.durable[str(path.resolve())] = min(durable, keep)
                    cut.append((path, size, keep))
        return cut


def _real(path: Any) -> str:
    """`path` absolute with its directory's links resolved (as `/proc/self/fd` names it)."""
    head, tail = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(os.path.realpath(head), tail)
