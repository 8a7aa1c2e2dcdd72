"""Backend-neutral helpers for the coordination tests.

The tests in ``test_coordination_store.py`` talk to a `StoreBackend` only, so a ZooKeeper
implementation can run the same suite by adding a backend here and a parameter to the
``store_backend`` fixture in ``conftest.py`` (a ZooKeeper backend should hand out sessions
chrooted to a fresh path per test, so that ``/`` starts empty apart from ``/zookeeper``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec

from wherry.coordination.embedded import EmbeddedCoordinator
from wherry.coordination.store import MetadataStore, SessionState, WatchEvent

P = ParamSpec("P")

TEST_TIMEOUT_S = 10.0


def async_test(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an ``async def`` test body with `asyncio.run` (pytest-asyncio is not used)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT_S))

    return wrapper


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


class EmbeddedBackend(StoreBackend):
    name = "embedded"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.coordinator = EmbeddedCoordinator(data_dir)

    async def new_session(self) -> MetadataStore:
        return self.coordinator.session()

    async def expire(self, store: MetadataStore) -> None:
        assert self.coordinator.expire_session(store.session_id)

    async def restart(self) -> None:
        self.coordinator.close()
        self.coordinator = EmbeddedCoordinator(self.data_dir)

    async def settle(self) -> None:
        for _ in range(10):
            await asyncio.sleep(0)

    async def aclose(self) -> None:
        self.coordinator.close()
