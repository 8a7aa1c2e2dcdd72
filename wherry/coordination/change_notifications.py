"""Kafka's ZkNodeChangeNotificationListener: follow one notification path of the metadata
store (`/config/changes`, `/kafka-acl-changes`, `/kafka-acl-extended-changes`), whose
sequential children (`<prefix><seq>`) each announce one change.

Every notification not seen yet is handed to the handler once, in sequence order (at start:
every one still there, those announcing the same entity once); those older than the
expiration (15 minutes, as in Kafka: every live broker has applied them long ago) are
deleted. A handler's failure is logged and the listener goes on with the next notification.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from wherry.coordination.store import MetadataStore, NoNodeError, WatchEvent

log = logging.getLogger(__name__)

NOTIFICATION_EXPIRATION_MS = 15 * 60 * 1000


class ChangeNotificationListener:
    def __init__(
        self,
        store: MetadataStore,
        path: str,
        prefix: str,
        handler: Callable[[str, bytes], Awaitable[None]],
        now_ms: Callable[[], int],
        *,
        expiration_ms: int = NOTIFICATION_EXPIRATION_MS,
    ) -> None:
        """`handler(path, data)` is called for each new notification under `path` whose name
        starts with `prefix`."""
        self.store = store
        self.path = path
        self.prefix = prefix
        self.handler = handler
        self.now_ms = now_ms
        self.expiration_ms = expiration_ms
        self.last_seq = -1
        self._created: dict[str, int] = {}  # notifications seen: name → creation time
        self._task: asyncio.Task[None] | None = None

    def start(self, *, name: str | None = None) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=name or f"changes{self.path}"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        changed = asyncio.Event()

        def fire(_: WatchEvent) -> None:
            changed.set()

        while True:
            changed.clear()
            try:
                names = await self.store.get_children(self.path, watch=fire)
            except NoNodeError:
                names = []
            await self.process(names)
            await changed.wait()

    async def process(self, names: list[str]) -> None:
        """Hand the new notifications among `names` to the handler, then purge old ones.
        Identical notifications of one batch (an entity changed several times, all found at
        once, e.g. at start) are handled once, at the place of the last: every handler
        reloads the entity's current state, so the earlier ones would repeat it."""
        notes = sorted((self._seq(n), n) for n in names if n.startswith(self.prefix))
        fresh: list[tuple[str, bytes]] = []
        for seq, name in notes:
            if seq <= self.last_seq:
                continue
            path = f"{self.path}/{name}"
            self.last_seq = seq
            try:
                data, stat = await self.store.get(path)
            except NoNodeError:
                continue
            self._created[name] = stat.ctime_ms
            fresh.append((path, data))
        last = {data: i for i, (_, data) in enumerate(fresh)}
        for i, (path, data) in enumerate(fresh):
            if last[data] != i:
                continue
            try:
                await self.handler(path, data)
            except Exception:
                log.exception("failed to apply change notification %s", path)
        await self._purge_obsolete()

    async def _purge_obsolete(self) -> None:
        now = self.now_ms()
        for name, ctime in list(self._created.items()):
            if now - ctime > self.expiration_ms:
                del self._created[name]
                try:
                    await self.store.delete(f"{self.path}/{name}")
                except NoNodeError:
                    pass

    def _seq(self, name: str) -> int:
        try:
            return int(name[len(self.prefix) :])
        except ValueError:
            return -1
