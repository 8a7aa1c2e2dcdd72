"""The listening side: an asyncio server that frames bytes and hands frames to a handler.
(Connections a broker opens to other brokers are `wherry.outbound`'s.)

Each connection processes its requests one at a time, in order, and answers in order;
further requests wait in the connection's queue (reading pauses when it grows). One
exception, pipelining: a handler whose request is done and only waits for its answer (an
acks=all Produce appended and parked until the ISR has it) returns a `Deferred`; the
connection then goes on with its next request while up to `_MAX_DEFERRED` answers wait, and
a writer sends every answer in request order. A frame the protocol layer rejects closes the
connection with a log line.

Kafka's limits (`connection_limits.py`, applied by `connection_gate.py`): a connection over
its address's `max.connections.per.ip` is closed at once; one over `max.connections` or the
connection creation rate waits, unread, until it may be served; a connection with nothing
received or sent for `connections.max.idle.ms` (a half-received frame included) is closed by
a periodic sweep over all connections. Requests are
received into memory reserved from the `queued.max.request.bytes` pool as their bytes
arrive; a connection that needs memory the pool refuses pauses its reading until a handled
request gives some back.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field

from wherry.common.record import record
from wherry.log.file_region import FileRegion, ShortRegionError
from wherry.observability.network_stats import NetworkStats
from wherry.protocol.framing import BufferRecycler, FrameDecoder, FrameError
from wherry.protocol.memory_pool import MemoryPool
from wherry.protocol.response_parts import ResponsePart
from wherry.runtime.bound_socket import bound_socket
from wherry.runtime.bound_socket import ip_literal_family as _ip_literal_family
from wherry.security.principal import ANONYMOUS, KafkaPrincipal, user
from wherry.server.connection_gate import ConnectionGate
from wherry.server.connection_limits import ConnectionLimits

log = logging.getLogger(__name__)

_MAX_QUEUED = 64
# ... and at most this many bytes of them: a client pipelining 1 MiB produce requests would
# otherwise have up to 64 of them read ahead, each in a buffer of its own (fresh memory, a page
# fault per 4 KiB, once the decoder's kept buffers are all in use); with a few frames ahead the
# decoder's buffers are reused. (Kafka reads one request at a time per connection.)
_MAX_QUEUED_BYTES = 1024 * 1024
_RECEIVE_SCRATCH_BYTES = 64 * 1024
# Answers a connection may have waiting while it handles further requests (Kafka clients
# keep at most 5 requests in flight per connection by default)
_MAX_DEFERRED = 16
# Why a connection's reading is paused (a bit each; reading resumes once none is left)
PAUSE_QUEUE = 1  # requests received and not yet handled: _MAX_QUEUED (_MAX_QUEUED_BYTES)
PAUSE_MEMORY = 2  # the memory pool refused what the next read needs
PAUSE_ADMISSION = 4  # not served yet: over max.connections or the creation rate
PAUSE_MUTED = 8  # muted from outside (see `_Connection.mute`)


class CloseConnection(Exception):
    """Raised by a frame handler to close the connection after logging."""


class CloseAfterResponse(CloseConnection):
    """Raised by a frame handler to send `response`, then close the connection (a failed
    SASL authentication is answered before the connection closes)."""

    def __init__(self, reason: str, response: bytes) -> None:
        super().__init__(reason)
        self.response = response


def _never_muted(delay_ms: float) -> None:
    return None


@record(slots=True)  # a dataclass whose methods are not compiled at import
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
    # Read no further request of this connection for that many ms (a client quota's throttle)
    mute: Callable[[float], None] = _never_muted


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


# A response: one frame, or the chunks of one frame with file regions among them (a Fetch's
# records, sent from the segment files with os.sendfile; protocol/response_parts.py)
Response = bytes | Sequence[ResponsePart]


class Deferred:
    """A handler's result when the request's work is done and only its answer waits (an
    acks=all Produce appended and parked in the purgatory): the connection handles its next
    requests meanwhile and sends `answer`'s result in its turn. `answer` may raise
    CloseConnection / CloseAfterResponse like a handler."""

    __slots__ = ("answer",)

    def __init__(self, answer: Awaitable[Response | None]) -> None:
        self.answer = answer


FrameHandler = Callable[[ConnectionInfo, memoryview], Awaitable[Response | Deferred | None]]
# Told once when a client connection is gone (share sessions release what it held)
CloseListener = Callable[[ConnectionInfo], None]


class _Connection(asyncio.BufferedProtocol):
    """One client connection. Requests are received straight into their frame's buffer
    (`FrameDecoder.get_buffer`): a produce request's records reach the segment file without
    a copy in Python."""

    def __init__(self, server: NetworkServer, listener: str, security_protocol: str) -> None:
        self.server = server
        self.listener = listener
        self.security_protocol = security_protocol
        self.decoder = FrameDecoder(
            server.max_request_bytes, server.receive_scratch, server.decoder_pool,
            server.recycler, lazy=True,
        )
        self.transport: asyncio.Transport | None = None
        self.queue: collections.deque[memoryview | None] = collections.deque()
        self.queued_bytes = 0  # of the frames in `queue`
        # the connection's task waiting for a request (or a close, an unmute): `_wake`
        self.waiter: asyncio.Future[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closing = False
        self.task: asyncio.Task[None] | None = None
        self.info: ConnectionInfo | None = None
        self.paused = 0  # PAUSE_* bits
        self.admitted = False  # counted in the quotas and served
        self.ip = "?"
        self.ready_at = 0.0  # (waiting for admission) not before this loop time
        self.close_reason = "client"  # for the metrics: who or what closed it
        self.handling = False  # a request is being handled
        self.handling_key = -1  # the API key of the request being handled
        self.last_active = server.now()  # loop time of the last byte received or sent
        self.writable: asyncio.Future[None] | None = None  # waiting to sendfile more
        # Answers to send in request order once a request was deferred (see `Deferred`)
        self.answers: collections.deque[asyncio.Future[Response | None]] = collections.deque()
        self.writer: asyncio.Task[None] | None = None
        self.answer_sent = asyncio.Event()
        self.muted_until = 0.0  # the loop's time until which no request is read
        self.unmute_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else "?"
        self.server._next_id += 1
        self.info = ConnectionInfo(
            f"{peer[0]}:{peer[1]}" if peer else "?",
            self.listener,
            self.server._next_id,
            security_protocol=self.security_protocol,
            principal=certificate_principal(transport.get_extra_info("ssl_object")),
            mute=self.mute_for,
        )
        self.server._connections.add(self)
        self.server.gate.arrived(self)

    def start(self) -> None:
        """Admitted: served from now on."""
        self.admitted = True
        self.last_active = self.server.now()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.resume(PAUSE_ADMISSION)

    def hold(self) -> None:
        """Not served yet (over max.connections or the creation rate): read nothing."""
        self.pause(PAUSE_ADMISSION)

    def refuse(self) -> None:
        """Closed at once, never served (over a limit)."""
        self.closing = True
        self.close_reason = "limit"
        if self.transport is not None:
            self.transport.abort()

    def busy(self) -> bool:
        """A request in hand: received, being handled or with its answer owed."""
        return self.handling or bool(self.queue) or bool(self.answers)

    def partial_bytes(self) -> int:
        return self.decoder.buffered_bytes

    def pause(self, reason: int) -> None:
        """Stop reading for `reason` (a PAUSE_* bit) until `resume(reason)`."""
        if not self.paused and self.transport is not None and not self.closing:
            self.transport.pause_reading()
        self.paused |= reason

    def resume(self, reason: int) -> None:
        if not self.paused & reason:
            return
        self.paused &= ~reason
        if not self.paused and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def mute(self) -> None:
        """Read no further requests until `unmute` (what Kafka does to a throttled client's
        channel); requests already received are still handled."""
        self.pause(PAUSE_MUTED)

    def unmute(self) -> None:
        self.resume(PAUSE_MUTED)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.closing:
            return
        self.last_active = self.server.now()
        decoder = self.decoder
        try:
            frames = decoder.buffer_updated(nbytes)
        except FrameError as e:
            self.close(f"invalid frame: {e}")
            return
        if frames:
            self.queue.extend(frames)
            queued = self.queued_bytes = self.queued_bytes + sum(len(f) for f in frames)
            waiter = self.waiter  # `_wake()`, inlined: once per request received
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if len(self.queue) >= _MAX_QUEUED or queued >= _MAX_QUEUED_BYTES:
                self.pause(PAUSE_QUEUE)
        if decoder.pool is not None and decoder.needs_memory and not self.paused & PAUSE_MEMORY:
            self.pause(PAUSE_MEMORY)
            decoder.pool.wait(self._memory_released)

    def _memory_released(self, overdraft: bool) -> bool:
        """The pool's waiter (see memory_pool.Waiter): take the next read's window and read
        on; whether it got one or, with `overdraft`, holds the overdraft."""
        if self.closing:
            return not overdraft
        if not self.decoder.grow(overdraft):
            return False
        self.resume(PAUSE_MEMORY)
        return self.decoder.holds_overdraft if overdraft else True

    def _release_memory(self) -> None:
        """The connection is gone: what its requests hold of the pool goes back, its
        buffers to the server's recycler."""
        pool = self.decoder.pool
        if pool is not None:
            pool.cancel(self._memory_released)
            held = sum(len(f) for f in self.queue if f is not None)
            self.queue.clear()
            self.queued_bytes = 0
            if held:
                pool.release(held)
        self.decoder.release()

    def mute_for(self, delay_ms: float) -> None:
        """Read no further request for `delay_ms` (a throttled client, as Kafka mutes its
        channel once the answer carrying the throttle time is sent): the socket is not read
        and requests already received wait."""
        if delay_ms <= 0 or self.closing or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + delay_ms / 1000.0
        if until <= self.muted_until:
            return
        self.muted_until = until
        if self.unmute_timer is not None:
            self.unmute_timer.cancel()
        self.unmute_timer = loop.call_at(until, self._unmuted)
        self.mute()

    def _unmuted(self) -> None:
        self.unmute_timer = None
        self._wake()
        self.unmute()

    def eof_received(self) -> bool | None:
        # Answer what was received, then close (a client may half-close after sending).
        # TLS has no half-close: the transport closes whatever is returned.
        self.queue.append(None)  # sentinel: close once the queue drains
        self._wake()
        return self.info is None or self.info.security_protocol not in ("SSL", "SASL_SSL")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing:  # the peer closed or reset it (or the network did)
            self.close_reason = "client"
            self._give_up_waiting_read()
        self.closing = True
        if self.unmute_timer is not None:
            self.unmute_timer.cancel()
        self.server._connections.discard(self)
        self.server.gate.gone(self)
        if self.info is not None and self.server.on_close is not None:
            try:
                self.server.on_close(self.info)
            except Exception:
                log.exception("Close listener failed for connection %s", self.info.peer)
        self._wake()
        self.can_write.set()
        self._stop_waiting_for_writable()
        self._drop_answers()
        if self.decoder.buffered_bytes and self.close_reason != "idle":
            log.info(
                "Connection %s closed with %d bytes of a partial request",
                self.info.peer if self.info else "?",
                self.decoder.buffered_bytes,
            )
        self._release_memory()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def close(self, reason: str, *, why: str = "error", level: int = logging.WARNING) -> None:
        """Close the connection, logging `reason`; `why` is its close reason in the metrics."""
        if self.closing:
            return
        self.closing = True
        self.close_reason = why
        log.log(
            level,
            "Closing connection %s (listener %s): %s",
            self.info.peer if self.info else "?",
            self.listener,
            reason,
        )
        if self.transport is not None:
            self.transport.close()
        self._wake()
        self._stop_waiting_for_writable()
        self._drop_answers()
        self._give_up_waiting_read()

    def _give_up_waiting_read(self) -> None:
        """A Fetch only waits for records to read: with its connection gone nobody would read
        the answer, so its parked wait leaves the purgatory now rather than after up to
        `max_wait_ms` (what the client asked for; days, if it likes). Other requests run to
        their end, their answers dropped, as in Kafka."""
        task = self.task
        if (
            self.handling
            and self.handling_key in _GIVEN_UP_WITH_CONNECTION
            and task is not None
            and task is not asyncio.current_task()
        ):
            task.cancel()

    def _drop_answers(self) -> None:
        """The connection is gone: waiting answers are dropped (what their requests did
        stays done, as in Kafka)."""
        writer, self.writer = self.writer, None
        if writer is not None and writer is not asyncio.current_task():
            writer.cancel()
        for answer in self.answers:  # file regions of unsent answers are closed
            answer.add_done_callback(_close_regions)
        self.answers.clear()
        self.answer_sent.set()

    def _stop_waiting_for_writable(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.cancel()

    # --- writing a response with file regions ------------------------------------------------
    def _sendfile_fd(self) -> int | None:
        """The socket's fd if region bytes may go to it with os.sendfile: not on TLS."""
        transport = self.transport
        if transport is None or transport.get_extra_info("ssl_object") is not None:
            return None
        sock = transport.get_extra_info("socket")
        return None if sock is None else int(sock.fileno())

    async def _write_parts(self, parts: Sequence[ResponsePart]) -> None:
        """Write one response given as byte chunks and file regions, in order: regions go
        with os.sendfile (after the chunks before them have left the transport's buffer),
        or are read and written on TLS connections. A region the file no longer holds
        whole (truncated since the read) closes the connection: its length is already in
        the frame. Every region is closed afterwards."""
        transport = self.transport
        try:
            sock_fd = self._sendfile_fd()
            for part in parts:
                if self.closing or transport is None:
                    return
                if isinstance(part, bytes):
                    transport.write(part)
                elif not isinstance(part, FileRegion):
                    raise TypeError(f"unexpected response part {type(part).__name__}")
                elif sock_fd is None:
                    transport.write(part.read())
                else:
                    await self._drain()
                    if not self.closing:
                        await self._sendfile(sock_fd, part)
            if not self.can_write.is_set():
                await self.can_write.wait()
        except ShortRegionError as e:
            self.close(f"record bytes of a response are gone from their segment file: {e}")
        except OSError as e:
            self.close(f"sending from a segment file failed: {e}")
        finally:
            for part in parts:
                if isinstance(part, FileRegion):
                    part.close()

    async def _drain(self) -> None:
        """Wait until the transport's write buffer is empty (bytes written before a region
        must reach the socket first)."""
        transport = self.transport
        if transport is None or transport.get_write_buffer_size() == 0:
            return
        transport.set_write_buffer_limits(high=0)  # pauses us now, resumes once empty
        try:
            while not self.closing and transport.get_write_buffer_size() > 0:
                self.can_write.clear()
                await self.can_write.wait()
        finally:
            if not self.closing:
                transport.set_write_buffer_limits()

    async def _sendfile(self, sock_fd: int, region: FileRegion) -> None:
        position, left = region.position, region.length
        while left > 0 and not self.closing:
            try:
                sent = os.sendfile(sock_fd, region.fd, position, left)
            except BlockingIOError:
                await self._wait_writable(sock_fd)
                continue
            if sent == 0:
                raise ShortRegionError(
                    f"{left} of {region.length} bytes missing at position {position}"
                )
            position += sent
            left -= sent

    async def _wait_writable(self, sock_fd: int) -> None:
        """Until the socket can take more. The event loop refuses add_writer on the fd its
        transport owns, so a duplicate of it is watched (the same socket)."""
        loop = asyncio.get_running_loop()
        fd = os.dup(sock_fd)
        self.writable = fut = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(fd, ready)
        try:
            await fut
        except asyncio.CancelledError:
            if not self.closing:
                raise
        finally:
            self.writable = None
            loop.remove_writer(fd)
            os.close(fd)

    # --- answering in request order ------------------------------------------------------
    async def _write_response(self, response: Response | None) -> None:
        if not response or self.closing or self.transport is None:
            return
        if not isinstance(response, bytes):
            await self._write_parts(response)
            return
        self.transport.write(response)
        self.last_active = self.server.now()
        if not self.can_write.is_set():
            await self.can_write.wait()

    def _queue_answer(self, answer: asyncio.Future[Response | None]) -> None:
        """Send `answer`'s result after every answer queued before it."""
        answer.add_done_callback(_consume_exception)
        self.answers.append(answer)
        if self.writer is None:
            self.writer = asyncio.get_running_loop().create_task(self._write_answers())

    def _queue_now(
        self, response: Response | None = None, error: BaseException | None = None
    ) -> None:
        fut: asyncio.Future[Response | None] = asyncio.get_running_loop().create_future()
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(response)
        self._queue_answer(fut)

    async def _write_answers(self) -> None:
        """The writer: while answers are queued, wait for the first, send it, drop it."""
        assert self.info is not None
        try:
            while self.answers and not self.closing:
                answer = self.answers[0]
                try:
                    # shielded: dropping the answers must not cancel the work behind them
                    # (an answer already there needs no shield, nor a wait)
                    response = answer.result() if answer.done() else await asyncio.shield(answer)
                except CloseAfterResponse as e:
                    if self.transport is not None and not self.closing:
                        self.transport.write(e.response)  # flushed before the close
                    self.close(str(e))
                    return
                except CloseConnection as e:
                    self.close(str(e))
                    return
                await self._write_response(response)
                if self.answers and self.answers[0] is answer:
                    self.answers.popleft()
                self.answer_sent.set()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Unexpected error answering on connection %s", self.info.peer)
            self.close("internal error")
        finally:
            if self.writer is asyncio.current_task():
                self.writer = None
            self.answer_sent.set()

    async def _answers_sent(self) -> None:
        """Until every queued answer is sent (or the connection closes)."""
        while self.answers and not self.closing:
            self.answer_sent.clear()
            await self.answer_sent.wait()

    def _wake(self) -> None:
        """Wake the connection's task if it waits: a request came, or it closes or unmutes
        (it checks what changed before it waits again)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _run(self) -> None:
        handler = self.server.handler
        loop = asyncio.get_running_loop()
        assert self.info is not None
        try:
            while not self.closing:
                if not self.queue or self.unmute_timer is not None:  # nothing to do, or muted
                    # a bare future, not an asyncio.Event: no Python call to set or wait
                    self.waiter = waiter = loop.create_future()
                    try:
                        await waiter
                    finally:
                        self.waiter = None
                    continue
                frame = self.queue.popleft()
                if frame is not None:
                    self.queued_bytes -= len(frame)
                if (
                    self.paused & PAUSE_QUEUE
                    and len(self.queue) < _MAX_QUEUED // 2
                    and self.queued_bytes < _MAX_QUEUED_BYTES // 2
                ):
                    self.resume(PAUSE_QUEUE)
                if frame is None:  # EOF sentinel
                    await self._answers_sent()
                    if self.transport is not None:
                        self.transport.close()
                    return
                self.handling = True
                self.handling_key = (frame[0] << 8 | frame[1]) if len(frame) >= 2 else -1
                try:
                    response = await handler(self.info, frame)
                except CloseConnection as e:
                    if self.answers:  # answered after the answers before it
                        self._queue_now(error=e)
                        return
                    if (
                        isinstance(e, CloseAfterResponse)
                        and self.transport is not None
                        and not self.closing
                    ):
                        self.transport.write(e.response)  # flushed before the close
                    self.close(str(e))
                    return
                finally:  # the request is handled: its memory goes back to the pool
                    self.handling = False
                    self.last_active = self.server.now()
                    pool = self.decoder.pool
                    if pool is not None:
                        pool.release(len(frame))
                if isinstance(response, Deferred):
                    self._queue_answer(asyncio.ensure_future(response.answer))
                elif self.answers:
                    self._queue_now(response)
                else:
                    await self._write_response(response)
                    continue
                while len(self.answers) >= _MAX_DEFERRED and not self.closing:
                    self.answer_sent.clear()
                    await self.answer_sent.wait()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Unexpected error on connection %s", self.info.peer)
            self.close("internal error")


# Requests whose handler only waits to read (Fetch): given up when their connection goes.
_GIVEN_UP_WITH_CONNECTION = frozenset({1})


def _consume_exception(fut: asyncio.Future[Response | None]) -> None:
    """Deferred answers dropped with their connection: their errors are not news."""
    if not fut.cancelled():
        fut.exception()


def _close_regions(fut: asyncio.Future[Response | None]) -> None:
    """An answer that will not be sent: close the file regions it holds."""
    if fut.cancelled() or fut.exception() is not None:
        return
    response = fut.result()
    if response is not None and not isinstance(response, bytes):
        for part in response:
            if isinstance(part, FileRegion):
                part.close()


class NetworkServer:
    def __init__(
        self,
        handler: FrameHandler,
        *,
        max_request_bytes: int,
        on_close: CloseListener | None = None,
        limits: ConnectionLimits | None = None,
        inter_broker_listener: str | None = None,
        stats: NetworkStats | None = None,
    ) -> None:
        self.handler = handler
        self.on_close = on_close
        self.max_request_bytes = max_request_bytes
        self.limits = limits = limits or ConnectionLimits()
        # Where every connection's socket reads land between frames (one event loop reads one
        # socket at a time, and the bytes are copied out at once): see FrameDecoder.
        self.receive_scratch = bytearray(_RECEIVE_SCRATCH_BYTES)
        # large frames' buffers connections let go, for any connection to use again
        self.recycler = BufferRecycler()
        self.pool = MemoryPool(limits.pool_capacity)
        # decoders count in the pool only when it is bounded (Kafka's MemoryPool.NONE counts
        # nothing): an unbounded one costs the common case nothing
        self.decoder_pool = self.pool if self.pool.bounded else None
        self.stats = stats if stats is not None else NetworkStats()
        self.stats.pool = self._pool_numbers
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[_Connection] = set()
        self._next_id = 0
        # who is served, held or closed; idle connections closed
        self.gate = ConnectionGate(limits, inter_broker_listener, self.stats, self._connections)
        self.quotas = self.gate.quotas
        self.now: Callable[[], float] = self.gate.now

    def _pool_numbers(self) -> tuple[int, int]:
        pool = self.pool
        return (pool.used, pool.available) if pool.bounded else (0, pool.available)

    def close_idle(self, before: float) -> int:
        """Close the connections idle since loop time `before` (the sweep does it on its
        own); how many."""
        return self.gate.close_idle(before)

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
        handshake_timeout = 10.0 if ssl_context is not None else None
        family = _ip_literal_family(host)
        if family is None:  # a name (or "" for every interface): resolved by the loop
            srv = await loop.create_server(
                lambda: _Connection(self, listener, security_protocol),
                host,
                port,
                reuse_address=True,
                backlog=512,
                ssl=ssl_context,
                ssl_handshake_timeout=handshake_timeout,
            )
        else:  # an address: bound here, with no resolver (nor its IDNA codec) in the start
            srv = await loop.create_server(
                lambda: _Connection(self, listener, security_protocol),
                sock=bound_socket(family, host, port, backlog=512),
                backlog=512,
                ssl=ssl_context,
                ssl_handshake_timeout=handshake_timeout,
            )
        self._servers.append(srv)
        self.now = self.gate.now = loop.time
        self.gate.start()
        sock = srv.sockets[0]
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        for srv in self._servers:
            srv.close()
        self.gate.stop()
        for conn in list(self._connections):
            if not conn.closing:
                conn.close_reason = "shutdown"
                conn.closing = True
            if conn.transport is not None:
                conn.transport.close()
            if conn.task is not None:
                conn.task.cancel()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()
