"""Live updates for the console, as server-sent events (`/events`):

* `cluster`: the whole cluster view (`view.cluster_view`), sent on connect and again whenever
  it changes. The metadata cache's listener (every UpdateMetadata: a broker died, an ISR
  shrank, a leader moved) and every state-change line mark it dirty; a refresher rebuilds it
  after a short debounce and sends it if it differs from the last one sent; it also looks
  every `REFRESH_S` (group lag moves without metadata changes), and after each answer of the
  other brokers about their groups (`remote_groups.py`, asked every `REFRESH_S`). It runs
  only while someone listens.
* `timeline`: state-change lines of this broker and its controller, parsed, as they are
  written; a new listener first gets the tail of the state-change log (`timeline-init`).

Each listener has a bounded queue; one that falls too far behind is dropped (its browser
reconnects and starts afresh).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from wherry.observability.remote_groups import RemoteGroups
from wherry.observability.sources import BrokerSources
from wherry.observability.view import BrokerDirectory, cluster_view
from wherry.runtime.state_change_log import add_state_change_listener, parse_state_change_line

TIMELINE_KEEP = 500
DEBOUNCE_S = 0.05
REFRESH_S = 2.0
KEEPALIVE_S = 15.0
QUEUE_MAX = 256


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def timeline_entry(line: str) -> dict[str, Any]:
    r = parse_state_change_line(line)
    if r is None:
        return {"line": line}
    return {
        "ts": r.timestamp_ms,
        "level": r.level,
        "node": f"{r.node_kind} {r.node_id}",
        "subject": None if r.kind is None else f"{r.kind} {r.topic}-{r.partition}",
        "old": r.old_state,
        "new": r.new_state,
        "leader": r.leader,
        "isr": None if r.isr is None else list(r.isr),
        "message": r.message,
        "line": line,
    }


def _tail(path: Path | None, n: int) -> list[str]:
    if path is None:
        return []
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 256 * 1024))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return lines[-n:]


class ConsoleHub:
    def __init__(self, src: BrokerSources) -> None:
        self.src = src
        self.directory = BrokerDirectory()
        self.remote = RemoteGroups(src)
        self.timeline: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE_KEEP)
        self._subscribers: set[asyncio.Queue[bytes | None]] = set()
        self._dirty = asyncio.Event()
        self._last: bytes = b""
        self._task: asyncio.Task[None] | None = None
        self._remote_task: asyncio.Task[None] | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for line in _tail(self.src.state_change_log, 200):
            self.timeline.append(timeline_entry(line))
        self._remove_listener = add_state_change_listener(self.src.broker_id, self._on_line)
        self.src.cache.add_listener(self._dirty.set)

    async def stop(self) -> None:
        self.src.cache.remove_listener(self._dirty.set)
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(None)
        self._subscribers.clear()
        tasks = [t for t in (self._task, self._remote_task) if t is not None]
        self._task = self._remote_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.remote.close()

    # --- sources -------------------------------------------------------------------------------
    def _on_line(self, line: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._add_line(line)
        else:
            loop.call_soon_threadsafe(self._add_line, line)

    def _add_line(self, line: str) -> None:
        entry = timeline_entry(line)
        self.timeline.append(entry)
        if self._subscribers:  # encoded only for an open console page
            self._broadcast(sse("timeline", entry))
        self._dirty.set()

    def view(self) -> dict[str, Any]:
        return cluster_view(self.src, self.directory, self.remote.view(), self.remote.far_ends)

    # --- listeners -----------------------------------------------------------------------------
    def _broadcast(self, chunk: bytes) -> None:
        for q in list(self._subscribers):
            try:
                q.put_nowait(chunk)
            except asyncio.QueueFull:  # too slow: dropped, its browser reconnects
                self._subscribers.discard(q)
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
                q.put_nowait(None)

    async def _refresher(self) -> None:
        while self._subscribers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), REFRESH_S)
            await asyncio.sleep(DEBOUNCE_S)
            self._dirty.clear()
            self._publish()
        self._task = None

    async def _remote_refresher(self) -> None:
        """The other brokers' groups, asked again every `REFRESH_S` while someone listens."""
        while self._subscribers:
            await self.remote.refresh()
            self._dirty.set()
            await asyncio.sleep(REFRESH_S)
        self._remote_task = None

    def _publish(self) -> None:
        chunk = sse("cluster", self.view())
        if chunk != self._last:
            self._last = chunk
            self._broadcast(chunk)

    async def subscribe(self) -> AsyncIterator[bytes]:
        q: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_MAX)
        self._subscribers.add(q)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._refresher(), name=f"console-refresher-{self.src.broker_id}"
            )
        if self._remote_task is None:
            self._remote_task = asyncio.get_running_loop().create_task(
                self._remote_refresher(), name=f"console-remote-groups-{self.src.broker_id}"
            )
        try:
            yield b"retry: 2000\n\n"
            yield sse("cluster", self.view())
            yield sse("timeline-init", list(self.timeline))
            while True:
                try:
                    chunk = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                if chunk is None:
                    return
                yield chunk
        finally:
            self._subscribers.discard(q)
