"""What the simulated power loss keeps: fsynced bytes, followed through renames."""

from __future__ import annotations

import os
import random
from pathlib import Path

from wherry.sim.disk import DurableFiles


def _write(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _lose(disk: DurableFiles, *files: Path) -> None:
    class NoneKept(random.Random):
        def randint(self, a: int, b: int) -> int:
            return a  # keep only the durable prefix

    disk.lose_unsynced(list(files), NoneKept())


def test_unsynced_bytes_are_lost_synced_ones_kept(tmp_path: Path) -> None:
    f = tmp_path / "a.log"
    with DurableFiles() as disk:
        _write(f, b"x" * 100, sync=True)
        _write(f, b"y" * 50, sync=False)
        _lose(disk, f)
    assert f.read_bytes() == b"x" * 100


def test_a_directory_renamed_keeps_what_was_durable_in_it(tmp_path: Path) -> None:
    """A log promoted from another log dir: its files were fsynced under the future's name."""
    future, current = tmp_path / "t-0.abc-future", tmp_path / "t-0"
    future.mkdir()
    with DurableFiles() as disk:
        _write(future / "0.log", b"x" * 100, sync=True)
        future.rename(current)
        _write(current / "0.log", b"y" * 10, sync=False)
        _lose(disk, current / "0.log")
    assert (current / "0.log").read_bytes() == b"x" * 100


def test_a_file_replaced_takes_the_durable_size_of_what_replaced_it(tmp_path: Path) -> None:
    """A cleaned segment swapped in for the old one: the old file's fsyncs no longer count."""
    seg, swap = tmp_path / "0.log", tmp_path / "0.log.swap"
    with DurableFiles() as disk:
        _write(seg, b"o" * 500, sync=True)
        _write(swap, b"n" * 40, sync=True)
        os.replace(swap, seg)
        _write(seg, b"z" * 30, sync=False)
        _lose(disk, seg)
        assert seg.read_bytes() == b"n" * 40
        other = tmp_path / "1.log"
        _write(other, b"q" * 60, sync=False)
        os.replace(other, seg)  # never fsynced: nothing of it is durable
        _lose(disk, seg)
    assert seg.read_bytes() == b""
    assert os.rename is not None and os.replace.__module__ == "posix"  # restored at exit
