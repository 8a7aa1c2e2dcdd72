"""Kafka wire framing, sans-I/O: a 4-byte big-endian size prefix, then the frame.

The decoder takes bytes as they arrive from a socket and hands back whole frames. It never
touches a socket, so it can be tested (and fuzzed) with plain bytes.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes
_REUSE_MIN = 64 * 1024  # frames whose buffers are kept for reuse
_REUSE_MAX = 4 * 1024 * 1024  # bytes of such buffers a decoder (a connection) keeps
_SCRATCH_BYTES = 64 * 1024  # get_buffer's between frames: size prefixes and small frames


class FrameError(Exception):
    """The peer sent a frame we refuse; the connection must be closed."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Accumulates bytes and yields complete frames (without their size prefix).

    Two ways in: `feed(data)` with bytes already read, or `get_buffer()` / `buffer_updated(n)`
    for a socket that receives straight into our memory (asyncio's BufferedProtocol): the
    frame being received is its own buffer, so a 1 MiB produce request reaches its frame
    without any copy; between frames, the size prefix (and small frames) land in a scratch
    buffer and are copied out.

    Frames are handed out as writable memoryviews of a buffer of their own, which nothing
    else writes while any view of it lives: the produce path assigns offsets in place, kio
    takes a read-only view (`.toreadonly()`).

    Buffers of large frames are kept (up to `_REUSE_MAX` bytes per decoder) and used again
    once nothing holds a view of them (a bytearray with live views refuses to be resized:
    that is the test), so a stream of produce requests does not get fresh, zero-filled,
    page-faulting memory for each one, even with several requests in flight.
    """

    __slots__ = ("_filled", "_frame", "_prefix", "_scratch", "_size", "_spares", "max_frame_bytes")

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES, scratch: bytearray | None = None
    ) -> None:
        """`scratch`: the buffer `get_buffer` gives between frames, if not one of its own.
        Decoders may share one as long as each `buffer_updated` follows its own
        `get_buffer` with no other decoder's in between (what an event loop does: it reads
        one socket at a time, and `buffer_updated` copies everything out of the scratch),
        so a server with many idle connections keeps one scratch buffer, not one each."""
        self.max_frame_bytes = max_frame_bytes
        self._prefix = bytearray()
        self._frame: bytearray | None = None  # the frame being filled, once its size is known
        self._size = 0  # its size (the buffer may be longer: a reused one)
        self._filled = 0
        self._spares: list[bytearray] = []  # large frames' buffers, most recent last
        self._scratch = scratch  # for get_buffer between frames (made on first use)

    def _buffer(self, size: int) -> bytearray:
        spares = self._spares
        for i in range(len(spares) - 1, -1, -1):
            spare = spares[i]
            if size <= len(spare) and size * 2 >= len(spare) and _unexported(spare):
                return spare
        buf = bytearray(size)
        if _REUSE_MIN <= size <= _REUSE_MAX:
            kept = size + sum(len(b) for b in spares)
            while spares and kept > _REUSE_MAX:  # make room: the oldest go first
                kept -= len(spares.pop(0))
            spares.append(buf)
        return buf

    @property
    def buffered_bytes(self) -> int:
        return len(self._prefix) + self._filled

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go: the rest of the frame being received, or (between
        frames) the scratch buffer. Tell `buffer_updated` how many arrived."""
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._filled : self._size]
        if self._scratch is None:
            self._scratch = bytearray(_SCRATCH_BYTES)
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """`nbytes` arrived in the buffer `get_buffer` gave; return the frames completed."""
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < self._size:
                return []
            return [self._complete()]
        assert self._scratch is not None
        return self.feed(memoryview(self._scratch)[:nbytes])

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
                frames.append(self._complete())
        return frames

    def _complete(self) -> memoryview:
        frame = self._frame
        assert frame is not None
        view = memoryview(frame)
        self._frame = None
        self._filled = 0
        return view if len(frame) == self._size else view[: self._size]


def _unexported(buf: bytearray) -> bool:
    """Whether no memoryview of `buf` is alive (a bytearray with views cannot be resized)."""
    try:
        buf.append(0)
    except BufferError:
        return False
    del buf[-1]
    return True


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + payload
