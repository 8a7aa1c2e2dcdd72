"""Blocking socket helpers of the test tools that speak a wire protocol themselves."""

from __future__ import annotations

import socket

__all__ = ["recv_exact"]


def recv_exact(sock: socket.socket, n: int, *, closed: str) -> bytes:
    """Read exactly ``n`` bytes; `ConnectionError` with the message ``closed`` on end of file."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(closed)
        buf += chunk
    return bytes(buf)
