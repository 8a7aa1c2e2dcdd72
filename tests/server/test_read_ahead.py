"""How far a connection reads ahead of the request it handles: at most `_MAX_QUEUED` frames
and about `_MAX_QUEUED_BYTES` of them, so large requests pipelined by a client do not each
take a buffer of their own while they wait; every request is still handled, in order."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

from wherry.server.network import (
    _MAX_QUEUED_BYTES,
    PAUSE_QUEUE,
    ConnectionInfo,
    NetworkServer,
)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def _until(cond: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def test_large_requests_are_read_ahead_by_bytes_not_only_by_count() -> None:
    size = 300_000
    count = 12  # 3.6 MB: far fewer frames than the count bound, far more bytes than allowed

    async def main() -> None:
        release = asyncio.Event()
        seen: list[int] = []

        async def handler(conn: ConnectionInfo, frame: memoryview) -> bytes:
            seen.append(frame[0])
            if len(seen) == 1:
                await release.wait()
            return _frame(b"ok %d" % frame[0])

        server = NetworkServer(handler, max_request_bytes=1 << 20)
        port = await server.listen("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"".join(_frame(bytes([i]) * size) for i in range(count)))
            await _until(lambda: len(server._connections) == 1)
            (conn,) = server._connections
            await _until(lambda: bool(conn.paused & PAUSE_QUEUE))
            await asyncio.sleep(0.2)  # the client's bytes keep coming if reading went on
            assert seen == [0]
            assert _MAX_QUEUED_BYTES <= conn.queued_bytes < _MAX_QUEUED_BYTES + size
            assert conn.queued_bytes == sum(len(f) for f in conn.queue if f is not None)
            release.set()
            got = [await asyncio.wait_for(_read_frame(reader), 5) for _ in range(count)]
            assert got == [b"ok %d" % i for i in range(count)]
            assert seen == list(range(count))
            assert conn.queued_bytes == 0 and not conn.paused & PAUSE_QUEUE
            writer.close()
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 30))
