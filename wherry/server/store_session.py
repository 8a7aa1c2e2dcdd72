"""A broker's metadata-store session, kept: when it expires, a new one is opened and the
broker registers on it again (Kafka's ZooKeeperClient.reinitialize, then the controller's
RegisterBrokerAndReelect).

The session's EXPIRED state starts the renewal, once the broker's start is done (a broker
still starting fails its start instead: every call on the expired session raises). The
renewal stops what watched the old session (`before_renewal`), closes it, opens a new one and
hands it to `on_new_session` (registration, then whatever the broker restarts on it: the
config-change listener, the ACL cache, its controller instance). A failed step is retried
with a doubling pause (100 ms to 2 s) until it holds; a session that expired again meanwhile
is renewed once more. `wherry server` and the simulated brokers keep their sessions here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from wherry.coordination.store import SessionState, StoreError
from wherry.runtime.tasks import cancel_and_wait

if TYPE_CHECKING:
    from wherry.coordination.store import MetadataStore

__all__ = ["RETRY_BACKOFF_MS", "StoreSession"]

log = logging.getLogger("wherry.server.broker")

RETRY_BACKOFF_MS = (100, 2_000)  # first and largest pause between session attempts


class StoreSession:
    def __init__(
        self,
        open_session: Callable[[], Awaitable[MetadataStore]],
        on_new_session: Callable[[MetadataStore], Awaitable[None]],
        before_renewal: Callable[[], Awaitable[None]],
        may_renew: Callable[[], bool],
        prefix: str,
        *,
        notice_delay_s: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """`may_renew`: whether an expiry is renewed now (the broker's start is done).
        `notice_delay_s`: how long the broker takes to notice an expiry (the simulator's
        brokers, like a ZooKeeper client that learns of it when it reconnects, notice late)."""
        self._open_session = open_session
        self._on_new_session = on_new_session
        self._before_renewal = before_renewal
        self._may_renew = may_renew
        self._prefix = prefix
        self._notice_delay_s = notice_delay_s
        self.store: MetadataStore
        self.renewals = 0
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def renewing(self) -> bool:
        return self._task is not None

    @property
    def connected(self) -> bool:
        """The session is open, connected, and not being replaced."""
        return (
            hasattr(self, "store")
            and self.store.state is SessionState.CONNECTED
            and self._task is None
        )

    async def open(self) -> MetadataStore:
        """The first session, watched from here on."""
        self._use(await self._open_session())
        return self.store

    def _use(self, store: MetadataStore) -> None:
        self.store = store

        def on_state(state: SessionState) -> None:
            if state is SessionState.EXPIRED and store is self.store:
                self._on_expired()

        store.add_state_listener(on_state)

    def _on_expired(self) -> None:
        if self._stopped or self._task is not None or not self._may_renew():
            return
        log.warning(
            "%s coordination session %#x expired; re-registering with a new session",
            self._prefix,
            self.store.session_id,
        )
        self._task = asyncio.get_running_loop().create_task(
            self._renew(), name=f"session-renewal {self._prefix}"
        )

    async def _renew(self) -> None:
        pause_ms = RETRY_BACKOFF_MS[0]

        async def backoff(what: str, e: BaseException) -> None:
            nonlocal pause_ms
            log.warning("%s %s (%s); retrying in %d ms", self._prefix, what, e, pause_ms)
            await asyncio.sleep(pause_ms / 1000)
            pause_ms = min(pause_ms * 2, RETRY_BACKOFF_MS[1])

        try:
            if (delay := self._notice_delay_s()) > 0:
                await asyncio.sleep(delay)
            while not self._stopped:
                await self._before_renewal()
                try:
                    await self.store.close()
                except StoreError:
                    pass
                try:
                    store = await self._open_session()
                except (StoreError, OSError) as e:
                    await backoff("cannot open a new coordination session", e)
                    continue
                self._use(store)
                try:
                    await self._on_new_session(store)
                except (StoreError, RuntimeError) as e:  # RuntimeError: id taken meanwhile
                    await backoff("re-registration on the new session failed", e)
                    continue
                if store.state is SessionState.EXPIRED:
                    continue  # expired again while registering: once more
                self.renewals += 1
                return
        finally:
            self._task = None

    async def stop(self) -> None:
        """No more renewals; one under way is cancelled."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(Exception):  # a failure there was the old session's
                await cancel_and_wait(task)

    def abandon(self) -> None:
        """A killed process renews nothing (its renewal, if any, is cancelled)."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
