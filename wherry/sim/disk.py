"""What a power loss keeps: the bytes of each file that were fsynced.

`DurableFiles` wraps `os.fsync` while a simulation runs and records, per file path, the size
the file had when it was last fsynced (across process incarnations: a restarted broker's
recovery point comes from a checkpoint and can lag what an earlier incarnation already made
durable). On a power loss, a segment file keeps its durable prefix plus a seeded random part
of what was written after it, possibly cut mid-batch.
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
        return self

    def stop(self) -> None:
        if self._real_fsync is not None:
            os.fsync = self._real_fsync
            self._real_fsync = None

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
