"""Kafka wire framing, sans-I/O: a 4-byte big-endian size prefix, then the frame.

The decoder takes bytes as they arrive from a socket and hands back whole frames. It never
touches a socket, so it can be tested (and fuzzed) with plain bytes.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes
_REUSE_MIN = 64 * 1024  # frames whose buffers are kept for reuse (one per connection)
_REUSE_MAX = 4 * 1024 * 1024


class FrameError(Exception):
    """The peer sent a frame we refuse; the connection must be closed."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Accumulates bytes and yields complete frames (without their size prefix).

    Each frame is received straight into a buffer of its final size and handed out as a
    read-only memoryview, so a 1 MiB produce request is copied once, not once per read.

    A large frame's buffer is used again for a later frame once nothing holds a view of it
    any more (a bytearray with live views refuses to be resized: that is the test), so a
    stream of produce requests does not get fresh, zero-filled, page-faulting memory for
    each one.
    """

    __slots__ = ("_filled", "_frame", "_prefix", "_size", "_spare", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._prefix = bytearray()
        self._frame: bytearray | None = None  # the frame being filled, once its size is known
        self._size = 0  # its size (the buffer may be longer: a reused one)
        self._filled = 0
        self._spare: bytearray | None = None  # the last large frame's buffer

    def _buffer(self, size: int) -> bytearray:
        spare = self._spare
        if spare is not None and size <= len(spare) and size * 2 >= len(spare):
            try:
                spare.append(0)  # raises BufferError while any view of it lives
            except BufferError:
                pass
            else:
                del spare[-1]
                return spare
        buf = bytearray(size)
        if _REUSE_MIN <= size <= _REUSE_MAX:
            self._spare = buf
        return buf

    @property
    def buffered_bytes(self) -> int:
        return len(self._prefix) + self._filled

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add received bytes; return every frame completed by them (possibly none)."""
        frames: list[memoryview] = []
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n:
            frame = self._frame
            if frame is None:
                take = min(4 - len(self._prefix), n - i)
                self._prefix += mv[i : i + take]
                i += take
                if len(self._prefix) < 4:
                    break
                (size,) = _SIZE.unpack(self._prefix)
                self._prefix.clear()
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameTooLarge(size, self.max_frame_bytes)
                frame = self._frame = self._buffer(size)
                self._size = size
                self._filled = 0
            take = min(self._size - self._filled, n - i)
            frame[self._filled : self._filled + take] = mv[i : i + take]
            self._filled += take
            i += take
            if self._filled == self._size:
                view = memoryview(frame)
                frames.append(
                    (view if len(frame) == self._size else view[: self._size]).toreadonly()
                )
                self._frame = None
                self._filled = 0
        return frames


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + payload
