"""Which client connections are served, which wait and which go: Kafka's ConnectionQuotas
(`connection_quotas.py`) applied to the network layer's connections, and the idle sweep of
`connections.max.idle.ms`.

- A new connection over its address's `max.connections.per.ip` is closed at once, with
  Kafka's `Rejected connection from /ip, address already has the configured maximum of N
  connections.`
- One over `max.connections` (or its listener's) or the connection creation rate is held:
  not read until a slot frees or its throttle time passes, in arrival order per listener, as
  Kafka's acceptor leaves it in the listen backlog; beyond `_MAX_WAITING` held ones, further
  ones are closed.
- The inter-broker listener may go over `max.connections`; then the least recently active
  connection of another listener is closed.
- Every served connection with no byte received or sent for `connections.max.idle.ms`, no
  request in hand and no answer owed (a half-received frame included) is closed by one sweep
  over all connections every tenth of the idle period (at least every 10 s, at most every
  50 ms): no timer per read; a connection goes at most one sweep after its idle period.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from collections.abc import Callable, Collection
from typing import Protocol

from wherry.observability.network_stats import NetworkStats
from wherry.runtime.bound_socket import ip_literal_family
from wherry.server.connection_limits import ConnectionLimits
from wherry.server.connection_quotas import ConnectionQuotas

log = logging.getLogger("wherry.server.network")

# Connections that may wait to be served before further ones are closed at once
_MAX_WAITING = 512


class GatedConnection(Protocol):
    """What the gate needs of a connection (network.py's)."""

    listener: str
    ip: str
    admitted: bool
    closing: bool
    close_reason: str
    last_active: float  # loop time of its last byte received or sent
    ready_at: float  # (held) not served before this loop time

    def busy(self) -> bool: ...  # a request in hand, received or answered
    def partial_bytes(self) -> int: ...  # of a request not whole yet
    def hold(self) -> None: ...  # read nothing until `start`
    def start(self) -> None: ...  # served from now on
    def close(self, reason: str, *, why: str = ..., level: int = ...) -> None: ...
    def refuse(self) -> None: ...  # closed at once, never served


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def resolve_overrides(limits: ConnectionLimits) -> dict[str, int]:
    """max.connections.per.ip.overrides by address: a host name counts for the addresses it
    resolves to (as Kafka's InetAddress.getByName), an unresolvable one for nothing."""
    out: dict[str, int] = {}
    for host, count in limits.max_connections_per_ip_overrides.items():
        if ip_literal_family(host) is not None:
            out[host] = count
            continue
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s", host)
            continue
        for info in infos:
            out.setdefault(str(info[4][0]), count)
    return out


class ConnectionGate:
    def __init__(
        self,
        limits: ConnectionLimits,
        inter_broker_listener: str | None,
        stats: NetworkStats,
        connections: Collection[GatedConnection],
    ) -> None:
        self.limits = limits
        self.stats = stats
        self.connections = connections  # every open connection (the network layer's set)
        self.quotas = ConnectionQuotas(limits, inter_broker_listener, resolve_overrides(limits))
        self.now: Callable[[], float] = _loop_time
        # held connections, per listener, in arrival order
        self._waiting: dict[str, collections.deque[GatedConnection]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sweeper: asyncio.Task[None] | None = None

    # --- admission ----------------------------------------------------------------------
    def arrived(self, conn: GatedConnection) -> None:
        """A new connection: served now, held, or closed."""
        listener = conn.listener
        throttle_ms = self.quotas.record_creation(listener, int(self.now() * 1000))
        if (
            not self._waiting.get(listener)
            and throttle_ms <= 0
            and self.quotas.slot_available(listener)
        ):
            self._admit(conn)
            return
        if sum(len(q) for q in self._waiting.values()) >= _MAX_WAITING:
            log.debug("Closing connection from /%s (listener %s): too many connections "
                      "waiting to be served", conn.ip, listener)
            self._refuse(conn)
            return
        conn.hold()
        conn.ready_at = self.now() + throttle_ms / 1000
        self._waiting.setdefault(listener, collections.deque()).append(conn)
        self._admit_waiting()

    def _admit(self, conn: GatedConnection) -> None:
        limit = self.quotas.ip_limit_reached(conn.ip)
        if limit is not None:
            log.info("Rejected connection from /%s, address already has the configured "
                     "maximum of %d connections.", conn.ip, limit)
            self._refuse(conn)
            return
        self.quotas.add(conn.listener, conn.ip)
        self.stats.opened(conn.listener)
        conn.start()
        if self.quotas.over_broker_limit():
            self._close_least_recently_active()

    def _refuse(self, conn: GatedConnection) -> None:
        self.stats.closes[conn.listener, "limit"] += 1
        conn.refuse()

    def _close_least_recently_active(self) -> None:
        """The inter-broker listener went over max.connections: the connection of another
        listener that was active least recently goes, as Kafka's processors close their
        lowest-priority channel."""
        protected = self.quotas.inter_broker_listener
        candidates = [
            c for c in self.connections
            if c.admitted and not c.closing and c.listener != protected
        ]
        if candidates:
            victim = min(candidates, key=lambda c: c.last_active)
            victim.close(
                f"max.connections={self.limits.max_connections} reached; making room for "
                f"a connection on the inter-broker listener {protected}",
                why="limit",
                level=logging.INFO,
            )

    def _admit_waiting(self) -> None:
        """Serve the held connections that may be served now; come back when the first
        throttled one may."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self.now()
        next_at: float | None = None
        for listener, waiting in self._waiting.items():
            while waiting:
                conn = waiting[0]
                if conn.closing:
                    waiting.popleft()
                    continue
                if conn.ready_at > now:
                    next_at = conn.ready_at if next_at is None else min(next_at, conn.ready_at)
                    break
                if not self.quotas.slot_available(listener):
                    break
                waiting.popleft()
                self._admit(conn)
        if next_at is not None:
            self._timer = asyncio.get_running_loop().call_at(next_at, self._admit_waiting)

    def gone(self, conn: GatedConnection) -> None:
        """`conn` closed: its slot frees (a held one may be served)."""
        if not conn.admitted:
            waiting = self._waiting.get(conn.listener)
            if waiting is not None and conn in waiting:
                waiting.remove(conn)
            return
        conn.admitted = False
        self.quotas.remove(conn.listener, conn.ip)
        self.stats.closed(conn.listener, conn.close_reason)
        if any(self._waiting.values()):
            self._admit_waiting()

    # --- idle connections ---------------------------------------------------------------
    def start(self) -> None:
        """Start the idle sweep (once; not when connections.max.idle.ms is negative)."""
        idle_ms = self.limits.connections_max_idle_ms
        if self._sweeper is None and idle_ms >= 0:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle(idle_ms))

    async def _sweep_idle(self, idle_ms: int) -> None:
        idle_s = idle_ms / 1000
        interval = min(10.0, max(0.05, idle_s / 10))
        while True:
            await asyncio.sleep(interval)
            self.close_idle(self.now() - idle_s)

    def close_idle(self, before: float) -> int:
        """Close the served connections with no byte received or sent since loop time
        `before` and nothing in hand; how many."""
        closed = 0
        idle_ms = self.limits.connections_max_idle_ms
        for conn in list(self.connections):
            if (
                conn.admitted
                and not conn.closing
                and conn.last_active <= before
                and not conn.busy()
            ):
                partial = conn.partial_bytes()
                conn.close(
                    f"idle for connections.max.idle.ms={idle_ms}"
                    + (f" with {partial} bytes of a partial request" if partial else ""),
                    why="idle",
                    level=logging.DEBUG,
                )
                closed += 1
        if closed:
            log.info("Closed %d idle connection%s (connections.max.idle.ms=%d)", closed,
                     "" if closed == 1 else "s", idle_ms)
        return closed

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
