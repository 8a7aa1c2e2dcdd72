"""The simulation's admin client: what its operations (`topic_operations.py`,
`log_dir_operations.py`) share.

`AdminClient` sends an admin request as a frame over the simulated network to a broker,
through its real request path, and reads the answer's one result; `AdminOperations` is what an
operation kind builds on: its requests at random intervals until the faults end, each in a
task of its own, given up at heal, with now and then a controller crash after one where the
controller has a part in them (decided by the operations' own randomness, so the other events
draw theirs as without them), and its check after healing, given a grace to hold.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.sim.invariants import InvariantViolation
from wherry.sim.node import SimBroker
from wherry.sim.wire import SimClients

__all__ = ["AdminApi", "AdminClient", "AdminOperations", "AdminWorld"]


class AdminWorld(Protocol):
    """What the admin operations need from `world.World`."""

    broker_ids: list[int]
    down: set[int]
    stopping: set[int]

    def now_ms(self) -> int: ...

    def node(self, broker_id: int) -> SimBroker | None: ...

    def log_fault(self, line: str) -> None: ...

    def client(self, name: str) -> SimClients: ...


@dataclass(frozen=True, slots=True)
class AdminApi:
    name: str
    key: int
    version: int
    results: str  # the answer's list of results (one per topic asked)
    partitions: str | None = None  # the result's list of partitions, when it has one


class AdminClient:
    def __init__(self, world: AdminWorld) -> None:
        self.world = world
        self.clients = world.client("admin")

    def live_brokers(self) -> list[int]:
        w = self.world
        return [b for b in w.broker_ids if b not in w.down and b not in w.stopping]

    async def call(self, broker: int, api: AdminApi, body: dict[str, Any]) -> Any | None:
        """The decoded answer of `broker`; None when none came (lost, refused, timed out)."""
        try:
            return await self.clients.call(broker, api.key, api.version, body)
        except ConnectionError:
            return None

    async def ask(
        self, about: str, broker: int, api: AdminApi, body: dict[str, Any]
    ) -> ErrorCode | None:
        """The error code of the answer's first result (its first partition's, for APIs that
        answer per partition), logged as `api.name about: CODE`; None when no answer came."""
        answer = await self.call(broker, api, body)
        if answer is None:
            return None
        result = getattr(answer, api.results)[0]
        if api.partitions is not None:
            result = getattr(result, api.partitions)[0]
        code = ErrorCode(result.error_code)
        w = self.world
        w.log_fault(f"{w.now_ms()}: {api.name} {about}: {code.name}")
        return code


class AdminOperations:
    """An admin client's operations of one kind: `step()` (one request, or a few) at random
    `INTERVAL_MS` (simulated) until the faults end, each in a task of its own, given up at
    heal; after a share `CRASH_CONTROLLER` of them a controller crash maybe (as after a
    reassignment); after healing, `check()` (raising `InvariantViolation`) given a grace to
    hold."""

    INTERVAL_MS: tuple[int, int] = (100, 400)
    CRASH_CONTROLLER = 0.0

    def __init__(self, world: AdminWorld, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.admin = AdminClient(world)
        self._tasks: set[asyncio.Task[None]] = set()

    async def step(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        raise NotImplementedError

    async def run(
        self, until_ms: int, maybe_crash_controller: Callable[[random.Random], None]
    ) -> None:
        """`maybe_crash_controller(rng)` decides with these operations' randomness."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.rng.uniform(*self.INTERVAL_MS) / 1000)
            if self.world.now_ms() >= until_ms:
                return
            task = loop.create_task(self.step())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if self.CRASH_CONTROLLER and self.rng.random() < self.CRASH_CONTROLLER:
                maybe_crash_controller(self.rng)

    async def stop(self) -> None:
        """At heal: the requests still running are given up."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def settle_and_check(self, grace_ms: int) -> None:
        """Give what the healed cluster still owes (deletions, elections, moves) up to
        `grace_ms` of simulated time, then `check()`."""
        deadline = self.world.now_ms() + grace_ms
        while self.world.now_ms() < deadline:
            try:
                self.check()
                return
            except InvariantViolation:
                await asyncio.sleep(0.05)
        self.check()
