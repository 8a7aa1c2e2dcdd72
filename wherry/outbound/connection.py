"""Outbound sockets: `OutboundConnection`, a broker's connection to another broker, and
`FrameTransport`, what a `RequestClient` needs of a connection (so a simulation can plug in
its own)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol, Self

from wherry.outbound.sasl_handshake import authenticate
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.protocol.primitives import INT32 as _SIZE

DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class FrameTransport(Protocol):
    """Whole request frames out, one response frame back per request."""

    @property
    def connected(self) -> bool:
        """False once the connection is known to be gone (a client then opens another)."""
        ...

    async def request(self, frame: bytes) -> bytes | memoryview:
        """Send a whole frame (size prefix included); return the response frame without its
        size prefix (read-only). Must give up within a bounded time (raising) and drop the
        connection when it fails."""
        ...

    def abort(self) -> None:
        """Drop the connection at once."""
        ...


Connect = Callable[[], Awaitable[FrameTransport]]
"""Opens a connection; raises OSError (TimeoutError included) when it cannot."""


class OutboundConnection:
    """A connection to another broker: size-prefixed request frames out, one response frame
    back per request, one request at a time (the caller matches correlation ids).

    Every wait is bounded: connecting by `connect_timeout_s`, a request (write, then read of
    the whole answer) by `request_timeout_s`. Any failure, timeout or cancellation during a
    request aborts the connection, so a late answer can never be read as the next one's; the
    caller connects again.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        connect_timeout_s: float = 30.0,
        request_timeout_s: float = 30.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> Self:
        """Open the connection unless it is open, and return it (so `conn.connect` is a
        `Connect` for a `RequestClient`, re-opening it after a failure); raises OSError or
        TimeoutError."""
        if not self.connected:
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    await self._open(self.security.ssl_context)
                    if self.security.sasl_mechanism is not None:
                        await authenticate(self, self.security)
            except ssl.SSLError as e:
                self.abort()
                raise ConnectionError(f"TLS with {self.host}:{self.port} failed: {e}") from e
            except BaseException:
                self.abort()
                raise
        return self

    async def _open(self, ctx: ssl.SSLContext | None) -> None:
        """Open the socket (TLS with `ctx`, if any)."""
        self._reader, self._writer = await asyncio.open_connection(
            self.host,
            self.port,
            ssl=ctx,
            server_hostname=self.host if ctx is not None else None,
        )

    async def request(self, frame: bytes) -> bytes:
        """Send one whole frame (size prefix included); return the response frame without its
        size prefix. Raises ConnectionError (closed, refused, bad size) or TimeoutError."""
        async with self._lock:
            reader, writer = self._reader, self._writer
            if reader is None or writer is None or writer.is_closing():
                raise ConnectionError(f"not connected to {self.host}:{self.port}")
            try:
                async with asyncio.timeout(self.request_timeout_s):
                    writer.write(frame)
                    await writer.drain()
                    (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
                    if not 0 <= size <= self.max_response_bytes:
                        raise ConnectionError(
                            f"response of {size} bytes from {self.host}:{self.port} "
                            f"(limit {self.max_response_bytes})"
                        )
                    return await reader.readexactly(size)
            except asyncio.IncompleteReadError as e:
                self.abort()
                raise ConnectionError(
                    f"connection to {self.host}:{self.port} closed during a request"
                ) from e
            except BaseException:
                self.abort()
                raise

    def abort(self) -> None:
        """Drop the connection at once (unsent and unread bytes are discarded)."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.transport.abort()

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is None:
            return
        writer.close()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await writer.wait_closed()
        except (OSError, TimeoutError):
            writer.transport.abort()
