"""Kafka wire framing, sans-I/O: a 4-byte big-endian size prefix, then the frame.

The decoder takes bytes as they arrive from a socket and hands back whole frames. It never
touches a socket, so it can be tested (and fuzzed) with plain bytes.
"""

from __future__ import annotations

import mmap
import sys

from wherry.protocol.memory_pool import MemoryPool
from wherry.protocol.primitives import INT32 as _SIZE

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes
_REUSE_MAX = 4 * 1024 * 1024  # bytes of large frames' buffers a decoder (a connection) keeps
_SCRATCH_BYTES = 64 * 1024  # get_buffer's between frames: size prefixes and small frames
# Frames up to this size get a buffer at once; larger ones get memory that is committed page
# by page as their bytes arrive (an anonymous mapping), so a frame that announces 100 MiB and
# sends 20 bytes holds a page, not 100 MiB; their buffers are kept for reuse.
_EAGER_MAX = 64 * 1024
_ROUND = 64 * 1024  # large frames' buffers are a multiple of this (at least their size)
# With a memory pool, a frame's bytes are reserved a window at a time as they arrive: the first
# window, then doubling what is reserved, at most _MAX_WINDOW at a time.
_FIRST_WINDOW = 16 * 1024
_MAX_WINDOW = 1024 * 1024
_MAP_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
if sys.platform == "linux":  # no swap reserved for what may never be touched
    _MAP_FLAGS |= getattr(mmap, "MAP_NORESERVE", 0x4000)

Buffer = bytearray | mmap.mmap


