"""The network layer's connection limits on real sockets: per-IP limits and their overrides
(clients bound to 127.0.0.2: all of 127/8 is loopback), max.connections, the creation rate,
idle connections and half-received frames closed after connections.max.idle.ms, and a request
memory pool that pauses reading when exhausted and resumes without losing or mixing bytes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import resource
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from wherry.server.connection_limits import ConnectionLimits
from wherry.server.network import ConnectionInfo, NetworkServer, Response

Handler = Callable[[ConnectionInfo, memoryview], Awaitable[Response | None]]


def _run(main: Callable[[], Coroutine[Any, Any, None]], loop_kind: str = "uvloop") -> None:
    if loop_kind == "uvloop":
        import uvloop

        uvloop.run(asyncio.wait_for(main(), 60))
    else:
        asyncio.run(asyncio.wait_for(main(), 60))


async def _echo_digest(_info: ConnectionInfo, frame: memoryview) -> Response:
    digest = hashlib.sha256(frame).digest()
    return struct.pack(">i", len(digest)) + digest


async def _serve(limits: ConnectionLimits, handler: Handler = _echo_digest,
                 max_request_bytes: int = 100 << 20) -> tuple[NetworkServer, int]:
    server = NetworkServer(handler, max_request_bytes=max_request_bytes, limits=limits)
    port = await server.listen("127.0.0.1", 0)
    return server, port


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, source: str = "127.0.0.1") -> Client:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, local_addr=(source, 0), limit=1 << 20
        )
        return cls(reader, writer)

    async def request(self, payload: bytes, timeout: float = 10) -> bytes:
        self.writer.write(struct.pack(">i", len(payload)) + payload)
        await self.writer.drain()
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))
        return await asyncio.wait_for(self.reader.readexactly(size[0]), timeout)

    async def closed_by_server(self, timeout: float = 5) -> bool:
        """Whether the server closes the connection within `timeout` (EOF or reset)."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except (ConnectionError, OSError):
            return True
        except TimeoutError:
            return False
        return data == b""

    def close(self) -> None:
        self.writer.close()


def _digest(payload: bytes) -> bytes:
    return hashlib.sha256(payload).digest()


