"""Listening sockets on an IP address bound without the event loop's resolver: a listener
on an address (the usual case) needs no `getaddrinfo`, whose worker threads and IDNA codec a
broker would otherwise carry for good."""

from __future__ import annotations

import socket

__all__ = ["bound_socket", "ip_literal_family"]


def ip_literal_family(host: str) -> socket.AddressFamily | None:
    """AF_INET or AF_INET6 when `host` is an IP address; None for a name or ""."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return family
    return None


def bound_socket(
    family: socket.AddressFamily, host: str, port: int, backlog: int = 100
) -> socket.socket:
    """A TCP socket bound to an address and listening, as the loop's `create_server` makes one
    (address reuse; an IPv6 one for IPv6 only), non-blocking. It listens here, before the loop
    takes it: with address reuse, two sockets may both bind a port nobody listens on yet, and
    only the first `listen` wins; the loser's error is raised here (uvloop's `create_server`
    would swallow it and give a server without a socket)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind((host, port))
            sock.listen(backlog)
        except OSError as e:  # the message create_server gives
            raise OSError(
                e.errno, f"error while attempting to bind on address {(host, port)!r}: "
                f"{(e.strerror or str(e)).lower()}"
            ) from None
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
