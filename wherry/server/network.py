"""The listening side: an asyncio server that frames bytes and hands frames to a handler.
(Connections a broker opens to other brokers are `wherry.outbound`'s.)

Like Kafka's SocketServer, each connection processes one request at a time, in order, and
answers in order; further requests wait in the connection's queue (reading pauses when it
grows). A frame the protocol layer rejects closes the connection with a log line.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from wherry.protocol.framing import FrameDecoder, FrameError
from wherry.security.principal import ANONYMOUS, KafkaPrincipal, user

log = logging.getLogger(__name__)

_MAX_QUEUED = 64


class CloseConnection(Exception):
    """Raised by a frame handler to close the connection after logging."""


class CloseAfterResponse(CloseConnection):
    """Raised by a frame handler to send `response`, then close the connection (a failed
    SASL authentication is answered before the connection closes)."""

    def __init__(self, reason: str, response: bytes) -> None:
        super().__init__(reason)
        self.response = response


@dataclass(slots=True)
class ConnectionInfo:
    """One client connection: where it comes from, the listener it came in on and its
    security protocol, and who it is (ANONYMOUS until authenticated; on TLS listeners the
    client certificate's subject, as Kafka's default principal builder names it)."""

    peer: str
    listener: str
    id: int
    attrs: dict[str, object] = field(default_factory=dict)
    security_protocol: str = "PLAINTEXT"
    principal: KafkaPrincipal = ANONYMOUS


def certificate_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> KafkaPrincipal:
    """Kafka's default SSL principal: `User:` + the verified client certificate's subject
    distinguished name (RFC 2253 order, e.g. `User:CN=alice,O=example`); ANONYMOUS when the
    client sent no certificate."""
    if ssl_object is None:
        return ANONYMOUS
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    from cryptography import x509

    return user(x509.load_der_x509_certificate(der).subject.rfc4514_string())


FrameHandler = Callable[[ConnectionInfo, memoryview], Awaitable[bytes | None]]


class _Connection(asyncio.Protocol):
    def __init__(self, server: NetworkServer, listener: str, security_protocol: str) -> None:
        self.server = server
        self.listener = listener
        self.security_protocol = security_protocol
        self.decoder = FrameDecoder(server.max_request_bytes)
        self.transport: asyncio.Transport | None = None
        self.queue: collections.deque[memoryview | None] = collections.deque()
        self.wakeup = asyncio.Event()
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closing = False
        self.task: asyncio.Task[None] | None = None
        self.info: ConnectionInfo | None = None
        self.reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.server._next_id += 1
        self.info = ConnectionInfo(
            f"{peer[0]}:{peer[1]}" if peer else "?",
            self.listener,
            self.server._next_id,
            security_protocol=self.security_protocol,
            principal=certificate_principal(transport.get_extra_info("ssl_object")),
        )
        self.server._connections.add(self)
        self.task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            self.close(f"invalid frame: {e}")
            return
        if frames:
            self.queue.extend(frames)
            self.wakeup.set()
            if len(self.queue) >= _MAX_QUEUED and self.transport and not self.reading_paused:
                self.reading_paused = True
                self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        # Answer what was received, then close (a client may half-close after sending).
        self.queue.append(None)  # sentinel: close once the queue drains
        self.wakeup.set()
        # TLS cannot stay half-open: the TLS layer closes the transport whatever we answer,
        # and asyncio warns for every such connection when we ask to keep it.
        tls = self.transport is not None and self.transport.get_extra_info("ssl_object")
        return not tls

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server._connections.discard(self)
        self.wakeup.set()
        self.can_write.set()
        if self.decoder.buffered_bytes:
            log.info(
                "Connection %s closed with %d bytes of a partial request",
                self.info.peer if self.info else "?",
                self.decoder.buffered_bytes,
            )

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def close(self, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        log.warning(
            "Closing connection %s (listener %s): %s",
            self.info.peer if self.info else "?",
            self.listener,
            reason,
        )
        if self.transport is not None:
            self.transport.close()
        self.wakeup.set()

    async def _run(self) -> None:
        handler = self.server.handler
        assert self.info is not None
        try:
            while not self.closing:
                if not self.queue:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    continue
                frame = self.queue.popleft()
                if self.reading_paused and len(self.queue) < _MAX_QUEUED // 2 and self.transport:
                    self.reading_paused = False
                    self.transport.resume_reading()
                if frame is None:  # EOF sentinel
                    if self.transport is not None:
                        self.transport.close()
                    return
                try:
                    response = await handler(self.info, frame)
                except CloseAfterResponse as e:
                    if self.transport is not None and not self.closing:
                        self.transport.write(e.response)  # flushed before the close
                    self.close(str(e))
                    return
                except CloseConnection as e:
                    self.close(str(e))
                    return
                if response and not self.closing and self.transport is not None:
                    self.transport.write(response)
                    if not self.can_write.is_set():
                        await self.can_write.wait()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Unexpected error on connection %s", self.info.peer)
            self.close("internal error")


class NetworkServer:
    def __init__(self, handler: FrameHandler, *, max_request_bytes: int) -> None:
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[_Connection] = set()
        self._next_id = 0

    async def listen(
        self,
        host: str,
        port: int,
        listener: str = "PLAINTEXT",
        *,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        """Listen on host:port for `listener`; TLS with `ssl_context` (the handshake completes
        before the connection is handed a frame). Returns the bound port."""
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(
            lambda: _Connection(self, listener, security_protocol),
            host,
            port,
            reuse_address=True,
            backlog=512,
            ssl=ssl_context,
            ssl_handshake_timeout=10.0 if ssl_context is not None else None,
        )
        self._servers.append(srv)
        sock = srv.sockets[0]
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        for srv in self._servers:
            srv.close()
        for conn in list(self._connections):
            if conn.transport is not None:
                conn.transport.close()
            if conn.task is not None:
                conn.task.cancel()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()
