"""A TLS client closing its connection is an ordinary event: the listener closes its side
without asyncio's "returning true from eof_received() has no effect when using ssl" warning,
which the broker logged for every TLS client that disconnected (a half-closed TLS connection
cannot be kept open to send answers: the TLS layer closes it anyway)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from pathlib import Path

import pytest

from tests.security.tls_material import make_tls_material
from wherry.server.network import ConnectionInfo, NetworkServer


async def _echo(_info: ConnectionInfo, frame: memoryview) -> bytes:
    return struct.pack(">i", len(frame)) + bytes(frame)


async def _one_round_and_close(tmp_path: Path) -> None:
    tls = make_tls_material(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(tls.broker_keystore))
    server = NetworkServer(_echo, max_request_bytes=1 << 20)
    port = await server.listen(
        "127.0.0.1", 0, "SSL", security_protocol="SSL", ssl_context=server_ctx
    )
    try:
        client_ctx = ssl.create_default_context(cafile=str(tls.ca_pem))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        writer.write(struct.pack(">i", 5) + b"hello")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(9), 5) == b"\x00\x00\x00\x05hello"
        writer.close()  # close_notify: the server sees EOF
        await writer.wait_closed()
        async with asyncio.timeout(5):
            while server._connections:
                await asyncio.sleep(0.01)
    finally:
        await server.close()


def test_tls_client_disconnect_logs_no_asyncio_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(_one_round_and_close(tmp_path))
    assert not [r for r in caplog.records if "eof_received" in r.getMessage()], caplog.text
