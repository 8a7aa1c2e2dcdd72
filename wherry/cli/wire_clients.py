"""Requests the tools send to brokers themselves (what confluent-kafka's AdminClient does not
offer): the bootstrap list read as addresses, and one connection per broker."""

from __future__ import annotations

from wherry.cli.common import CommandError
from wherry.outbound.client import RequestClient
from wherry.outbound.connection import OutboundConnection
from wherry.outbound.security import PLAINTEXT, ClientSecurity

__all__ = ["BrokerClients", "bootstrap_addresses"]


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CommandError(f"Invalid bootstrap server address: {address} (expected host:port)")
    return host.strip("[]"), int(port)


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` as addresses; a CommandError names a malformed one."""
    return [_host_port(a.strip()) for a in bootstrap.split(",") if a.strip()] or [
        _host_port(bootstrap)]


class BrokerClients:
    """One `RequestClient` per broker address, opened on first use."""

    def __init__(self, timeout_s: float, client_id: str,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.timeout_s = timeout_s
        self.security = security
        self.client_id = client_id
        self._conns: dict[str, OutboundConnection] = {}
        self._clients: dict[str, RequestClient] = {}

    def get(self, host: str, port: int) -> RequestClient:
        peer = f"{host}:{port}"
        if peer not in self._clients:
            conn = OutboundConnection(host, port, connect_timeout_s=self.timeout_s,
                                      request_timeout_s=self.timeout_s, security=self.security)
            self._conns[peer] = conn
            self._clients[peer] = RequestClient(conn.connect, client_id=self.client_id,
                                                peer=peer)
        return self._clients[peer]

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
