"""Tests over real loopback sockets: `run`, a bounded `asyncio.run`, and `FrameServer`, a tiny
asyncio server that reads size-prefixed frames and answers them, for tests that need a peer
speaking the wire format without a whole broker."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Self, TypeVar

T = TypeVar("T")


def run(coro_fn: Callable[[], Awaitable[T]], timeout_s: float = 30.0) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(timeout_s):
            return await coro_fn()

    return asyncio.run(bounded())


@dataclass
class FrameServer:
    """Listens on 127.0.0.1 (`port` 0: one the OS picks) and answers each frame of a connection,
    in order, with what `answer` returns: a whole response frame, b"" to say nothing, or None
    to drop the connection. Frames are read as they arrive, so `max_unanswered` > 1 shows a
    client that sent a request before the previous one was answered. `close_on_accept` drops
    every connection at once. Subclasses override `answer`."""

    port: int = 0
    close_on_accept: bool = False
    connections: int = 0
    unanswered: int = 0
    max_unanswered: int = 0
    server: asyncio.Server | None = None
    writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def answer(self, frame: bytes) -> bytes | None:
        raise NotImplementedError

    async def start(self) -> Self:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for w in list(self.writers):
                w.transport.abort()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        if self.close_on_accept:
            writer.transport.abort()
            self.writers.discard(writer)
            return
        frames: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def read() -> None:
            try:
                while True:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    frames.put_nowait(await reader.readexactly(size))
                    self.unanswered += 1
                    self.max_unanswered = max(self.max_unanswered, self.unanswered)
            except (asyncio.IncompleteReadError, ConnectionError):
                frames.put_nowait(None)

        reader_task = asyncio.create_task(read())
        try:
            while (frame := await frames.get()) is not None:
                out = await self.answer(frame)
                self.unanswered -= 1
                if out is None:
                    return
                if out:
                    writer.write(out)
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            reader_task.cancel()
            writer.transport.abort()
            self.writers.discard(writer)