def test_per_ip_limit_closes_the_eleventh_and_an_override_allows_more(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wherry.server.network")

    async def main() -> None:
        server, port = await _serve(ConnectionLimits(
            max_connections_per_ip=10, max_connections_per_ip_overrides={"127.0.0.2": 20}))
        try:
            first = [await Client.open(port) for _ in range(10)]
            for c in first:
                assert await c.request(b"hi") == _digest(b"hi")
            eleventh = await Client.open(port)
            assert await eleventh.closed_by_server()
            for c in first:  # the first ten keep working
                assert await c.request(b"still") == _digest(b"still")
            other = [await Client.open(port, "127.0.0.2") for _ in range(20)]
            for c in other:
                assert await c.request(b"x") == _digest(b"x")
            over = await Client.open(port, "127.0.0.2")
            assert await over.closed_by_server()
            first[0].close()  # a slot frees: a new connection from 127.0.0.1 is served
            await asyncio.sleep(0.2)
            again = await Client.open(port)
            assert await again.request(b"again") == _digest(b"again")
            assert server.stats.closes["PLAINTEXT", "limit"] == 2
            assert server.stats.connections["PLAINTEXT"] == 30
            assert server.quotas.by_ip == {"127.0.0.1": 10, "127.0.0.2": 20}
            for c in [*first[1:], *other, again, eleventh, over]:
                c.close()
        finally:
            await server.close()

    _run(main)
    rejected = [r.getMessage() for r in caplog.records if "Rejected" in r.getMessage()]
    assert rejected == [
        "Rejected connection from /127.0.0.1, address already has the configured maximum "
        "of 10 connections.",
        "Rejected connection from /127.0.0.2, address already has the configured maximum "
        "of 20 connections.",
    ]


def test_max_connections_makes_a_new_connection_wait_for_a_slot() -> None:
    async def main() -> None:
        server, port = await _serve(ConnectionLimits(max_connections=3))
        try:
            clients = [await Client.open(port) for _ in range(3)]
            for c in clients:
                assert await c.request(b"a") == _digest(b"a")
            fourth = await Client.open(port)  # accepted by the kernel, not served
            with pytest.raises(TimeoutError):
                await fourth.request(b"b", timeout=0.5)
            clients[0].close()
            size = struct.unpack(">i", await asyncio.wait_for(fourth.reader.readexactly(4), 5))
            assert await fourth.reader.readexactly(size[0]) == _digest(b"b")
            assert server.quotas.total == 3
            for c in [*clients[1:], fourth]:
                c.close()
        finally:
            await server.close()

    _run(main)


def test_creation_rate_delays_connections_over_it() -> None:
    async def main() -> None:
        # one connection a second, measured over 2 windows of 1 s
        server, port = await _serve(ConnectionLimits(
            listener_max_connection_creation_rate={"PLAINTEXT": 1}, quota_window_num=2))
        try:
            first = await Client.open(port)
            t0 = time.monotonic()
            assert await first.request(b"1") == _digest(b"1")
            assert time.monotonic() - t0 < 0.5
            second = await Client.open(port)
            t0 = time.monotonic()
            assert await second.request(b"2") == _digest(b"2")
            waited = time.monotonic() - t0
            assert 0.7 < waited < 3, waited  # (2/s - 1/s) / 1/s * 1 s
            first.close()
            second.close()
        finally:
            await server.close()

    _run(main)


def test_idle_connections_are_closed_and_busy_ones_kept() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = min(2000, (soft - 100) // 2)

    async def main() -> None:
        # 1.5 s idle, a request every 100 ms: a loaded machine's stall of a second (2,000
        # closes and their log lines) must not make the busy one look idle.
        server, port = await _serve(ConnectionLimits(connections_max_idle_ms=1500))
        try:
            idle = [await Client.open(port) for _ in range(n)]
            busy = await Client.open(port)
            # every connection accepted (a loaded machine drains the backlog slowly, and the
            # first idle ones may be closed meanwhile)
            def accepted() -> int:
                stats = server.stats
                return stats.connections["PLAINTEXT"] + stats.closes["PLAINTEXT", "idle"]

            deadline = time.monotonic() + 20
            while accepted() < n + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert accepted() == n + 1
            t0 = time.monotonic()
            # the busy one sends a request every 100 ms, the others nothing
            closed = 0
            while time.monotonic() - t0 < 5 and closed < n:
                assert await busy.request(b"ping") == _digest(b"ping")
                await asyncio.sleep(0.1)
                closed = server.stats.closes["PLAINTEXT", "idle"]
            assert closed == n
            elapsed = time.monotonic() - t0
            assert elapsed < 3.5, elapsed
            # still a request every 100 ms while the idle ones are checked (2,000 reads take
            # longer than the idle time on a loaded machine)
            done = asyncio.Event()

            async def keep_busy() -> None:
                while not done.is_set():
                    assert await busy.request(b"ping") == _digest(b"ping")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), 0.1)

            pinger = asyncio.create_task(keep_busy())
            results = await asyncio.gather(*(c.closed_by_server(2) for c in idle))
            done.set()
            await pinger
            assert all(results)
            assert await busy.request(b"ping") == _digest(b"ping")
            assert server.stats.connections["PLAINTEXT"] == 1
            busy.close()
            for c in idle:
                c.close()
        finally:
            await server.close()

    _run(main)


def test_half_received_frame_is_closed_once_the_trickle_stops() -> None:
    async def main() -> None:
        server, port = await _serve(ConnectionLimits(connections_max_idle_ms=600))
        try:
            half = await Client.open(port)
            half.writer.write(struct.pack(">i", 100) + b"x" * 20)  # promised 100, sent 20
            trickle = await Client.open(port)
            trickle.writer.write(struct.pack(">i", 100 << 20))  # announces 100 MiB
            t0 = time.monotonic()
            for _ in range(8):  # a byte every 200 ms keeps it open
                await asyncio.sleep(0.2)
                trickle.writer.write(b"y")
            assert await half.closed_by_server(2)
            assert time.monotonic() - t0 > 1.0  # not before it went quiet
            assert not trickle.reader.at_eof()
            stopped = time.monotonic()
            assert await trickle.closed_by_server(3)
            assert 0.5 < time.monotonic() - stopped < 2.0
            assert server.stats.closes["PLAINTEXT", "idle"] == 2
        finally:
            await server.close()

    _run(main)


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_exhausted_pool_pauses_reading_and_loses_nothing(loop_kind: str) -> None:
    capacity = 2 << 20
    seen = {"max_used": 0, "max_waiting": 0}

    async def main() -> None:
        server: NetworkServer

        async def slow_digest(info: ConnectionInfo, frame: memoryview) -> Response:
            seen["max_used"] = max(seen["max_used"], server.pool.used)
            seen["max_waiting"] = max(seen["max_waiting"], server.pool.waiting)
            await asyncio.sleep(0.02)  # held while handled
            return await _echo_digest(info, frame)

        server, port = await _serve(
            ConnectionLimits(queued_max_request_bytes=capacity), slow_digest, 1 << 20)
        try:
            payloads = [[os.urandom(900_000 + 1000 * i + k) for k in range(3)] for i in range(8)]

            async def client(mine: list[bytes]) -> list[bytes]:
                c = await Client.open(port)
                out = []
                for p in mine:  # sent in pieces, as a slow client might
                    c.writer.write(struct.pack(">i", len(p)))
                    for i in range(0, len(p), 300_000):
                        c.writer.write(p[i : i + 300_000])
                        await c.writer.drain()
                    size = struct.unpack(">i", await asyncio.wait_for(c.reader.readexactly(4),
                                                                       30))
                    out.append(await c.reader.readexactly(size[0]))
                c.close()
                return out

            got = await asyncio.gather(*(client(p) for p in payloads))
            assert got == [[_digest(p) for p in mine] for mine in payloads]
            await asyncio.sleep(0.2)
            assert server.pool.used == 0 and server.pool.waiting == 0
        finally:
            await server.close()

    _run(main, loop_kind)
    assert seen["max_waiting"] > 0  # the pool did run out and readers waited
    assert seen["max_used"] <= capacity + (2 << 20), seen