class FrameError(Exception):
    """The peer sent a frame we refuse; the connection must be closed."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class BufferRecycler:
    """Large frames' buffers the decoders of one server have let go (dropped from their own
    spares, or their connection closed), kept for any decoder to use again once nothing
    holds a view of them, up to `limit` bytes (the oldest go first). A fresh mapping costs a
    zero-filled page fault per 4 KiB as its bytes arrive; one used before does not."""

    __slots__ = ("_buffers", "_bytes", "limit")

    def __init__(self, limit: int = 16 * 1024 * 1024) -> None:
        self.limit = limit
        self._buffers: list[Buffer] = []  # most recent last
        self._bytes = 0

    @property
    def kept_bytes(self) -> int:
        return self._bytes

    def put(self, buf: Buffer) -> None:
        self._buffers.append(buf)
        self._bytes += len(buf)
        while self._bytes > self.limit:
            self._bytes -= len(self._buffers.pop(0))

    def take(self, size: int) -> Buffer | None:
        """A kept buffer of `size` to `2 * size` bytes that nothing uses, or None."""
        buffers = self._buffers
        for i in range(len(buffers) - 1, -1, -1):
            buf = buffers[i]
            if size <= len(buf) and size * 2 >= len(buf) and _unexported(buf):
                del buffers[i]
                self._bytes -= len(buf)
                return buf
        return None


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

    A frame's size is a promise, not memory: a `lazy` decoder (a server's) receives frames
    over `_EAGER_MAX` into an anonymous mapping whose pages are committed as the bytes arrive.
    With a `MemoryPool` (`queued.max.request.bytes`), what arrives is also reserved from it a
    window at a time; when the pool refuses, `needs_memory` is true and the reader should
    pause until `grow()` succeeds. A completed frame's bytes stay reserved until the owner
    releases them (`pool.release(len(frame))`) once the request is handled; a half-received
    frame's with `release()`.

    Buffers of large frames are kept (up to `_REUSE_MAX` bytes per decoder, then in the
    server's `BufferRecycler`) and used again once nothing holds a view of them (a buffer
    with live views refuses to be resized: that is the test), so a stream of produce requests
    does not get fresh, zero-filled, page-faulting memory for each one, even with several
    requests in flight.
    """

    __slots__ = (
        "_filled", "_frame", "_lazy", "_overdraft", "_prefix", "_recycler", "_reserved",
        "_scratch", "_size", "_spares", "max_frame_bytes", "pool",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        scratch: bytearray | None = None,
        pool: MemoryPool | None = None,
        recycler: BufferRecycler | None = None,
        lazy: bool = False,
    ) -> None:
        """`scratch`: the buffer `get_buffer` gives between frames, if not one of its own.
        Decoders may share one as long as each `buffer_updated` follows its own
        `get_buffer` with no other decoder's in between (what an event loop does: it reads
        one socket at a time, and `buffer_updated` copies everything out of the scratch),
        so a server with many idle connections keeps one scratch buffer, not one each.
        `pool`: the memory pool received bytes are reserved from (none: nothing counted).
        `recycler`: where large buffers this decoder lets go are kept for any decoder.
        `lazy`: frames over `_EAGER_MAX` get memory committed as their bytes arrive (what a
        server needs against peers that announce more than they send); otherwise a frame's
        buffer is allocated whole (an answer to our own request, from a trusted peer)."""
        self.max_frame_bytes = max_frame_bytes
        self.pool = pool
        self._prefix = bytearray()
        self._frame: Buffer | None = None  # the frame being filled, once its size is known
        self._size = 0  # its size (the buffer may be longer: a reused one)
        self._filled = 0
        self._reserved = 0  # bytes of it reserved from the pool (its size without a pool)
        self._overdraft = False  # it holds the pool's overdraft (see MemoryPool)
        self._spares: list[Buffer] = []  # large frames' buffers, most recent last
        self._scratch = scratch  # for get_buffer between frames (made on first use)
        self._recycler = recycler
        self._lazy = lazy

    def _buffer(self, size: int) -> Buffer:
        if size <= _EAGER_MAX:
            return bytearray(size)
        spares = self._spares
        best: Buffer | None = None  # the smallest free one the frame fits in
        for spare in spares:
            if (
                size <= len(spare)
                and (best is None or len(spare) < len(best))
                and _unexported(spare)
            ):
                best = spare
        if best is not None:
            return best
        recycler = self._recycler
        buf = recycler.take(size) if recycler is not None else None
        if buf is None:
            # Room for a somewhat larger frame: the next frames of a stream of large ones
            # (produce batches, fetch answers) vary in size, and one a little larger than
            # every kept buffer would get fresh memory again. A mapping's pages never
            # written cost nothing; a bytearray's extra eighth is zeroed once, when made.
            alloc = min(size + (size >> 3), max(size, self.max_frame_bytes))
            alloc = max(size, -(-alloc // _ROUND) * _ROUND)
        if buf is None and not self._lazy:
            buf = bytearray(alloc)
        elif buf is None:
            try:
                buf = mmap.mmap(-1, alloc, flags=_MAP_FLAGS)
            except OSError as e:  # out of address space or mappings: this connection goes
                raise FrameError(f"no memory for a frame of {size} bytes: {e}") from e
        if len(buf) <= _REUSE_MAX:
            kept = len(buf) + sum(len(b) for b in spares)
            while spares and kept > _REUSE_MAX:  # make room: the oldest go first
                kept -= len(old := spares.pop(0))
                if recycler is not None:
                    recycler.put(old)
            spares.append(buf)
        return buf

    @property
    def buffered_bytes(self) -> int:
        return len(self._prefix) + self._filled

    @property
    def reserved_bytes(self) -> int:
        """Bytes of the frame being received reserved from the pool."""
        return self._reserved if self.pool is not None else 0

    @property
    def needs_memory(self) -> bool:
        """Whether the next read needs memory the pool refused: the frame being received has
        no room left, or (between frames) the pool is exhausted."""
        pool = self.pool
        if pool is None:
            return False
        if self._frame is not None:
            return self._filled >= self._reserved
        return pool.exhausted

    def grow(self, overdraft: bool = False) -> bool:
        """Try to reserve the next window of the frame being received (or, between frames,
        see whether the pool has room); whether the next read may go ahead. With
        `overdraft` (the pool's, see MemoryPool) the whole rest of the frame is taken."""
        pool = self.pool
        if pool is None:
            return True
        if self._frame is None:
            return overdraft or not pool.exhausted
        if self._filled < self._reserved:
            return True
        if overdraft:
            pool.force_reserve(self._size - self._reserved)
            self._reserved = self._size
            self._overdraft = True
            return True
        window = min(self._size - self._reserved, max(_FIRST_WINDOW, min(self._reserved,
                                                                        _MAX_WINDOW)))
        if not pool.try_reserve(window):
            return False
        self._reserved += window
        return True

    @property
    def holds_overdraft(self) -> bool:
        return self._overdraft

    def release(self) -> None:
        """Give back what the frame being received holds of the pool (the connection is
        closing): the decoder must not be used again."""
        pool = self.pool
        if pool is not None:
            if self._reserved and self._frame is not None:
                pool.release(self._reserved, whole=False)
            if self._overdraft:
                self._overdraft = False
                pool.end_overdraft()
        self._reserved = 0
        self._frame = None
        self._filled = 0
        if self._recycler is not None:  # the connection's buffers serve others
            for buf in self._spares:
                self._recycler.put(buf)
        self._spares.clear()

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go: the rest of the frame being received (with a
        pool: of its reserved window), or (between frames) the scratch buffer. Tell
        `buffer_updated` how many arrived."""
        frame = self._frame
        if frame is not None:
            end = self._reserved
            if end <= self._filled:  # asked while the pool said no: a page, counted
                end = min(self._size, self._filled + 4096)
                if self.pool is not None:
                    self.pool.force_reserve(end - self._reserved)
                self._reserved = end
            return memoryview(frame)[self._filled : end]
        if self._scratch is None:
            self._scratch = bytearray(_SCRATCH_BYTES)
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """`nbytes` arrived in the buffer `get_buffer` gave; return the frames completed."""
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < self._size:
                if self._filled >= self._reserved:
                    self.grow()
                return []
            return [self._complete()]
        assert self._scratch is not None
        return self.feed(memoryview(self._scratch)[:nbytes])

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add received bytes; return every frame completed by them (possibly none)."""
        frames: list[memoryview] = []
        mv = memoryview(data)
        i, n = 0, len(mv)
        pool = self.pool
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
                self._reserved = size if pool is None else 0
            take = min(self._size - self._filled, n - i)
            end = self._filled + take
            if end > self._reserved:  # bytes already here: counted whatever the pool says
                assert pool is not None
                pool.force_reserve(end - self._reserved)
                self._reserved = end
            frame[self._filled : end] = mv[i : i + take]
            self._filled = end
            i += take
            if end == self._size:
                frames.append(self._complete())
        if self._frame is not None and self._filled >= self._reserved:
            self.grow()
        return frames

    def _complete(self) -> memoryview:
        frame = self._frame
        assert frame is not None
        view = memoryview(frame)
        self._frame = None
        self._filled = 0
        self._reserved = 0
        pool = self.pool
        if pool is not None:
            pool.completed(self._size)
            if self._overdraft:
                self._overdraft = False
                pool.end_overdraft()
        return view if len(frame) == self._size else view[: self._size]


def _unexported(buf: Buffer) -> bool:
    """Whether no memoryview of `buf` is alive (a buffer with views cannot be resized)."""
    try:
        if isinstance(buf, bytearray):
            buf.append(0)
            del buf[-1]
        else:
            buf.resize(len(buf))
    except BufferError:
        return False
    return True


def encode_frame(payload: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(payload)) + payload
