"""network.py's zero-copy writes on real sockets and files: a response given as byte chunks
and file regions goes out whole and in order (os.sendfile, waiting for the socket when it is
full), responses never interleave, TLS connections get the same bytes by copying, and a
region whose file shrank closes the connection with a log line instead of a short answer."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.security.tls_material import make_tls_material
from wherry.log.file_region import FileRegion
from wherry.server.network import ConnectionInfo, NetworkServer, Response

REGION_BYTES = 6 << 20  # more than the loopback socket buffers hold: sendfile must wait


def _loops() -> list[str]:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


def _run(loop_kind: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop_kind == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def _data_file(path: Path) -> bytes:
    data = os.urandom(REGION_BYTES)
    path.write_bytes(data)
    return data


def _handler(path: Path) -> Callable[[ConnectionInfo, memoryview], Coroutine[Any, Any, Response]]:
    """Frame b"R": [size, b"head", region of the whole file, b"tail"]; anything else: echoed
    as one plain frame."""

    async def handle(_info: ConnectionInfo, frame: memoryview) -> Response:
        if bytes(frame) == b"R":
            fd = os.open(path, os.O_RDONLY)
            try:
                region = FileRegion.of(fd, 0, REGION_BYTES)
            finally:
                os.close(fd)
            size = 4 + REGION_BYTES + 4
            return [struct.pack(">i", size) + b"head", region, b"tail"]
        return struct.pack(">i", len(frame)) + bytes(frame)

    return handle


def _slow_client(port: int, *, context: ssl.SSLContext | None = None) -> socket.socket:
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)  # fills quickly
    raw.settimeout(20)
    raw.connect(("127.0.0.1", port))
    if context is not None:
        return context.wrap_socket(raw, server_hostname="127.0.0.1")
    return raw


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(1 << 20, n - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop_kind", _loops())
def test_regions_are_sent_whole_and_in_order(tmp_path: Path, loop_kind: str) -> None:
    path = tmp_path / "segment.log"
    data = _data_file(path)

    async def main() -> None:
        server = NetworkServer(_handler(path), max_request_bytes=1 << 20)
        port = await server.listen("127.0.0.1", 0)
        try:

            def client() -> tuple[bytes, bytes, bytes]:
                with _slow_client(port) as s:
                    # pipelined: the second and third answers must wait for the first
                    s.sendall(_frame(b"R") + _frame(b"after") + _frame(b"R"))
                    first = _recv_exact(s, 4 + 4 + REGION_BYTES + 4)
                    second = _recv_exact(s, 4 + 5)
                    third = _recv_exact(s, 4 + 4 + REGION_BYTES + 4)
                    return first, second, third

            first, second, third = await asyncio.to_thread(client)
        finally:
            await server.close()
        expected = struct.pack(">i", 4 + REGION_BYTES + 4) + b"head" + data + b"tail"
        assert first == expected and third == expected
        assert second == _frame(b"after")

    _run(loop_kind, main)


@pytest.mark.timeout(60)
def test_tls_connections_get_the_same_bytes_by_copying(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    data = _data_file(path)
    tls = make_tls_material(tmp_path / "tls")

    async def main() -> None:
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(tls.broker_keystore))
        server = NetworkServer(_handler(path), max_request_bytes=1 << 20)
        port = await server.listen(
            "127.0.0.1", 0, "SSL", security_protocol="SSL", ssl_context=server_ctx
        )
        client_ctx = ssl.create_default_context(cafile=str(tls.ca_pem))
        try:

            def client() -> bytes:
                with _slow_client(port, context=client_ctx) as s:
                    s.sendall(_frame(b"R"))
                    return _recv_exact(s, 4 + 4 + REGION_BYTES + 4)

            got = await asyncio.to_thread(client)
        finally:
            await server.close()
        assert got == struct.pack(">i", 4 + REGION_BYTES + 4) + b"head" + data + b"tail"

    asyncio.run(main())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loop_kind", _loops())
def test_a_region_of_a_file_truncated_meanwhile_closes_the_connection(
    tmp_path: Path, loop_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "segment.log"
    _data_file(path)

    async def main() -> None:
        server = NetworkServer(_handler(path), max_request_bytes=1 << 20)
        port = await server.listen("127.0.0.1", 0)
        try:

            def client() -> int:
                with _slow_client(port) as s:
                    s.sendall(_frame(b"R"))
                    head = _recv_exact(s, 8)  # the answer has started; the rest is pending
                    assert head[4:] == b"head"
                    os.truncate(path, 1 << 20)  # e.g. a log truncation shrank the segment
                    got = len(_recv_exact(s, 4 + REGION_BYTES))  # stops at the close
                    return got

            got = await asyncio.to_thread(client)
            assert got < 4 + REGION_BYTES  # a short answer, then the close: never a hang
        finally:
            await server.close()

    with caplog.at_level(logging.WARNING, logger="wherry.server.network"):
        _run(loop_kind, main)
    assert "gone from their segment file" in caplog.text
