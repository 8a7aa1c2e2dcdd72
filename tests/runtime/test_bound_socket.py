"""`bound_socket`: a listener's socket is bound and listening before the loop takes it, so a
port another listener took in the meantime is refused here with the loop's words -- with address
reuse two sockets may both bind a port nobody listens on yet, and uvloop's `create_server`
would otherwise return a server without a socket."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import pytest
import uvloop

from wherry.observability.bind import bind_endpoint
from wherry.observability.endpoints import HttpEndpoint
from wherry.observability.http_server import HttpServer
from wherry.runtime.bound_socket import bound_socket


def test_the_second_socket_for_a_port_is_refused_at_once() -> None:
    first = bound_socket(socket.AF_INET, "127.0.0.1", 0)
    port = first.getsockname()[1]
    try:
        with pytest.raises(OSError) as e:
            bound_socket(socket.AF_INET, "127.0.0.1", port)
        assert e.value.errno == errno.EADDRINUSE
        assert f"error while attempting to bind on address ('127.0.0.1', {port})" in str(e.value)
    finally:
        first.close()


def test_two_consoles_wanting_one_port_get_two_ports() -> None:
    """Two HTTP listeners of one process asking for the same port (as brokers starting at the
    same moment do): the second moves to the next port and says so, on uvloop."""

    async def main() -> tuple[int | None, int | None, list[int]]:
        a, b = HttpServer({}, name="a"), HttpServer({}, name="b")
        probe = bound_socket(socket.AF_INET, "127.0.0.1", 0)
        wanted = probe.getsockname()[1]
        probe.close()
        ep = HttpEndpoint("127.0.0.1", wanted)
        log = logging.getLogger("test.console")
        try:
            got = await asyncio.gather(
                bind_endpoint(a.listen, ep, log, "[a]"), bind_endpoint(b.listen, ep, log, "[b]")
            )
            ports = [s.sockets[0].getsockname()[1] for h in (a, b) for s in h._servers]
            return got[0], got[1], ports
        finally:
            await a.close()
            await b.close()

    first, second, ports = uvloop.run(main())
    assert first is not None and second is not None and first != second
    assert sorted(ports) == sorted((first, second))
