"""Backend-neutral helpers for the coordination tests.

The tests in ``test_coordination_store.py`` talk to a `StoreBackend` only; each
implementation has a backend here and a parameter of the ``store_backend`` fixture in
``conftest.py``. The ZooKeeper backend hands out sessions chrooted to a fresh path per test, so
that ``/`` starts empty (ZooKeeper's own ``/zookeeper`` is outside the chroot).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.helpers import bounded_async_test
from tests.store_sessions import EmbeddedSessions, ZooKeeperSessions
from wherry.coordination.embedded import EmbeddedCoordinator
from wherry.coordination.store import MetadataStore, SessionState, WatchEvent

TEST_TIMEOUT_S = 10.0
async_test = bounded_async_test(TEST_TIMEOUT_S)
"""Runs an ``async def`` test body with `asyncio.run`, bounded by ``TEST_TIMEOUT_S``."""


class Recorder:
    """A watch callback / state listener that records what it receives."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = asyncio.Event()

    def __call__(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()

    @property
    def events(self) -> list[WatchEvent]:
        return [i for i in self.items if isinstance(i, WatchEvent)]

    @property
    def states(self) -> list[SessionState]:
        return [i for i in self.items if isinstance(i, SessionState)]

    async def wait_for(self, count: int, timeout_s: float = 5.0) -> list[Any]:
        async def wait() -> None:
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout_s)
        return self.items


class StoreBackend:
    """What the interface tests need from an implementation."""

    name = "abstract"
    expiry_seen_after_disconnect = False
    """True if a session learns of its expiry only on reconnecting (ZooKeeper), so its state
    listeners see SUSPENDED first."""
    sequence_counts_deletes = True
    """True if a child's deletion advances the parent's sequence counter (the counter is the
    parent's cversion); ZooKeeper's does not always."""

    async def new_session(self) -> MetadataStore:
        raise NotImplementedError

    async def expire(self, store: MetadataStore) -> None:
        """Expire ``store``'s session as the server would after a session timeout."""
        raise NotImplementedError

    async def restart(self) -> None:
        """Simulate a full restart: every session is gone, persistent data stays."""
        raise NotImplementedError

    async def settle(self) -> None:
        """Give in-flight watch notifications time to arrive (to check that none does)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


class EmbeddedBackend(EmbeddedSessions, StoreBackend):
    async def restart(self) -> None:
        self.coordinator.close()
        self.coordinator = EmbeddedCoordinator(self.data_dir)

    async def settle(self) -> None:
        for _ in range(10):
            await asyncio.sleep(0)


class ZooKeeperBackend(ZooKeeperSessions, StoreBackend):
    """Sessions on a real ZooKeeper server, chrooted to ``chroot`` (a fresh path per test)."""

    expiry_seen_after_disconnect = True
    sequence_counts_deletes = False

    async def restart(self) -> None:
        """ZooKeeper and every client process go down together: the clients die while the
        server is down (so they cannot close their sessions), the server comes back with its
        data (and the dead clients' sessions, which it would expire after their timeout), and
        those sessions are then ended as on expiry."""
        await asyncio.to_thread(self.server.stop)
        dead = [s.client_id for s in self.sessions if s.state is not SessionState.EXPIRED]
        await asyncio.gather(*(s.close() for s in self.sessions))
        self.sessions.clear()
        await asyncio.to_thread(self.server.start)
        for session_id, password in dead:
            await asyncio.to_thread(self.server.expire_session, session_id, password)

    async def settle(self) -> None:
        # A round trip on each live session: ZooKeeper sends a session its watch events
        # before later replies, so after it every event already sent has been read.
        live = [s for s in self.sessions if s.state is SessionState.CONNECTED]
        await asyncio.gather(*(s.exists("/") for s in live))
        await asyncio.sleep(0.05)  # kazoo's watch thread -> the loop
