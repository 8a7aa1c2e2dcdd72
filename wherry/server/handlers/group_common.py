"""What the consumer-group handlers share: the client's address as Kafka shows it."""

from __future__ import annotations

from contextvars import ContextVar

# The address of the connection whose request is being handled, as Kafka shows it
# (Java's InetAddress.toString(): "/127.0.0.1"). Set per request by the broker.
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="/unknown")
# The id of the client connection a request came on (share sessions belong to one)
CONNECTION_ID: ContextVar[int] = ContextVar("connection_id", default=-1)


def client_host_of(peer: str) -> str:
    """`ConnectionInfo.peer` ("host:port") → "/host"."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host
