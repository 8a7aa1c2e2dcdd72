"""Kafka wire framing, sans-I/O: a 4-byte big-endian size prefix, then the frame.

The decoder takes bytes as they arrive from a socket and hands back whole frames. It never
touches a socket, so it can be tested (and fuzzed) with plain bytes.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes


class FrameError(Exception):
    """The peer sent a frame we refuse; the connection must be closed."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Accumulates bytes and yields complete frames (without their size prefix)."""

    __slots__ = ("_buf", "_need", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # size of the frame being read, -1 while reading the prefix

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame completed by them (possibly none)."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameTooLarge(size, self.max_frame_bytes)
                pos += 4
                self._need = size
            if end - pos < self._need:
                break
            frames.append(bytes(memoryview(buf)[pos : pos + self._need]))
            pos += self._need
            self._need = -1
        if pos:
            del buf[:pos]
        return frames


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + payload
