"""A failing log directory (Kafka's LogDirFailureChannel, KIP-112).

An I/O error (`OSError`: ENOSPC, EIO, ...) while a log appends, rolls, flushes, truncates,
writes an index or a checkpoint takes the log directory it happened in offline, once: the
first error of a dir is logged (one line, with its cause) and handed to the channel's
listeners; later errors of that dir are only counted. The caller of the failed operation gets
a `StorageError` (KAFKA_STORAGE_ERROR), never the raw `OSError`.

What going offline means is decided above the log layer: the replica node stops serving and
fetching the dir's partitions, the log manager forgets their logs (nothing more is written to
that dir, no checkpoint, no clean-shutdown marker, so the next start recovers it), and the
controller is told, which moves their leadership to replicas on other brokers.

`io_guarded` wraps a `Log` method: an `OSError` out of it reports the log's parent directory
to the log's `on_io_error` hook (set by the log manager) and becomes a `StorageError`; from
then on every guarded method of that log fails at once (`io_failed`): a write cut short may
have left a partial batch and index entries past it, and nothing may be appended after them
(the next start's recovery truncates the log at the partial batch).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from wherry.log.errors import StorageError

__all__ = ["IoErrorHook", "LogDirFailureChannel", "io_guarded", "storage_error"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

IoErrorHook = Callable[[Path, str, OSError], object]
"""(log dir, what failed, the error): what a log calls when its files fail."""

OfflineListener = Callable[[Path], object]


class _GuardedLog(Protocol):
    @property
    def dir(self) -> Path: ...

    on_io_error: IoErrorHook | None
    io_failed: str | None


def storage_error(what: str, dir: Path, exc: OSError) -> StorageError:
    """The StorageError a caller gets for an I/O error of `dir` (cause kept)."""
    err = StorageError(f"{what} in dir {dir} failed: {exc.strerror or exc}")
    err.__cause__ = exc
    return err


def io_guarded(
    what: str,
) -> Callable[[Callable[Concatenate[Any, P], R]], Callable[Concatenate[Any, P], R]]:
    """Decorate a `Log` method: an `OSError` marks the log's parent dir offline (through the
    log's `on_io_error`) and is raised as a `StorageError`."""

    def wrap(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
        @functools.wraps(method)
        def guarded(self: _GuardedLog, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if self.io_failed is not None:
                raise StorageError(
                    f"{what} {self.dir.name} refused: an earlier I/O error ({self.io_failed})"
                )
            try:
                return method(self, *args, **kwargs)
            except OSError as e:
                parent = self.dir.parent
                hook = self.on_io_error
                doing = f"{what} {self.dir.name}"
                self.io_failed = f"{doing}: {e.strerror or e}"
                if hook is not None:
                    hook(parent, doing, e)
                raise storage_error(doing, parent, e) from e

        return guarded

    return wrap


class LogDirFailureChannel:
    """Which log dirs went offline, and who must hear of it. Thread-safe: the errors come
    from the event loop and from the scheduler's executor threads alike; listeners are called
    on the thread that hit the first error of a dir (a listener that needs its event loop
    hands the work over itself)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: dict[Path, str] = {}
        self._errors: dict[Path, int] = {}
        self._listeners: list[OfflineListener] = []

    def add_listener(self, listener: OfflineListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def has_offline(self, dir: Path) -> bool:
        return Path(dir) in self._offline

    def offline_dirs(self) -> dict[Path, str]:
        """Offline dirs and the first error each had."""
        with self._lock:
            return dict(self._offline)

    def errors(self, dir: Path) -> int:
        """I/O errors seen in `dir` (the first one took it offline)."""
        return self._errors.get(Path(dir), 0)

    def maybe_add_offline(self, dir: Path, what: str, exc: BaseException) -> bool:
        """Record an I/O error of `dir`; True (and the listeners called) for its first."""
        dir = Path(dir)
        with self._lock:
            self._errors[dir] = self._errors.get(dir, 0) + 1
            if dir in self._offline:
                return False
            reason = f"{what}: {exc}"
            self._offline[dir] = reason
            listeners = list(self._listeners)
        log.error("Error while %s; log dir %s is offline", reason, dir)
        for listener in listeners:
            try:
                listener(dir)
            except Exception:
                log.exception("log dir failure listener failed for %s", dir)
        return True
