"""What the consumer-group handlers share: the client's address and waiting on callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from wherry.server.broker import Broker

T = TypeVar("T")

# The address of the connection whose request is being handled, as Kafka shows it
# (Java's InetAddress.toString(): "/127.0.0.1"). Set per request by the broker.
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="/unknown")

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def client_host_of(peer: str) -> str:
    """`ConnectionInfo.peer` ("host:port") → "/host"."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


async def wait_for(broker: Broker, start: Callable[[Callable[[T], None]], None]) -> T:
    """Call `start(callback)` and wait until the coordinator answers through `callback`."""
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def done(result: T) -> None:
        if not fut.done():
            fut.set_result(result)

    start(done)
    if not fut.done():
        # The answer waits on the purgatory (rebalance, durable write): let the ticker re-plan.
        broker.wake_purgatories()
    return await fut
