"""One line for a broker start that failed: what went wrong, named as the operator knows it.

`wherry server` prints it as `Error: <line>` and exits 1; the traceback is logged only at
`--log-level DEBUG`. A listener whose port is taken names the listener and the port; a log
dir that is a file, cannot be read or written, or is locked by another broker names the path
and why (the lock's holder by its pid, which a broker records in the `.lock` file it holds;
the embedded metadata store in the first log dir is locked with it).
Anything else is its exception's type and message.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from wherry.coordination.store import StoreError
from wherry.log.dir_lock import LOCK_FILE, lock_holder
from wherry.log.errors import LogDirLockedError, StorageError

if TYPE_CHECKING:
    from wherry.server.config import BrokerConfig

__all__ = ["describe_start_error"]

_ADDRESS = re.compile(r"\('([^']*)', (\d+)\)")

_BIND_REASONS = {
    errno.EADDRINUSE: "is already in use",
    errno.EADDRNOTAVAIL: "cannot be bound: the address is not one of this machine's",
    errno.EACCES: "cannot be bound: permission denied",
}

_PATH_REASONS: dict[type[OSError], str] = {
    FileExistsError: "is not a directory (a file is in its place)",
    NotADirectoryError: "cannot be created: a part of its path is not a directory",
    PermissionError: "cannot be read or written: permission denied",
    FileNotFoundError: "does not exist",
}


def _bind_error(e: OSError, cfg: BrokerConfig | None, bound: int) -> str | None:
    reason = _BIND_REASONS.get(e.errno or 0)
    if reason is None or e.filename is not None or "bind" not in str(e).lower():
        return None
    host, port = None, None
    if (m := _ADDRESS.search(str(e))) is not None:
        host, port = m.group(1), int(m.group(2))
    if cfg is None:
        return f"{host}:{port} {reason}" if port is not None else None
    for ep in cfg.listeners:
        if port is not None and ep.port == port and ep.port != 0:
            return f"listener {ep.listener} ({ep.host}:{ep.port}): port {ep.port} {reason}"
    if port is None and bound < len(cfg.listeners):  # the next listener to bind failed
        ep = cfg.listeners[bound]
        return f"listener {ep.listener} ({ep.host}:{ep.port}): port {ep.port} {reason}"
    where = f"{host}:{port}" if port is not None else "a listener"
    return f"{where} {reason}"


def _log_dir_of(path: Path, log_dirs: Sequence[Path]) -> Path | None:
    for d in log_dirs:
        if path == d or d in path.parents:
            return d
    return None


def _path_error(e: OSError, cfg: BrokerConfig | None) -> str | None:
    if e.filename is None:
        return None
    path = Path(str(e.filename)).absolute()
    why = next((r for t, r in _PATH_REASONS.items() if isinstance(e, t)), None)
    why = why or f"cannot be used: {(e.strerror or str(e)).lower()}"
    if cfg is not None and (d := _log_dir_of(path, [p.absolute() for p in cfg.log_dirs])):
        if path == d:
            return f"log dir {d} {why}"
        return f"log dir {d}: {path} {why}"
    return f"{path} {why}"


def describe_start_error(e: BaseException, cfg: BrokerConfig | None = None, bound: int = 0) -> str:
    """The `Error:` line for a failed start (`bound`: listeners already bound)."""
    if isinstance(e, LogDirLockedError):
        return str(e)
    if isinstance(e, OSError):
        line = _bind_error(e, cfg, bound) or _path_error(e, cfg)
        if line is not None:
            return line
        return f"{(e.strerror or str(e))}" if e.strerror and not e.filename else str(e)
    if isinstance(e, StorageError):
        return f"log dirs: {e}"
    if isinstance(e, StoreError) and "in use by another process" in str(e) and cfg is not None:
        # The embedded store lives in the first log dir, whose lock file names its holder.
        holder = lock_holder(cfg.data_dir / LOCK_FILE)
        if holder is not None:
            return (f"log dir {cfg.data_dir} is locked by process {holder} (another broker "
                    f"using this directory): {e}")
    if type(e) in (RuntimeError, ValueError) and str(e):
        return str(e)  # such a message says it all
    return f"{type(e).__name__}: {e}"
