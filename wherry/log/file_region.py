"""A byte range of a segment file, handed out by a log read instead of the bytes themselves
so the network layer can send it with `os.sendfile` (zero-copy consume).

A region holds its own duplicate of the segment's file descriptor: the bytes stay readable
while the region is pending even if retention deletes the segment file meanwhile (the inode
lives until the last descriptor closes) or the segment's cached descriptor is evicted. A
truncation may still shrink the file under it: readers of a region must check that they got
all `length` bytes (`ShortRegionError`).
"""

from __future__ import annotations

import os

__all__ = ["FileRegion", "ShortRegionError"]


class ShortRegionError(OSError):
    """The file ended before the region did (it was truncated after the read)."""


class FileRegion:
    """`length` bytes at `position` of the file open as `fd` (owned: closed by `close`, or
    when the region is garbage)."""

    __slots__ = ("fd", "length", "position")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    @classmethod
    def of(cls, fd: int, position: int, length: int) -> FileRegion:
        """A region over a duplicate of `fd` (the caller keeps its own descriptor)."""
        return cls(os.dup(fd), position, length)

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def read(self) -> bytes:
        """The region's bytes (a copy: for connections that cannot sendfile, and tests)."""
        chunks: list[bytes] = []
        position, left = self.position, self.length
        while left > 0:
            chunk = os.pread(self.fd, left, position)
            if not chunk:
                raise ShortRegionError(
                    f"file ended {left} bytes before the end of a {self.length}-byte region"
                )
            chunks.append(chunk)
            position += len(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def __bytes__(self) -> bytes:
        return self.read()

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FileRegion fd={self.fd} position={self.position} length={self.length}>"
