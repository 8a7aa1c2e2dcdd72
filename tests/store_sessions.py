"""Metadata-store sessions for tests, on the embedded store or on a real ZooKeeper: open one,
expire one as the server would after its session timeout, close them all. The coordination
and the controller test harnesses build their store backends on these."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers import wait_until_async
from wherry.coordination.embedded import EmbeddedCoordinator
from wherry.coordination.store import MetadataStore, SessionState
from wherry.coordination.zookeeper import ZooKeeperStore, connect_zookeeper
from wherry.testing.zookeeper import ZooKeeperServer


class EmbeddedSessions:
    """Sessions of one `EmbeddedCoordinator` (in memory when ``data_dir`` is None)."""

    name = "embedded"

    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = data_dir
        self.coordinator = EmbeddedCoordinator(data_dir)

    async def new_session(self) -> MetadataStore:
        return self.coordinator.session()

    async def expire(self, store: MetadataStore) -> None:
        assert self.coordinator.expire_session(store.session_id)

    async def aclose(self) -> None:
        self.coordinator.close()


class ZooKeeperSessions:
    """Sessions on a real ZooKeeper server, chrooted to ``chroot`` (a fresh path per test)."""

    name = "zookeeper"

    def __init__(
        self, server: ZooKeeperServer, chroot: str, *, session_timeout_ms: int = 10_000
    ) -> None:
        self.server = server
        self.chroot = chroot
        self.session_timeout_ms = session_timeout_ms
        self.sessions: list[ZooKeeperStore] = []

    @property
    def connect_string(self) -> str:
        return self.server.connect_string + self.chroot

    async def new_session(self) -> MetadataStore:
        store = await connect_zookeeper(
            self.connect_string,
            session_timeout_ms=self.session_timeout_ms,
            connect_timeout_s=10.0,
        )
        self.sessions.append(store)
        return store

    async def expire(self, store: MetadataStore) -> None:
        """The server ends the session as on a timeout (`ZooKeeperServer.expire_session`);
        returns once the owner has been told (it reconnects and hears "expired")."""
        assert isinstance(store, ZooKeeperStore)
        session_id, password = store.client_id
        assert await asyncio.to_thread(self.server.expire_session, session_id, password)
        await wait_until_async(lambda: store.state is SessionState.EXPIRED)

    async def aclose(self) -> None:
        sessions, self.sessions = self.sessions, []
        await asyncio.gather(*(s.close() for s in sessions))
