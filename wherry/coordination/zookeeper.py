"""`MetadataStore` on a ZooKeeper ensemble, through kazoo's `KazooClient`.

One `ZooKeeperStore` is one ZooKeeper session; open it with `connect_zookeeper`. The connect
string is kazoo's (``host:port[,host:port...][/chroot]``); a missing chroot is created.

Threads. kazoo runs a connection thread and two worker threads (completions, watch events).
Nothing here blocks the event loop: requests go through kazoo's ``*_async`` methods and their
`IAsyncResult` is bridged into an asyncio future with ``loop.call_soon_threadsafe``; watch
events and session-state changes are handed to the loop the same way. Starting and stopping
the client (which join threads) run in a worker thread.

Session states. kazoo's CONNECTED / SUSPENDED map to ours. kazoo's LOST means the session
expired (or, after `close`, that it was closed): the store is then dead -- every call raises
`SessionExpiredError` -- and the client is stopped at once, so kazoo never reconnects behind
the owner's back with a *new* session (its retry loop is interrupted before its first
reconnect). The owner opens a new session and re-registers. ZooKeeper only tells a client
that its session expired when it reconnects, so listeners see SUSPENDED before EXPIRED.

Watches. Each callback gets one kazoo watcher per (kind, path) (`_Watcher`), so kazoo calls
it exactly when ZooKeeper's watch set by the callback's own read fires, and once however often
it was registered; a callback watching a node's data and children hears of its deletion once.
The store's table of callbacks is filled before the read is sent and emptied again if the
read fails (``get`` / ``get_children`` on a missing node leave nothing behind), and callbacks
run on the event loop. kazoo drops its watches when the connection is lost (it
does not send ZooKeeper's SetWatches on reconnect), so after a reconnect the store re-arms
every watch it still holds and, as SetWatches would, fires the ones whose node changed while
the connection was down (compared with the ``mzxid`` / ``pzxid`` seen when the watch was
set). Watches of a closed or expired session are dropped without firing.

Recursive delete is atomic (one multi-op) for subtrees of up to `MAX_ATOMIC_DELETE` nodes;
larger subtrees are deleted bottom-up in atomic chunks. ``create(make_parents=True)`` makes
the missing parents and the node in one multi-op. Both re-read and retry if another session
changes the subtree meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData
from kazoo.protocol.states import EventType as KzEventType
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from wherry.coordination import store
from wherry.coordination.session import StoreSession, as_bytes, invoke_callback
from wherry.coordination.store import (
    ANY_VERSION,
    MultiOp,
    MultiResult,
    SessionState,
    SessionStateListener,
    Stat,
    WatchCallback,
    WatchEvent,
    child_path,
    validate_path,
)
from wherry.coordination.zk_acl import ZkSecurity
from wherry.coordination.zk_multi_read import MultiRead

__all__ = [
    "MAX_ATOMIC_DELETE",
    "ZooKeeperStore",
    "ZooKeeperUnavailableError",
    "connect_zookeeper",
]

logger = logging.getLogger(__name__)

MAX_ATOMIC_DELETE: Final = 1000
"""Subtrees up to this many nodes are deleted in a single multi-op (ZooKeeper caps a request
at ``jute.maxbuffer``, 1 MiB by default)."""

MULTI_READ_CHUNK: Final = 1000
"""Nodes read per multiRead request (a partition state answer is ~170 bytes: ~170 KB)."""

_TREE_RETRIES: Final = 10
_STOP_JOIN_TIMEOUT_S: Final = 30.0

_WatchKind = Literal["data", "child"]
_WatchKey = tuple[_WatchKind, str]
_UNSEEN: Final = -2
"""Marker of a watch registration whose read has not completed yet (zxids are >= 0 and
``None`` means "node absent")."""

_ERRORS: Final[tuple[tuple[type[Exception], type[store.StoreError]], ...]] = (
    (kz.NoNodeError, store.NoNodeError),
    (kz.NodeExistsError, store.NodeExistsError),
    (kz.BadVersionError, store.BadVersionError),
    (kz.NotEmptyError, store.NotEmptyError),
    (kz.NoChildrenForEphemeralsError, store.NoChildrenForEphemeralsError),
)

_EVENTS: Final[dict[str, tuple[store.EventType, tuple[_WatchKind, ...]]]] = {
    KzEventType.CREATED: (store.EventType.CREATED, ("data",)),
    KzEventType.CHANGED: (store.EventType.CHANGED, ("data",)),
    KzEventType.DELETED: (store.EventType.DELETED, ("data", "child")),
    KzEventType.CHILD: (store.EventType.CHILD, ("child",)),
}


class ZooKeeperUnavailableError(store.StoreError):
    """No ZooKeeper server of the connect string could be reached in time."""


def _stat(z: ZnodeStat) -> Stat:
    return Stat(
        version=z.version,
        cversion=z.cversion,
        ctime_ms=z.ctime,
        mtime_ms=z.mtime,
        ephemeral_owner=z.ephemeralOwner,
        num_children=z.numChildren,
        data_length=z.dataLength,
        czxid=z.czxid,
        mzxid=z.mzxid,
        pzxid=z.pzxid,
    )


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _reject(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _split_chroot(hosts: str) -> tuple[str, str]:
    """``"h1:1,h2:2/a/b"`` -> ``("h1:1,h2:2", "/a/b")``; no chroot -> ``""``."""
    servers, slash, rest = hosts.partition("/")
    if not servers.strip():
        raise ValueError(f"invalid ZooKeeper connect string {hosts!r}: no servers")
    if not slash or not rest:
        return servers, ""
    chroot = "/" + rest
    try:
        validate_path(chroot)
    except ValueError as e:
        raise ValueError(f"invalid chroot in ZooKeeper connect string {hosts!r}") from e
    return servers, chroot


class _Watcher:
    """The kazoo-level watch of one callback for one (kind, path) of a store.

    kazoo keeps the watchers of a path in a set, registers one when the read that set it is
    answered and calls every watcher registered before ZooKeeper's notification: passing
    kazoo one stable watcher per callback makes a callback fire exactly when ZooKeeper's watch
    set by *its* read fires, and only once however often it was registered.
    """

    __slots__ = ("cb", "key", "seen", "store")

    def __init__(self, owner: ZooKeeperStore, key: _WatchKey, cb: WatchCallback) -> None:
        self.store = owner
        self.key = key
        self.cb = cb
        self.seen: int | None = _UNSEEN  # mzxid / pzxid seen by the read (None: no node)

    def __call__(self, event: WatchedEvent) -> None:  # kazoo's watch thread
        self.store._on_zk_event(self, event)


class ZooKeeperStore(StoreSession):
    """One ZooKeeper session as a `MetadataStore` (see the module docstring).

    Build it with `connect_zookeeper`; the constructor takes an unstarted `KazooClient`.
    """

    def __init__(
        self, client: KazooClient, connect_string: str, stop_flag: threading.Event
    ) -> None:
        self._client = client
        self._connect_string = connect_string
        self.security: ZkSecurity | None = None
        """The session's ZooKeeper identity and ACL policy (`zk_acl`); None: open nodes."""
        self.max_atomic_delete = MAX_ATOMIC_DELETE
        """Recursive deletes of bigger subtrees are not atomic (see the module docstring)."""
        self._state = SessionState.CONNECTED
        self._session_id = 0
        self._password = b""
        self._listeners: dict[SessionStateListener, None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._watches: dict[_WatchKey, dict[WatchCallback, _Watcher]] = {}
        # The ZooKeeper notification being dispatched, and the callbacks it reached: a callback
        # watching a node for both data and children hears of its deletion once.
        self._event: WatchedEvent | None = None
        self._event_reached: set[WatchCallback] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # Thread-side session end: `_stop_flag` interrupts kazoo's reconnect loop.
        self._stop_flag = stop_flag
        self._closing = False
        self._expired = threading.Event()
        self._stopper: threading.Thread | None = None
        self._multi_read: bool | None = None  # whether the server has multiRead (None: unknown)
        client.add_listener(self._on_kazoo_state)

    def __repr__(self) -> str:
        return (
            f"ZooKeeperStore({self._connect_string!r}, id={self._session_id:#x}, "
            f"state={self._state.value})"
        )

    # ---------------------------------------------------------------------------- properties

    @property
    def client_id(self) -> tuple[int, bytes]:
        """``(session_id, password)``: what a client needs to take over this session."""
        return self._session_id, self._password

    @property
    def connect_string(self) -> str:
        return self._connect_string

    @property
    def chroot(self) -> str:
        return str(self._client.chroot or "")

    # ---------------------------------------------------------------------------- plumbing

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        self._loop = loop
        return loop

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the store's loop (from any thread); dropped if it is gone."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed between the check and the call
            pass

    async def _call(self, result: Any) -> Any:
        """Await a kazoo `IAsyncResult` without blocking the loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def done(r: Any) -> None:  # kazoo's completion thread (or inline)
            try:
                try:
                    value = r.get(block=False)
                except BaseException as e:
                    loop.call_soon_threadsafe(_reject, fut, e)
                else:
                    loop.call_soon_threadsafe(_resolve, fut, value)
            except RuntimeError:  # the caller's loop is gone
                pass

        result.rawlink(done)
        return await fut

    def _translate(self, exc: BaseException, path: str | None) -> BaseException:
        """Our error for a kazoo exception (other exceptions are returned unchanged)."""
        if not isinstance(exc, kz.KazooException):
            return exc
        dead = self._expired.is_set() or self._closing
        if isinstance(exc, kz.ConnectionClosedError) or (
            dead and isinstance(exc, kz.ConnectionLoss | kz.SessionExpiredError)
        ):
            if self._expired.is_set() or self._state is SessionState.EXPIRED:
                return store.SessionExpiredError(
                    f"session {self._session_id:#x} has expired", path=path
                )
            return store.SessionClosedError(f"session {self._session_id:#x} is closed", path=path)
        if isinstance(exc, kz.SessionExpiredError):
            return store.SessionExpiredError(
                f"session {self._session_id:#x} has expired", path=path
            )
        if isinstance(exc, kz.ConnectionLoss):
            return store.ConnectionLossError(
                f"session {self._session_id:#x}: connection to ZooKeeper lost", path=path
            )
        for kz_type, ours in _ERRORS:
            if isinstance(exc, kz_type):
                return ours(path=path)
        return store.StoreError(f"ZooKeeper error {type(exc).__name__}: {exc}", path=path)

    async def _request(self, path: str | None, result: Any) -> Any:
        try:
            return await self._call(result)
        except kz.KazooException as e:
            raise self._translate(e, path) from e

    # ---------------------------------------------------------------------------- session state

    def _on_kazoo_state(self, state: str) -> None:  # kazoo's connection thread
        if state == KazooState.CONNECTED:
            self._post(self._transition, SessionState.CONNECTED)
        elif state == KazooState.SUSPENDED:
            self._post(self._transition, SessionState.SUSPENDED)
        elif state == KazooState.LOST and not self._closing:
            # The session expired: stop kazoo before it reconnects with a new session.
            self._expired.set()
            self._begin_shutdown()
            self._post(self._transition, SessionState.EXPIRED)

    def _transition(self, new: SessionState) -> None:  # on the loop
        old = self._state
        if old in (SessionState.CLOSED, SessionState.EXPIRED) or new is old:
            return
        self._state = new
        if new is SessionState.EXPIRED:
            self._drop_watches()
        for listener in list(self._listeners):
            invoke_callback(listener, new)
        if new is SessionState.CONNECTED and old is SessionState.SUSPENDED:
            task = asyncio.get_running_loop().create_task(self._rearm_watches())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _begin_shutdown(self) -> threading.Thread:
        """Stop and close the kazoo client in a thread (once); returns that thread."""
        with self._lock:
            if self._stopper is None:
                self._stop_flag.set()
                self._stopper = threading.Thread(
                    target=self._stop_client, name="wherry-zk-stop", daemon=True
                )
                self._stopper.start()
            return self._stopper

    def _stop_client(self) -> None:
        try:
            self._client.stop()
        except Exception:
            logger.warning("stopping the ZooKeeper client failed", exc_info=True)
        try:
            self._client.close()
        except Exception:
            logger.warning("closing the ZooKeeper client failed", exc_info=True)

    async def close(self) -> None:
        loop = self._bind_loop()
        notify = False
        if self._state not in (SessionState.CLOSED, SessionState.EXPIRED):
            self._closing = True
            self._state = SessionState.CLOSED
            self._drop_watches()
            notify = True
        stopper = self._begin_shutdown()
        await asyncio.to_thread(stopper.join, _STOP_JOIN_TIMEOUT_S)
        if stopper.is_alive():
            logger.warning("ZooKeeper client of session %#x did not stop", self._session_id)
        if notify:
            for listener in list(self._listeners):
                loop.call_soon(invoke_callback, listener, SessionState.CLOSED)

    # ---------------------------------------------------------------------------- watches

    def _watch(self, kind: _WatchKind, path: str, cb: WatchCallback) -> tuple[_Watcher, bool]:
        """Register ``cb`` before its read is sent; returns its watcher and whether it is new."""
        key: _WatchKey = (kind, path)
        with self._lock:
            entry = self._watches.setdefault(key, {})
            w = entry.get(cb)
            if w is None:
                w = entry[cb] = _Watcher(self, key, cb)
                return w, True
            return w, False

    def _watch_done(self, w: _Watcher, seen: int | None) -> None:
        """The read that set ``w`` succeeded and saw ``seen``."""
        with self._lock:
            if self._watches.get(w.key, {}).get(w.cb) is w:
                w.seen = seen

    def _watch_failed(self, w: _Watcher, added: bool) -> None:
        """The read failed, so ZooKeeper set no watch: forget a registration it added."""
        with self._lock:
            if added and w.seen == _UNSEEN:
                self._unregister(w)

    def _unregister(self, w: _Watcher) -> bool:
        """Remove ``w`` if it is still ``w.cb``'s registration (lock held)."""
        entry = self._watches.get(w.key)
        if entry is None or entry.get(w.cb) is not w:
            return False
        del entry[w.cb]
        if not entry:
            del self._watches[w.key]
        return True

    def _drop_watches(self) -> None:
        with self._lock:
            self._watches.clear()

    def _on_zk_event(self, w: _Watcher, event: WatchedEvent) -> None:  # kazoo's watch thread
        mapped = _EVENTS.get(event.type)
        if mapped is None:
            # EventType.NONE: kazoo dropped its watches on a connection loss; ours stay
            # registered and are re-armed after reconnecting.
            return
        with self._lock:
            if not self._unregister(w):
                return  # already fired (or dropped)
            if event is not self._event:
                self._event, self._event_reached = event, set()
            if w.cb in self._event_reached:
                return
            self._event_reached.add(w.cb)
        self._post(self._deliver, w.cb, WatchEvent(mapped[0], w.key[1]))

    def _deliver(self, cb: WatchCallback, event: WatchEvent) -> None:  # on the loop
        if self._state not in (SessionState.CLOSED, SessionState.EXPIRED):
            invoke_callback(cb, event)

    async def _rearm_watches(self) -> None:
        """After a reconnect: set ZooKeeper's watches again and fire those whose node changed
        while disconnected (what ZooKeeper's SetWatches does for other clients)."""
        with self._lock:
            watchers = [
                w for entry in self._watches.values() for w in entry.values() if w.seen != _UNSEEN
            ]
        await asyncio.gather(*(self._rearm(w) for w in watchers))

    async def _rearm(self, w: _Watcher) -> None:
        kind, path = w.key
        now: int | None
        try:
            if kind == "data":
                zstat = await self._call(self._client.exists_async(path, watch=w))
                now = None if zstat is None else zstat.mzxid
            else:
                try:
                    _, zstat = await self._call(
                        self._client.get_children_async(path, watch=w, include_data=True)
                    )
                    now = zstat.pzxid
                except kz.NoNodeError:
                    now = None
        except kz.KazooException:
            return  # disconnected again (re-armed on the next reconnect) or dead
        seen = w.seen
        if seen == now:
            return
        if kind == "child":
            etype = store.EventType.DELETED if now is None else store.EventType.CHILD
        elif seen is None:
            etype = store.EventType.CREATED
        else:
            etype = store.EventType.DELETED if now is None else store.EventType.CHANGED
        with self._lock:
            if not self._unregister(w):
                return  # fired meanwhile
        self._deliver(w.cb, WatchEvent(etype, path))

    # ---------------------------------------------------------------------------- reads

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        validate_path(path)
        self._bind_loop()
        self._check_usable()
        if watch is None:
            data, zstat = await self._request(path, self._client.get_async(path))
            return data or b"", _stat(zstat)
        w, added = self._watch("data", path, watch)
        try:
            data, zstat = await self._request(path, self._client.get_async(path, watch=w))
        except BaseException:
            self._watch_failed(w, added)
            raise
        self._watch_done(w, zstat.mzxid)
        return data or b"", _stat(zstat)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        validate_path(path)
        self._bind_loop()
        self._check_usable()
        if watch is None:
            zstat = await self._request(path, self._client.exists_async(path))
            return None if zstat is None else _stat(zstat)
        w, added = self._watch("data", path, watch)
        try:
            zstat = await self._request(path, self._client.exists_async(path, watch=w))
        except BaseException:
            self._watch_failed(w, added)
            raise
        self._watch_done(w, None if zstat is None else zstat.mzxid)
        return None if zstat is None else _stat(zstat)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        validate_path(path)
        self._bind_loop()
        self._check_usable()
        if watch is None:
            children = await self._request(path, self._client.get_children_async(path))
            return sorted(children)
        w, added = self._watch("child", path, watch)
        try:
            children, zstat = await self._request(
                path, self._client.get_children_async(path, watch=w, include_data=True)
            )
        except BaseException:
            self._watch_failed(w, added)
            raise
        self._watch_done(w, zstat.pzxid)
        return sorted(children)

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        """`store.BatchReader`: ZooKeeper's multiRead, `MULTI_READ_CHUNK` nodes a request, the
        requests in flight at once (one request instead of one per node: a controller reading
        10,000 partition states at failover waits for a few round trips, not 10,000). A
        server without multiRead (before 3.6) gets one getData per node."""
        for p in paths:
            validate_path(p)
        self._bind_loop()
        self._check_usable()
        if not paths:
            return []
        if self._multi_read is False:
            return await self._get_each(paths)
        chunks = [paths[i : i + MULTI_READ_CHUNK] for i in range(0, len(paths), MULTI_READ_CHUNK)]
        try:
            answers = await asyncio.gather(*(self._multi_read_chunk(c) for c in chunks))
        except kz.UnimplementedError:
            self._multi_read = False
            return await self._get_each(paths)
        self._multi_read = True
        return [r for answer in answers for r in answer]

    async def _multi_read_chunk(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        client = self._client
        result = client.handler.async_result()
        client._call(MultiRead([_prefix_root(client.chroot, p) for p in paths]), result)
        try:
            raw = await self._call(result)
        except kz.UnimplementedError:
            raise
        except kz.KazooException as e:
            raise self._translate(e, paths[0]) from e
        out: list[tuple[bytes, Stat] | None] = []
        for path, r in zip(paths, raw, strict=True):
            if isinstance(r, kz.NoNodeError):
                out.append(None)
            elif isinstance(r, BaseException):
                raise self._translate(r, path)
            else:
                out.append((r[0], _stat(r[1])))
        return out

    async def _get_each(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        async def one(path: str) -> tuple[bytes, Stat] | None:
            try:
                return await self.get(path)
            except store.NoNodeError:
                return None

        return list(await asyncio.gather(*(one(p) for p in paths)))

    # ---------------------------------------------------------------------------- writes

    async def set(self, path: str, data: bytes, *, version: int = ANY_VERSION) -> Stat:
        validate_path(path)
        payload = as_bytes(data)
        self._bind_loop()
        self._check_usable()
        zstat = await self._request(path, self._client.set_async(path, payload, version))
        return _stat(zstat)

    async def delete(
        self, path: str, *, version: int = ANY_VERSION, recursive: bool = False
    ) -> None:
        if validate_path(path) == "/":
            raise ValueError("cannot delete the root node")
        self._bind_loop()
        self._check_usable()
        if not recursive:
            await self._request(path, self._client.delete_async(path, version))
            return
        for _ in range(_TREE_RETRIES):
            nodes = await self._subtree(path)
            below = nodes[:0:-1]  # deepest first, without the root: children before parents
            chunk = max(1, self.max_atomic_delete)
            try:
                if len(nodes) <= chunk:
                    await self.multi(
                        [*(store.DeleteOp(p) for p in below), store.DeleteOp(path, version)]
                    )
                    return
                stat = await self.exists(path)
                if stat is None:
                    raise store.NoNodeError(path=path)
                if version != ANY_VERSION and stat.version != version:
                    raise store.BadVersionError(
                        f"{path}: expected version {version}, is {stat.version}", path=path
                    )
                for i in range(0, len(below), chunk):
                    await self.multi([store.DeleteOp(p) for p in below[i : i + chunk]])
                await self._request(path, self._client.delete_async(path, version))
                return
            except (store.NotEmptyError, store.NoNodeError) as e:
                if isinstance(e, store.NoNodeError) and e.path == path:
                    e.op_index = None
                    raise  # the node itself is gone
                continue  # the subtree changed meanwhile: read it again
            except store.StoreError as e:
                e.op_index = None
                raise
        raise store.NotEmptyError(
            f"subtree of {path} keeps changing; gave up deleting it", path=path
        )

    async def _subtree(self, path: str) -> list[str]:
        """``path`` and its descendants, breadth-first (parents before children)."""
        order: list[str] = []
        level = [path]
        first = True
        while level:
            results = await asyncio.gather(
                *(self._request(p, self._client.get_children_async(p)) for p in level),
                return_exceptions=True,
            )
            next_level: list[str] = []
            for p, children in zip(level, results, strict=True):
                if isinstance(children, store.NoNodeError) and not first:
                    continue  # deleted meanwhile
                if isinstance(children, BaseException):
                    raise children
                order.append(p)
                next_level.extend(child_path(p, c) for c in sorted(children))
            level = next_level
            first = False
        return order

    # ---------------------------------------------------------------------------- multi

    def _abs(self, path: str) -> str:
        chroot = self.chroot
        if not chroot:
            return path
        return chroot if path == "/" else chroot + path

    def _acls(self, path: str) -> list[Any]:
        """The ACLs of a node created at `path` (chroot-relative): `zk_acl`'s policy."""
        return list(OPEN_ACL_UNSAFE) if self.security is None else self.security.acls(path)

    def _kazoo_op(self, op: MultiOp) -> Any:
        match op:
            case store.CheckOp(path, version):
                validate_path(path)
                return CheckVersion(self._abs(path), version)
            case store.CreateOp(path, data, ephemeral, sequential):
                validate_path(path + "0" if sequential else path)
                flags = (1 if ephemeral else 0) | (2 if sequential else 0)
                return Create(self._abs(path), as_bytes(data), self._acls(path), flags)
            case store.SetOp(path, data, version):
                validate_path(path)
                return SetData(self._abs(path), as_bytes(data), version)
            case store.DeleteOp(path, version):
                if validate_path(path) == "/":
                    raise ValueError("cannot delete the root node")
                return Delete(self._abs(path), version)
            case _:
                raise TypeError(f"not a multi op: {op!r}")

    async def multi(self, ops: Sequence[MultiOp]) -> list[MultiResult]:
        ops = list(ops)
        requests = [self._kazoo_op(op) for op in ops]
        self._bind_loop()
        self._check_usable()
        if not ops:
            return []
        txn = self._client.transaction()
        txn.operations.extend(requests)
        raw = await self._request(None, txn.commit_async())
        failed = [i for i, r in enumerate(raw) if isinstance(r, Exception)]
        if failed:
            # ZooKeeper reports the failing op's error; the others are rolled back.
            causes = [
                i
                for i in failed
                if not isinstance(raw[i], kz.RolledBackError | kz.RuntimeInconsistency)
            ]
            i = (causes or failed)[0]
            err = self._translate(raw[i], ops[i].path)
            if isinstance(err, store.StoreError):
                err.op_index = i
            raise err
        results: list[MultiResult] = []
        for r in raw:
            if isinstance(r, ZnodeStat):
                results.append(_stat(r))
            elif isinstance(r, str):
                results.append(r)
            else:
                results.append(True)
        return results


async def connect_zookeeper(
    hosts: str,
    *,
    session_timeout_ms: int = 18_000,
    connect_timeout_s: float = 18.0,
    security: ZkSecurity | None = None,
) -> ZooKeeperStore:
    """Open a ZooKeeper session (``hosts``: kazoo's ``host:port[,...][/chroot]``).

    Creates the chroot if it does not exist. Raises `ZooKeeperUnavailableError` (naming the
    connect string) if no server answers within ``connect_timeout_s``. With ``security`` the
    session authenticates with its digest identity and creates nodes with its ACLs
    (`zk_acl`); a refused identity raises `ZooKeeperUnavailableError` too.
    """
    servers, chroot = _split_chroot(hosts)
    if session_timeout_ms <= 0 or connect_timeout_s <= 0:
        raise ValueError("session_timeout_ms and connect_timeout_s must be positive")
    stop_flag = threading.Event()
    session_timeout_s = session_timeout_ms / 1000.0
    # Reconnect promptly (well within the session timeout); stop retrying when told to.
    retry = KazooRetry(
        max_tries=-1,
        delay=0.05,
        backoff=2,
        max_jitter=0.4,
        max_delay=max(0.1, min(1.0, session_timeout_s / 4)),
        interrupt=stop_flag.is_set,
    )
    try:
        client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            connection_retry=retry,
            auth_data=None if security is None else security.auth_data,
        )
    except (kz.ConfigurationError, ValueError) as e:
        raise ValueError(f"invalid ZooKeeper connect string {hosts!r}: {e}") from e
    session = ZooKeeperStore(client, hosts, stop_flag)
    session.security = security
    session._bind_loop()
    live = await asyncio.to_thread(client.start_async)
    connected = await asyncio.to_thread(live.wait, connect_timeout_s)
    if not connected:
        # Stop the client in the background: a connect attempt blocked on a silent server
        # only notices after the session timeout.
        session._closing = True
        session._begin_shutdown()
        raise ZooKeeperUnavailableError(
            f"cannot connect to ZooKeeper at {hosts!r} within {connect_timeout_s:g} s"
        )
    client_id = client.client_id
    if client_id is None:  # connected and lost again already
        session._closing = True
        await asyncio.to_thread(session._begin_shutdown().join, _STOP_JOIN_TIMEOUT_S)
        raise ZooKeeperUnavailableError(f"ZooKeeper at {hosts!r} dropped the new session")
    session._session_id, session._password = int(client_id[0]), bytes(client_id[1])
    if chroot:
        try:
            if await session.exists("/") is None:
                await _create_chroot(
                    servers, chroot, session_timeout_s, connect_timeout_s, security
                )
        except BaseException:
            await session.close()
            raise
    return session


async def _create_chroot(
    servers: str,
    chroot: str,
    session_timeout_s: float,
    connect_timeout_s: float,
    security: ZkSecurity | None = None,
) -> None:
    """Create ``chroot`` (and its parents) through a short-lived session without chroot (with
    the ACLs of a node at the root: Kafka's createChrootIfNecessary)."""

    def run() -> None:
        client = KazooClient(
            hosts=servers,
            timeout=session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            auth_data=None if security is None else security.auth_data,
            default_acl=None if security is None else security.acls("/"),
        )
        try:
            client.start(timeout=connect_timeout_s)
        except Exception as e:
            client.close()
            raise ZooKeeperUnavailableError(
                f"cannot connect to ZooKeeper at {servers!r} to create chroot {chroot}: {e}"
            ) from e
        try:
            client.ensure_path(chroot)
        finally:
            client.stop()
            client.close()

    await asyncio.to_thread(run)
