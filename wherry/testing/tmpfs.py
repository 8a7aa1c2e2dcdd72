"""A small tmpfs for tests of full disks: mounted on a directory, unmounted afterwards.

`mount -t tmpfs -o size=N tmpfs DIR` needs root (or CAP_SYS_ADMIN); where it is refused the
caller skips with the reason `mount_tmpfs` raises (`TmpfsUnavailable`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TmpfsUnavailable", "fill_up", "mount_tmpfs", "small_tmpfs", "unmount"]


class TmpfsUnavailable(RuntimeError):
    """Mounting a tmpfs is not permitted here."""


def mount_tmpfs(path: Path, size_bytes: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None or os.geteuid() != 0:
        raise TmpfsUnavailable("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise TmpfsUnavailable(f"mount -t tmpfs refused: {done.stderr.strip()}")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


@contextlib.contextmanager
def small_tmpfs(path: Path, size_bytes: int = 8 << 20) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted on `path` for the block (unmounted after)."""
    mount_tmpfs(path, size_bytes)
    try:
        yield path
    finally:
        unmount(path)


def fill_up(path: Path, leave_bytes: int = 0, *, name: str = "filler.bin") -> Path:
    """Write a filler file `name` in `path` until the disk is full (or `leave_bytes` stay
    free); removing it frees the space."""
    filler = path / name
    chunk = b"\0" * (64 << 10)
    with open(filler, "wb") as f:
        while True:
            free = shutil.disk_usage(path).free
            if free <= leave_bytes:
                break
            try:
                f.write(chunk[: max(1, min(len(chunk), free - leave_bytes))])
                f.flush()
            except OSError:
                break
    return filler