def test_connection_metrics_as_scraped() -> None:
    """Kafka's socket-server metrics (count, creations, closes, here by reason) and the memory
    pool's, read by the broker's Prometheus collector from the network layer's numbers."""
    from prometheus_client import generate_latest

    from wherry.observability.collector import broker_registry
    from wherry.observability.request_stats import RequestStats
    from wherry.observability.sources import BrokerSources
    from wherry.replication.metadata_cache import MetadataCache

    scraped: list[str] = []

    async def main() -> None:
        server, port = await _serve(ConnectionLimits(
            max_connections_per_ip=2, connections_max_idle_ms=300,
            queued_max_request_bytes=200 << 20))
        src = BrokerSources(0, MetadataCache(0), RequestStats(), network_stats=server.stats)
        try:
            a, b = await Client.open(port), await Client.open(port)
            assert await a.request(b"x") == _digest(b"x")
            refused = await Client.open(port)
            assert await refused.closed_by_server()
            await b.request(b"y")
            b.close()
            await asyncio.sleep(0.1)
            scraped.append(generate_latest(broker_registry(src)).decode())
            assert await a.closed_by_server(3)  # idle
            scraped.append(generate_latest(broker_registry(src)).decode())
        finally:
            await server.close()

    _run(main)
    first, second = scraped
    m = "kafka_server_socket_server_metrics_"
    assert f'{m}connection_count{{listener="PLAINTEXT"}} 1.0' in first
    assert f'{m}connection_creation_total{{listener="PLAINTEXT"}} 2.0' in first
    assert f'{m}connection_close_total{{listener="PLAINTEXT",reason="limit"}} 1.0' in first
    assert f'{m}connection_close_total{{listener="PLAINTEXT",reason="client"}} 1.0' in first
    assert f'{m}connection_close_total{{listener="PLAINTEXT",reason="idle"}} 1.0' in second
    assert f'{m}connection_count{{listener="PLAINTEXT"}} 0.0' in second
    assert "kafka_network_socketserver_memorypoolused 0.0" in second
    (available,) = [line.split()[1] for line in second.splitlines()
                    if line.startswith("kafka_network_socketserver_memorypoolavailable ")]
    assert float(available) == 200 << 20


def test_inter_broker_listener_goes_over_max_connections_and_another_listener_makes_room(
) -> None:
    async def main() -> None:
        server = NetworkServer(_echo_digest, max_request_bytes=1 << 20,
                               limits=ConnectionLimits(max_connections=2),
                               inter_broker_listener="INTERNAL")
        clients_port = await server.listen("127.0.0.1", 0, "CLIENTS")
        internal_port = await server.listen("127.0.0.1", 0, "INTERNAL")
        try:
            old = await Client.open(clients_port)
            assert await old.request(b"a") == _digest(b"a")
            await asyncio.sleep(0.05)
            recent = await Client.open(clients_port)
            assert await recent.request(b"b") == _digest(b"b")
            broker = await Client.open(internal_port)  # served at once, over the limit
            assert await broker.request(b"c", timeout=2) == _digest(b"c")
            assert await old.closed_by_server(2)  # the least recently active one went
            assert await recent.request(b"d") == _digest(b"d")
            assert server.quotas.total == 2
            assert server.stats.closes["CLIENTS", "limit"] == 1
            for c in (recent, broker):
                c.close()
        finally:
            await server.close()

    _run(main)
