"""`BufferedConnection` (the replica fetchers' connection) over real loopback sockets: answers
split across many writes or sent with their size prefix in one write arrive whole, one per
request; an answer cut short, a peer that closes, or a frame over the size limit fail the
request with ConnectionError and drop the connection, and the next connect starts afresh.

And a follower whose leader answers with a corrupt batch (over a real socket, through the
network endpoint) rejects it: nothing is written to its log, the partition backs off."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.outbound.buffered import BufferedConnection, _time_out
from wherry.protocol.codec import encode_response
from wherry.protocol.records import build_batch
from wherry.replication.fetcher import FetcherConfig, FetchStateKind, ReplicaFetcher
from wherry.replication.network_endpoint import NetworkLeaderEndpoint

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
TIMEOUT_S = 10


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def _serve(handler: Handler) -> tuple[asyncio.AbstractServer, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(60):
            return await coro

    return asyncio.run(bounded())


def test_answers_arrive_whole_however_they_are_written() -> None:
    payloads = [os.urandom(n) for n in (0, 70_000, 3 << 20, 1, 3 << 20, 10, 70_000)]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i, payload in enumerate(payloads):
            await _read_request(reader)
            frame = struct.pack(">i", len(payload)) + payload
            if i % 2:  # in one write
                writer.write(frame)
            else:  # in pieces, the size prefix itself split
                for at in range(0, len(frame), 2 if len(frame) < 16 else 65_537):
                    writer.write(frame[at : at + 65_537 if len(frame) >= 16 else at + 2])
                    await writer.drain()
            await writer.drain()
        writer.close()

    async def go() -> None:
        server, port = await _serve(handler)
        conn = BufferedConnection("127.0.0.1", port, request_timeout_s=TIMEOUT_S)
        try:
            await conn.connect()
            for payload in payloads[:3]:  # each answer dropped before the next: buffer reused
                got = await conn.request(struct.pack(">i", 2) + b"hi")
                assert got.readonly and bytes(got) == payload
                del got
            held = [await conn.request(struct.pack(">i", 2) + b"hi") for _ in payloads[3:]]
            # answers still held are never received into again
            assert [bytes(h) for h in held] == payloads[3:]
        finally:
            await conn.close()
            server.close()

    _run(go())


@pytest.mark.parametrize("how", ["cut", "closed", "too-large"])
def test_a_broken_answer_fails_the_request_and_drops_the_connection(how: str) -> None:
    calls = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        calls += 1
        await _read_request(reader)
        if calls > 1:  # the connection opened after the failure works
            writer.write(struct.pack(">i", 4) + b"good")
        elif how == "cut":
            writer.write(struct.pack(">i", 100_000) + b"x" * 50_000)
        elif how == "too-large":
            writer.write(struct.pack(">i", 2_000_000) + b"x" * 10)
        await writer.drain()
        if calls == 1:
            writer.close()
        else:
            await reader.read()  # until the client closes

    async def go() -> None:
        server, port = await _serve(handler)
        conn = BufferedConnection(
            "127.0.0.1", port, request_timeout_s=TIMEOUT_S, max_response_bytes=1_000_000
        )
        try:
            await conn.connect()
            with pytest.raises(ConnectionError):
                await conn.request(struct.pack(">i", 1) + b"?")
            assert not conn.connected
            with pytest.raises(ConnectionError, match="not connected"):
                await conn.request(struct.pack(">i", 1) + b"?")
            await conn.connect()
            assert bytes(await conn.request(struct.pack(">i", 1) + b"?")) == b"good"
        finally:
            await conn.close()
            server.close()

    _run(go())


def test_a_silent_peer_times_the_request_out() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def go() -> None:
        server, port = await _serve(handler)
        conn = BufferedConnection("127.0.0.1", port, request_timeout_s=0.3)
        try:
            await conn.connect()
            with pytest.raises(TimeoutError):
                await conn.request(struct.pack(">i", 1) + b"?")
            assert not conn.connected
        finally:
            await conn.close()
            server.close()

    _run(go())


def test_a_cancelled_request_drops_the_connection_and_its_timer() -> None:
    """A fetcher stopped mid-request: the answer that may still come is never read as the next
    request's, and the request's timer does not outlive it."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def go() -> None:
        server, port = await _serve(handler)
        conn = BufferedConnection("127.0.0.1", port, request_timeout_s=30)
        try:
            await conn.connect()
            task = asyncio.ensure_future(conn.request(struct.pack(">i", 1) + b"?"))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not conn.connected
            loop = asyncio.get_running_loop()
            timers = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()
                      and getattr(h, "_callback", None) is _time_out]
            assert not timers, timers
        finally:
            await conn.close()
            server.close()

    _run(go())


def test_follower_rejects_a_corrupt_batch_without_writing_it(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    good = build_batch([(None, b"v" * 1000)] * 20, base_offset=0, partition_leader_epoch=3)
    corrupt = bytearray(build_batch([(None, b"w" * 1000)] * 20, base_offset=20))
    corrupt[-10] ^= 0x01  # a record byte: the batch CRC no longer matches
    answers = [good, bytes(corrupt)]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while answers:
            request = await _read_request(reader)
            (correlation_id,) = struct.unpack_from(">i", request, 4)
            body = {
                "throttle_time": 0,
                "error_code": 0,
                "session_id": 0,
                "responses": [
                    {
                        "topic": tp.topic,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "error_code": 0,
                                "high_watermark": 20,
                                "log_start_offset": 0,
                                "aborted_transactions": None,
                                "records": answers.pop(0),
                            }
                        ],
                    }
                ],
            }
            writer.write(encode_response(1, 12, correlation_id, body))
            await writer.drain()
        await reader.read()

    flog = Log.open(tmp_path / "t-0", LogConfig(), topic_partition=tp, now_ms=0)

    async def go() -> None:
        server, port = await _serve(handler)
        endpoint = NetworkLeaderEndpoint(2, "127.0.0.1", port, config=FetcherConfig())
        fetcher = ReplicaFetcher(
            broker_id=2,
            source_broker_id=1,
            endpoint=endpoint,
            log_for=lambda t: flog if t == tp else None,
            monotonic_ms=lambda: 0,
            config=FetcherConfig(backoff_ms=1000),
        )
        fetcher.states.add(tp, 3, 0)
        fetcher.states.fetching_at(tp, 0, None)
        try:
            await fetcher.fetch(fetcher.states.ready(FetchStateKind.FETCHING, 0))
            assert flog.log_end_offset == 20
            size = flog.size_in_bytes
            await fetcher.fetch(fetcher.states.ready(FetchStateKind.FETCHING, 0))
            assert flog.log_end_offset == 20 and flog.size_in_bytes == size  # nothing written
            state = fetcher.states.get(tp)
            assert state is not None and state.delayed_until_ms == 1000  # backed off
        finally:
            await endpoint.close()
            server.close()

    try:
        _run(go())
        assert bytes(flog.read(0, max_bytes=1 << 20)) == good
    finally:
        flog.close()
