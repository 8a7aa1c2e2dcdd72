"""`NetworkServer.listen` binds IP addresses itself (no resolver at start) and names through the
loop: both accept connections and answer; a taken port is refused with the loop's message."""

from __future__ import annotations

import asyncio
import socket

import pytest

from wherry.server.network import ConnectionInfo, NetworkServer, _ip_literal_family


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_ip_literal_family() -> None:
    assert _ip_literal_family("127.0.0.1") == socket.AF_INET
    assert _ip_literal_family("::1") == socket.AF_INET6
    for name in ("localhost", "", "0.0.0", "fe80::1%lo", "example.org"):
        assert _ip_literal_family(name) is None, name


async def _echo_frame(host: str, port: int) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"\x00\x00\x00\x03abc")
        await writer.drain()
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
        return await asyncio.wait_for(reader.readexactly(size), 10)
    finally:
        writer.close()


async def _handler(_info: ConnectionInfo, frame: memoryview) -> bytes:
    body = bytes(frame[::-1])
    return len(body).to_bytes(4, "big") + body  # a response is written as is


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_listen_answers_on_addresses_and_names(host: str) -> None:
    if host == "::1" and not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback")

    async def run() -> None:
        server = NetworkServer(_handler, max_request_bytes=1024)
        try:
            port = await server.listen(host, 0)
            assert port > 0
            assert await _echo_frame(host, port) == b"cba"
            with pytest.raises(OSError, match="error while attempting to bind on address"):
                await server.listen(host, port)  # taken, by the listener above
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(run(), 30))
