"""Client connections as plain numbers, bumped in O(1) by the network layer and read at
scrape time: Kafka's socket-server-metrics per listener (`connection-count`,
`connection-creation-total`, `connection-close-total`, here with the reason a connection
closed: `client`, `idle`, `limit`, `error`, `shutdown`) and its SocketServer's memory pool
(`MemoryPoolAvailable`, `MemoryPoolUsed`), whose numbers come from `pool`."""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import field

from wherry.common.record import record

CLOSE_REASONS = ("client", "idle", "limit", "error", "shutdown")


@record(slots=True)
class NetworkStats:
    """The network layer's counts: connections open and made per listener, closes per
    listener and reason, and the request memory pool's use."""

    # listener -> connections open now
    connections: collections.Counter[str] = field(default_factory=collections.Counter)
    creations: collections.Counter[str] = field(default_factory=collections.Counter)
    # (listener, reason) -> closed connections
    closes: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    # bytes used and available in the request memory pool
    pool: Callable[[], tuple[int, int]] = lambda: (0, 2**63 - 1)

    def opened(self, listener: str) -> None:
        self.creations[listener] += 1
        self.connections[listener] += 1

    def closed(self, listener: str, reason: str) -> None:
        self.closes[listener, reason] += 1
        self.connections[listener] -= 1
