"""Directories of deleted partition logs on their way out of a log dir.

A deleted log's directory is first renamed `<topic>-<partition>.<unique id>-delete`
(`dir_names.delete_dir_name`), so a restart never takes it for a live log, and removed once
`file.delete.delay.ms` has passed. Either step can fail on a file system error (a read-only
or failing disk, a full inode table, an immutable flag): the directory is then kept here and
the step tried again with a backoff that doubles from `RETRY_BACKOFF_MS` up to
`MAX_RETRY_BACKOFF_MS`. A failure is logged once per directory (a WARNING naming the path and
the error), its success after a failure once more; the caller never sees the error, so the
controller's request that deleted the log is answered and the broker carries on.

Blocking file I/O; `LogManager` calls `run_due` from its periodic work (an executor).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from wherry.common.record import record
from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import fsync_dir
from wherry.log.dir_names import delete_dir_name

__all__ = ["MAX_RETRY_BACKOFF_MS", "RETRY_BACKOFF_MS", "DirDeletions"]

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 1_000
MAX_RETRY_BACKOFF_MS = 60_000


@record
class _Pending:
    """A directory waiting to be deleted, when, and how often it failed so far."""

    path: Path
    due_ms: int
    tp: TopicPartition | None = None  # set while the directory still has to be renamed
    failures: int = 0


def remove_tree(path: Path) -> OSError | None:
    """Remove a directory tree; the first error that left part of it behind, or None."""
    import shutil  # imported only by a start or a deletion that removes something

    errors: list[OSError] = []

    def on_error(_fn: object, _path: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        if isinstance(exc, OSError) and not errors:
            errors.append(exc)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=on_error)
    else:
        shutil.rmtree(path, onerror=lambda fn, p, info: on_error(fn, p, info[1]))
    if not os.path.lexists(path):
        return None
    return errors[0] if errors else OSError(f"{path} is still there after its removal")


class DirDeletions:
    """The directories of deleted logs still to rename or remove, with their retries."""

    def __init__(self, now_ms_fn: Callable[[], int]) -> None:
        self.now_ms_fn = now_ms_fn
        self._pending: list[_Pending] = []
        self._lock = threading.RLock()

    def rename_and_schedule(
        self,
        tp: TopicPartition,
        path: Path,
        delay_ms: int,
        rename: Callable[[Path], object],
        *,
        sync: bool = True,
    ) -> Path | None:
        """Rename `path` (the directory of `tp`'s deleted log) with `rename(target)` and remove
        it after `delay_ms`. Returns the new path, or None when the rename failed: it is then
        retried (on the directory itself) by `run_due`. `sync` False leaves the parent
        directory's fsync, and the removal of a directory due at once, to the caller (who
        renames many: one fsync per parent, then `run_due`)."""
        target = path.parent / delete_dir_name(tp)
        try:
            rename(target)
            if sync:
                fsync_dir(path.parent)  # an error is let go: the removal follows anyway
        except OSError as e:
            self._failed(_Pending(path, 0, tp), e, "rename")
            return None
        self.schedule_removal(target, self.now_ms_fn() + max(0, delay_ms))
        if delay_ms <= 0 and sync:
            self.run_due(self.now_ms_fn())
        return target

    def schedule_removal(self, path: Path, due_ms: int) -> None:
        with self._lock:
            self._pending.append(_Pending(path, due_ms))

    def pending(self) -> list[Path]:
        """The directories still waiting (to be renamed or removed)."""
        with self._lock:
            return [p.path for p in self._pending]

    def awaiting_rename(self, path: Path) -> bool:
        """Whether `path` is a deleted log's directory whose rename has not succeeded yet (no
        new log may be created there until it has)."""
        with self._lock:
            return any(p.tp is not None and p.path == path for p in self._pending)

    def retry_now(self, path: Path) -> bool:
        """Try the pending rename of `path` now: whether it is out of the way."""
        with self._lock:
            entry = next((p for p in self._pending if p.tp is not None and p.path == path), None)
            if entry is None:
                return True
            self._pending.remove(entry)
            if self._retry_rename(entry):
                self._pending.append(entry)  # renamed: removed when due
                return True
            return not os.path.lexists(path)

    def next_due_ms(self) -> int | None:
        with self._lock:
            return min((p.due_ms for p in self._pending), default=None)

    def run_due(self, now_ms: int) -> int:
        """Rename and remove what is due; returns how many directories were removed."""
        with self._lock:
            # Renames under the lock (quick): `awaiting_rename` never misses one in progress.
            for entry in [p for p in self._pending if p.tp is not None and p.due_ms <= now_ms]:
                self._pending.remove(entry)
                if self._retry_rename(entry):  # a failure puts it back, due later
                    self._pending.append(entry)
            due = [p for p in self._pending if p.tp is None and p.due_ms <= now_ms]
            self._pending = [p for p in self._pending if p.tp is not None or p.due_ms > now_ms]
        removed = 0
        for entry in due:
            error = remove_tree(entry.path)
            if error is not None:
                self._failed(entry, error, "remove")
                continue
            removed += 1
            if entry.failures:
                log.info("removed %s after %d failed attempts", entry.path, entry.failures)
        return removed

    def _retry_rename(self, entry: _Pending) -> bool:
        assert entry.tp is not None
        target = entry.path.parent / delete_dir_name(entry.tp)
        try:
            entry.path.rename(target)
            fsync_dir(entry.path.parent)
        except FileNotFoundError:
            return False  # gone meanwhile: nothing left to do
        except OSError as e:
            self._failed(entry, e, "rename")
            return False
        log.info("renamed %s to %s after %d failed attempts", entry.path, target.name,
                 entry.failures)
        entry.path, entry.tp = target, None
        return True

    def _failed(self, entry: _Pending, error: OSError, step: str) -> None:
        if entry.failures == 0:
            log.warning("could not %s the directory of a deleted log %s: %s; retrying "
                        "until it succeeds", step, entry.path, error)
        entry.failures += 1
        backoff = min(MAX_RETRY_BACKOFF_MS, RETRY_BACKOFF_MS << min(entry.failures - 1, 16))
        entry.due_ms = self.now_ms_fn() + backoff
        with self._lock:
            self._pending.append(entry)
