"""`BufferedConnection`: an `OutboundConnection` whose answers are received straight into one
buffer per frame (asyncio's BufferedProtocol: the event loop `recv_into`s the frame's own
bytearray), instead of through a StreamReader (which copies every chunk into its buffer, and
the frame out of it again).

The replica fetchers use it: their answers carry up to `replica.fetch.max.bytes` of records
per partition, which then reach the segment file without a copy in Python
(`protocol/fetch_response.py` hands them out as views of the frame). Same contract as
`OutboundConnection`: one request at a time, bounded connect and request times, aborted on any
failure, so a late answer is never read as the next one's.
"""

from __future__ import annotations

import asyncio
import collections
import ssl

from wherry.outbound.connection import OutboundConnection
from wherry.protocol.framing import FrameDecoder, FrameError, FrameTooLarge

__all__ = ["BufferedConnection"]

class _FrameProtocol(asyncio.BufferedProtocol):
    """Receives size-prefixed frames with a `FrameDecoder`: the prefix (with what follows it
    in the same read) into a scratch buffer, the rest of a frame straight into the frame's
    own buffer (reused once nothing refers to it any more: a fresh one per frame costs a page
    fault per 4 KiB, as much as the copy it saves)."""

    def __init__(self, max_frame_bytes: int, peer: str) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.frames: collections.deque[memoryview] = collections.deque()
        self.error: BaseException | None = None  # the connection is gone (why)
        self.arrived: asyncio.Event = asyncio.Event()
        self.waiter: asyncio.Future[None] | None = None  # a request's, woken by a frame or an end
        self._decoder = FrameDecoder(max_frame_bytes)

    # -- asyncio callbacks ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except FrameError as e:
            limit = self._decoder.max_frame_bytes
            size = e.size if isinstance(e, FrameTooLarge) else "a negative number of"
            self._fail(
                ConnectionError(f"response of {size} bytes from {self.peer} (limit {limit})")
            )
            if self.transport is not None:
                self.transport.abort()
            return
        if frames:
            self.frames.extend(frame.toreadonly() for frame in frames)
            self._wake()

    def eof_received(self) -> bool | None:
        self._fail(ConnectionError(f"connection to {self.peer} closed by the peer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError(f"connection to {self.peer} closed"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self.arrived.set()


def _time_out(p: _FrameProtocol) -> None:
    """The request's time is up: its wait ends in TimeoutError (the connection is aborted)."""
    waiter = p.waiter
    if waiter is not None and not waiter.done():
        waiter.set_exception(TimeoutError())


class BufferedConnection(OutboundConnection):
    """An `OutboundConnection` (same constructor, same `FrameTransport` contract) receiving
    each answer straight into its receive buffer; `request` returns a read-only view of it,
    valid as long as it is held (the buffer is reused only once no view of it is left)."""

    _protocol: _FrameProtocol | None = None  # set while connected

    @property
    def connected(self) -> bool:
        p = self._protocol
        return (
            p is not None
            and p.error is None
            and p.transport is not None
            and not p.transport.is_closing()
        )

    async def _open(self, ctx: ssl.SSLContext | None) -> None:
        self.abort()  # the protocol of a connection that broke, if any
        peer = f"{self.host}:{self.port}"
        _, self._protocol = await asyncio.get_running_loop().create_connection(
            lambda: _FrameProtocol(self.max_response_bytes, peer),
            self.host,
            self.port,
            ssl=ctx,
            server_hostname=self.host if ctx is not None else None,
        )

    async def request(self, frame: bytes) -> memoryview:  # type: ignore[override]
        """Send one whole frame (size prefix included); return the answer frame without its
        size prefix: a read-only view of the receive buffer. Raises ConnectionError or
        TimeoutError."""
        async with self._lock:
            p = self._protocol
            if p is None or not self.connected or p.transport is None:
                raise ConnectionError(f"not connected to {self.host}:{self.port}")
            # One future a wait, woken by the protocol, and one timer for the whole request:
            # cheaper than an `asyncio.timeout` and an Event per request, with the same bound.
            # No wait for the transport to drain: one request at a time writes one frame.
            loop = asyncio.get_running_loop()
            waiter = p.waiter = loop.create_future()
            timer = loop.call_later(self.request_timeout_s, _time_out, p)
            try:
                p.transport.write(frame)
                while not p.frames:
                    if p.error is not None:
                        raise ConnectionError(
                            f"connection to {self.host}:{self.port} lost during a request"
                            f" ({p.error})"
                        )
                    await waiter
                    if not p.frames:
                        waiter = p.waiter = loop.create_future()
                return p.frames.popleft()
            except BaseException:
                self.abort()
                raise
            finally:
                timer.cancel()
                p.waiter = None

    def abort(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.abort()

    async def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is None or protocol.transport is None:
            return
        transport = protocol.transport
        transport.close()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                while protocol.error is None:
                    protocol.arrived.clear()
                    await protocol.arrived.wait()
        except (OSError, TimeoutError):
            transport.abort()
