"""A small HTTP/1.1 server on asyncio's streams: GET and HEAD only, one request per connection
(`Connection: close`), plain responses or server-sent event streams.

Enough for `/metrics`, the health endpoints and the console; no dependency. Requests are
bounded (8 KiB of request line and headers, read within 10 s); a connection that sends
anything else gets 400/405 and is closed. `close` stops listening and ends every open
connection, event streams included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from wherry.runtime.bound_socket import bound_socket, ip_literal_family

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 10.0
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # lower-case names


@dataclass(slots=True)
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class EventStream:
    """A `text/event-stream` answer: each chunk the iterator yields is written as it comes."""

    chunks: AsyncIterator[bytes]


Handler = Callable[[HttpRequest], Awaitable[HttpResponse | EventStream]]


class HttpServer:
    def __init__(self, routes: Mapping[str, Handler], *, name: str = "http") -> None:
        self.routes = dict(routes)
        self.name = name
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()

    async def listen(self, host: str, port: int) -> int:
        """Start listening; returns the bound port (port 0: chosen by the OS)."""
        family = ip_literal_family(host)
        if family is None:  # a name (or "" for every interface): resolved by the loop
            server = await asyncio.start_server(self._on_connection, host, port)
        else:  # an address: bound here, with no resolver (nor its threads) in the broker
            sock = bound_socket(family, host, port)
            server = await asyncio.start_server(self._on_connection, sock=sock)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        tasks = list(self._connections)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5.0)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: error serving a request", self.name)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await _write(writer, HttpResponse(400, b"request head too large\n"), head=False)
            return
        if len(head) > MAX_HEAD_BYTES:
            await _write(writer, HttpResponse(400, b"request head too large\n"), head=False)
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await _write(writer, HttpResponse(400, b"bad request line\n"), head=False)
            return
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            resp = HttpResponse(405, b"only GET and HEAD\n", headers={"Allow": "GET, HEAD"})
            await _write(writer, resp, head=False)
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        url = urlsplit(target)
        request = HttpRequest(method, url.path or "/", parse_qs(url.query), headers)
        handler = self.routes.get(request.path)
        if handler is None:
            await _write(writer, HttpResponse(404, b"not found\n"), head=method == "HEAD")
            return
        answer = await handler(request)
        if isinstance(answer, HttpResponse):
            await _write(writer, answer, head=method == "HEAD")
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Cache-Control: no-cache\r\nConnection: close\r\nX-Accel-Buffering: no\r\n\r\n"
        )
        await writer.drain()
        if method == "HEAD":
            return
        closed = asyncio.ensure_future(reader.read())  # EOF or data: the client went away
        try:
            async for chunk in answer.chunks:
                if closed.done():
                    break
                writer.write(chunk)
                await writer.drain()
        finally:
            closed.cancel()
            aclose = getattr(answer.chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


async def _write(writer: asyncio.StreamWriter, resp: HttpResponse, *, head: bool) -> None:
    lines = [
        f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Unknown')}",
        f"Content-Type: {resp.content_type}",
        f"Content-Length: {len(resp.body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in resp.headers.items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if not head:
        writer.write(resp.body)
    await writer.drain()
