"""Requests the tools send to brokers themselves (what confluent-kafka's AdminClient does not
offer): the bootstrap list read as addresses, one connection per broker, and `WireTool`'s
calls: to any broker, Metadata, FindCoordinator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.cli.client_security import client_security
from wherry.cli.common import CommandError, load_properties_file
from wherry.outbound.client import RequestClient, RequestError
from wherry.outbound.connection import OutboundConnection
from wherry.outbound.security import PLAINTEXT, ClientSecurity

__all__ = ["BrokerClients", "WireCallError", "WireTool", "bootstrap_addresses"]

_METADATA = (3, 12)
_FIND_COORDINATOR = (10, 3)
_MOVING = frozenset((
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
))
_RETRY_S = 0.1


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

    @classmethod
    def configured(cls, command_config: Path | None, timeout_ms: int,
                   client_id: str) -> BrokerClients:
        """Clients set up as a tool's `--command-config` file says (its security settings, and
        its `client.id` over `client_id`), each request bounded by `timeout_ms`."""
        props = load_properties_file(command_config)
        return cls(timeout_ms / 1000, props.get("client.id", client_id), client_security(props))

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()


class WireCallError(Exception):
    """A request answered with an error (`code`), or not answered (`code` None)."""

    def __init__(self, code: int | None, detail: str = "") -> None:
        super().__init__(detail or (ErrorCode(code).name if code is not None else "no answer"))
        self.code = code


class WireTool:
    """A tool's requests over `BrokerClients`: to the first bootstrap broker that answers, to
    every broker, to a group's or transactional id's coordinator."""

    def __init__(self, bootstrap_server: str, clients: BrokerClients) -> None:
        self.bootstrap = bootstrap_addresses(bootstrap_server)
        self.clients = clients

    async def call(self, address: tuple[str, int], api: tuple[int, int], body: Any,
                   **kw: Any) -> Any:
        try:
            return await self.clients.get(*address).call(api[0], api[1], body, **kw)
        except RequestError as e:
            raise WireCallError(None, str(e)) from e

    async def call_any(self, api: tuple[int, int], body: Any) -> Any:
        """`body` to the first bootstrap broker that answers."""
        last: WireCallError | None = None
        for address in self.bootstrap:
            try:
                return await self.call(address, api, body)
            except WireCallError as e:
                last = e
        assert last is not None
        raise last

    async def metadata(self, topics: Sequence[str] | None) -> Any:
        """A Metadata answer: the brokers, and `topics` (None: every topic; []: none)."""
        return await self.call_any(_METADATA, {
            "topics": None if topics is None else [{"topic_id": None, "name": t} for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})

    async def brokers(self) -> dict[int, tuple[str, int]]:
        return {int(b.node_id): (str(b.host), int(b.port))
                for b in (await self.metadata([])).brokers}

    async def coordinator(self, key: str, key_type: int) -> tuple[int, tuple[str, int]]:
        """The coordinator of a group (`key_type` 0) or transactional id (1): id, address."""
        resp = await self.call_any(_FIND_COORDINATOR, {"key": key, "key_type": key_type})
        if resp.error_code != ErrorCode.none:
            raise WireCallError(int(resp.error_code))
        return int(resp.node_id), (str(resp.host), int(resp.port))

    async def at_coordinator(self, key: str, key_type: int, api: tuple[int, int], body: Any,
                             error_of: Callable[[Any], int], timeout_s: float,
                             **kw: Any) -> tuple[int, Any]:
        """`body` to the coordinator of `key` (found with FindCoordinator), found and asked
        again while it moves or loads (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, no answer), for up to `timeout_s`: (its id, its answer).
        A WireCallError with the last such error once the time is up."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                coordinator, address = await self.coordinator(key, key_type)
                answer = await self.call(address, api, body, **kw)
                error = error_of(answer)
                if error not in _MOVING:
                    return coordinator, answer
                failure = WireCallError(error)
            except WireCallError as e:
                if e.code is not None and e.code not in _MOVING:
                    raise
                failure = e
            if time.monotonic() + _RETRY_S > deadline:
                raise failure
            await asyncio.sleep(_RETRY_S)
