"""The simulated network: every message between two simulated processes goes through `call`,
which delays each leg by a seeded random amount, may drop it, and refuses it while the two
ends are cut apart or the destination is down. No sockets.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")

CONTROLLER_ID = 1000  # the active controller's network address
CLIENT_ID = 2000  # producers and consumers


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    min_delay_ms: float = 0.2
    max_delay_ms: float = 5.0
    drop_probability: float = 0.01


class Endpoints(Protocol):
    """Who is up: the world answers with the current incarnation (None while down)."""

    def incarnation(self, node_id: int) -> int | None: ...


class SimNetwork:
    def __init__(self, rng: random.Random, endpoints: Endpoints, config: NetworkConfig) -> None:
        self.rng = rng
        self.endpoints = endpoints
        self.config = config
        self.cut: set[frozenset[int]] = set()
        self.delivered = 0
        self.dropped = 0
        # Connection ids of this world's simulated connections: per world, so a seed replays
        # the same in a process that ran other worlds before it.
        self._connection_ids = itertools.count(1)

    def next_connection_id(self) -> int:
        return next(self._connection_ids)

    def partition(self, a: int, b: int) -> None:
        self.cut.add(frozenset((a, b)))

    def heal(self, a: int, b: int) -> None:
        self.cut.discard(frozenset((a, b)))

    def heal_all(self) -> None:
        self.cut.clear()

    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    def _delay_s(self) -> float:
        c = self.config
        return self.rng.uniform(c.min_delay_ms, c.max_delay_ms) / 1000

    def _leg_ok(self, src: int, dst: int, dst_incarnation: int | None) -> bool:
        if not self.connected(src, dst):
            return False
        if dst_incarnation is not None and self.endpoints.incarnation(dst) != dst_incarnation:
            return False
        if self.rng.random() < self.config.drop_probability:
            self.dropped += 1
            return False
        return True

    async def call(
        self,
        src: int,
        dst: int,
        handler: Callable[[], Awaitable[T]],
        *,
        timeout_ms: int,
    ) -> T:
        """Deliver a request from `src` to `dst`, run `handler` there, carry the answer back.
        Raises TimeoutError when a leg is lost (after `timeout_ms`, like a socket timeout) and
        ConnectionError at once when `dst` is down or unreachable when the request leaves
        (a refused connection)."""
        src_inc = self.endpoints.incarnation(src)
        inc = self.endpoints.incarnation(dst)
        if inc is None or not self.connected(src, dst):
            await asyncio.sleep(self._delay_s())
            raise ConnectionError(f"{dst} unreachable from {src}")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await asyncio.sleep(self._delay_s())
                if not self._leg_ok(src, dst, inc):
                    await asyncio.Event().wait()  # lost: the timeout ends it
                result = await handler()
                await asyncio.sleep(self._delay_s())
                if not self._leg_ok(dst, src, src_inc):
                    await asyncio.Event().wait()
        except TimeoutError:
            raise TimeoutError(f"request {src}->{dst} timed out") from None
        if self.endpoints.incarnation(dst) != inc:
            # The handler's process died while it ran (e.g. a parked fetch): no answer.
            raise ConnectionError(f"{dst} went down")
        self.delivered += 1
        return result
