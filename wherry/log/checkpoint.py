"""Kafka-format checkpoint files, written atomically.

Offset checkpoint (recovery-point-offset-checkpoint, replication-offset-checkpoint,
log-start-offset-checkpoint)::

    0                     <- version
    2                     <- number of entries
    my-topic 0 1234       <- topic partition offset
    my-topic 1 99

The leader-epoch checkpoint uses the same framing with `epoch start_offset` lines.
Writes go to `<name>.tmp`, are fsynced, renamed over the file and the directory is fsynced.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from wherry.common.topic_partition import TopicPartition
from wherry.log.errors import StorageError

__all__ = [
    "HIGH_WATERMARK_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "CheckpointError",
    "OffsetCheckpointFile",
    "atomic_write",
    "fsync_dir",
    "read_file",
    "read_int_pairs",
    "write_int_pairs",
]

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"

_VERSION = 0


class CheckpointError(StorageError):
    """A checkpoint file is malformed."""


def read_file(path: Path) -> bytes:
    """The whole file (os.open/pread/close: cheaper than io for the many small files read
    when thousands of partitions load). FileNotFoundError if it does not exist."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        pos = 0
        while pos < size:
            chunk = os.pread(fd, size - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def fsync_dir(path: Path) -> None:
    """fsync a directory so renames/creations in it are durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace `path` with `data` via `<path>.tmp` + fsync + rename + directory fsync."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def _read_lines(path: Path) -> list[str] | None:
    try:
        text = read_file(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"malformed checkpoint file {path}: {exc}") from None
    if not text:  # as Kafka reads it: no entries (an unsynced empty checkpoint, a crash)
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"malformed checkpoint file {path}: missing header")
    try:
        version, count = int(lines[0].strip()), int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"malformed checkpoint file {path}: bad header") from None
    if version != _VERSION:
        raise CheckpointError(f"unrecognized version {version} of checkpoint file {path}")
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointError(
            f"checkpoint file {path} declares {count} entries but holds {len(entries)}"
        )
    return entries


def _render(lines: Sequence[str]) -> bytes:
    return ("\n".join([str(_VERSION), str(len(lines)), *lines]) + "\n").encode("utf-8")


def write_int_pairs(path: Path, pairs: Iterable[tuple[int, int]]) -> None:
    """Write a version-0 checkpoint of `a b` integer lines (leader-epoch checkpoint)."""
    atomic_write(path, _render([f"{a} {b}" for a, b in pairs]))


def read_int_pairs(path: Path) -> list[tuple[int, int]]:
    """Read a checkpoint of `a b` integer lines; [] if the file does not exist."""
    lines = _read_lines(path)
    if lines is None:
        return []
    out: list[tuple[int, int]] = []
    for line in lines:
        parts = line.split()
        if len(parts) != 2:
            raise CheckpointError(f"malformed line {line!r} in checkpoint file {path}")
        try:
            out.append((int(parts[0]), int(parts[1])))
        except ValueError:
            raise CheckpointError(f"malformed line {line!r} in checkpoint file {path}") from None
    return out


class OffsetCheckpointFile:
    """A `topic partition offset` checkpoint file in a log dir."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [
            f"{tp.topic} {tp.partition} {offset}"
            for tp, offset in sorted(
                offsets.items(), key=lambda item: (item[0].topic, item[0].partition)
            )
        ]
        try:
            # An empty checkpoint says what a missing or empty file says: no fsync for it.
            atomic_write(self.path, _render(lines), fsync=bool(lines))
        except OSError as exc:
            raise StorageError(f"error writing checkpoint file {self.path}: {exc}") from exc

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; {} if the file does not exist. Raises CheckpointError."""
        try:
            lines = _read_lines(self.path)
        except OSError as exc:
            raise StorageError(f"error reading checkpoint file {self.path}: {exc}") from exc
        if lines is None:
            return {}
        out: dict[TopicPartition, int] = {}
        for line in lines:
            parts = line.split()
            if len(parts) != 3:
                raise CheckpointError(f"malformed line {line!r} in checkpoint file {self.path}")
            try:
                out[TopicPartition(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CheckpointError(
                    f"malformed line {line!r} in checkpoint file {self.path}"
                ) from None
        return out
