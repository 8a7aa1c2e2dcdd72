"""Embedded `MetadataStore`: an in-process ZooKeeper stand-in persisted in SQLite.

One `EmbeddedCoordinator` owns the whole namespace (in memory, write-through to
``<data_dir>/__meta/metadata.db``); any number of sessions are opened from it with
`EmbeddedCoordinator.session`. Several brokers in one process each take their own session, so
each one's ephemeral nodes vanish when its session is closed or expired.

Durability: the database runs in WAL mode with ``synchronous=FULL`` and an exclusive lock (one
coordinator per file; a second opener gets `StoreError`). Every write is one SQLite transaction
that has committed (and been fsynced) before the coroutine returns; the in-memory tree only
changes once SQLite has committed, so a failed commit leaves no trace. Ephemeral nodes are
written too (they carry the cversion/zxid bookkeeping) but are purged when the file is opened,
since no session survives a restart. What the opening itself writes (the schema, the boot
count, the root, the purge of those ephemerals) is committed without an fsync of its own:
each is redone by the next opening if lost, and the first write after it makes it durable
with its own (the WAL is synced up to that commit). An owner that tells no one what it writes
for a while (a broker's start, until its listeners are bound) may defer every fsync until it
calls `EmbeddedCoordinator.sync` (``defer_syncs``): meanwhile no checkpoint runs, and closing
syncs as ever.

A full or failing disk. Opening writes (those few rows): on a full disk the store releases the
space it keeps allocated beside its file (`RESERVE_FILE`, allocated again at an opening with
room) and tries once more; without a reserve `StoreError` says in one line that the disk is
full, naming the file. A write that fails later (the
disk filled, an I/O error) leaves the store unchanged and raises `StoreError`; the owner's
`on_write_failure` hook hears of it first (a broker stops: a broker whose metadata cannot be
written cannot keep its registration or its controller's decisions).

Writes run one at a time, in the order they were called, behind a commit lock, in three steps
(`EmbeddedCoordinator._write`): the operation runs on the tree, which validates it and tells
the rows it changes, and is undone; SQLite commits those rows and fsyncs, with only the commit
lock held, so reads go on meanwhile and see the tree as it was; the operation runs again on the
tree, now for all to see (the same changes: no other write ran in between), and its watches
fire. So no reader observes a write before it is durable, or a half-applied one. With
``commits_in_thread`` (the default for a store on disk) the ``async`` methods hand their
writes to one writer thread, so a commit's fsync holds no event loop; without it (a
deterministic simulation) and while fsyncs are deferred, writes run in-line. A
`threading.RLock` guards the tree, which makes the coordinator safe to share between threads
(each with its own loop).

Watch callbacks and state listeners are never called inside the call that triggered them: they
are scheduled with ``loop.call_soon`` on the loop the receiving session last ran on (or the
caller's loop; ``call_soon_threadsafe`` across threads), and are called directly only when no
event loop exists at all (e.g. `EmbeddedCoordinator.expire_session` from plain sync code).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, TypeVar

from wherry.common.closeable import Closeable
from wherry.common.fsync import fsync_path
from wherry.common.record import record
from wherry.coordination.embedded_disk import (
    RESERVE_FILE,
    disk_failed,
    disk_full,
    keep_reserve,
    release_reserve,
)
from wherry.coordination.session import StoreSession, as_bytes, invoke_callback
from wherry.coordination.store import (
    ANY_VERSION,
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MultiOp,
    MultiResult,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionState,
    SessionStateListener,
    SetOp,
    Stat,
    StoreError,
    WatchCallback,
    WatchEvent,
    child_path,
    parent_path,
    validate_path,
)

__all__ = [
    "METADATA_DIR",
    "METADATA_FILE",
    "RESERVE_FILE",
    "EmbeddedCoordinator",
    "EmbeddedSession",
]

logger = logging.getLogger(__name__)

METADATA_DIR = "__meta"
METADATA_FILE = "metadata.db"
_SCHEMA_VERSION = 1
_SESSION_ID_SHIFT = 32  # session id = (boot_count << 32) | n: unique across restarts

_T = TypeVar("_T")
_WatchKind = Literal["data", "child"]
_Trigger = tuple[EventType, str]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@record(slots=True)
class _Node:
    """One node of the tree: its data, its ZooKeeper stat fields and its children."""

    data: bytes
    version: int
    cversion: int
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int
    czxid: int
    mzxid: int
    pzxid: int
    children: set[str] = field(default_factory=set)

    def stat(self) -> Stat:
        return Stat(
            version=self.version,
            cversion=self.cversion,
            ctime_ms=self.ctime_ms,
            mtime_ms=self.mtime_ms,
            ephemeral_owner=self.ephemeral_owner,
            num_children=len(self.children),
            data_length=len(self.data),
            czxid=self.czxid,
            mzxid=self.mzxid,
            pzxid=self.pzxid,
        )


class _Txn:
    """An in-memory transaction: changes are applied directly, with an undo log."""

    __slots__ = ("dirty", "now_ms", "triggers", "undo", "zxid")

    def __init__(self, zxid: int, now_ms: int) -> None:
        self.zxid = zxid
        self.now_ms = now_ms
        self.undo: list[Callable[[], None]] = []
        self.dirty: set[str] = set()
        self.triggers: list[_Trigger] = []

    def rollback(self) -> None:
        while self.undo:
            self.undo.pop()()


class EmbeddedCoordinator(Closeable):
    """The shared in-process metadata state; open sessions with `session`.

    ``data_dir=None`` keeps everything in memory (no persistence; for tests). ``clock_ms``
    supplies ``ctime_ms``/``mtime_ms``. ``defer_syncs``: commit without an fsync (opening
    included) until `sync` -- for an owner that tells no one of what it wrote until then (a
    broker's start, before its listeners answer anything but ApiVersions).
    ``commits_in_thread``: the sessions' writes to a store on disk commit in a writer thread,
    off their event loop (see the module doc); False runs them in-line, for a simulation
    whose steps must not depend on a thread's timing.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None,
        *,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        on_write_failure: Callable[[str], object] | None = None,
        defer_syncs: bool = False,
        commits_in_thread: bool = True,
    ) -> None:
        self._clock_ms = clock_ms
        self._syncs_deferred = defer_syncs
        self.on_write_failure = on_write_failure
        self._lock = threading.RLock()  # the tree, the sessions, the watches
        self._commit_lock = threading.RLock()  # the writes, in order; the connection
        self._commits_in_thread = commits_in_thread and data_dir is not None
        self._writer: ThreadPoolExecutor | None = None
        self._nodes: dict[str, _Node] = {}
        self._zxid = 0
        self._sessions: dict[int, EmbeddedSession] = {}
        self._ephemerals: dict[int, set[str]] = {}
        self._watches: dict[_WatchKind, dict[str, dict[int, dict[WatchCallback, None]]]] = {
            "data": {},
            "child": {},
        }
        self._closed = False
        if data_dir is None:
            self.db_path: Path | None = None
            target = ":memory:"
        else:
            meta_dir = Path(data_dir) / METADATA_DIR
            meta_dir.mkdir(parents=True, exist_ok=True)
            self.db_path = meta_dir / METADATA_FILE
            target = str(self.db_path)
        reserve = None if self.db_path is None else self.db_path.with_name(RESERVE_FILE)
        for attempt in (1, 2):
            try:
                self._conn = sqlite3.connect(
                    target, isolation_level=None, timeout=0, check_same_thread=False
                )
            except sqlite3.Error as e:
                raise StoreError(f"cannot open metadata store {target}: {e}") from e
            try:
                self._open_db()
                break
            except sqlite3.OperationalError as e:
                self._conn.close()
                if "locked" in str(e):
                    raise StoreError(
                        f"metadata store {target} is in use by another process"
                    ) from e
                if disk_full(e) and attempt == 1 and release_reserve(reserve):
                    self._nodes.clear()  # read again on the freed space
                    continue
                if disk_full(e):
                    raise StoreError(
                        f"cannot open metadata store {target}: its disk is full ({e}); free "
                        "space there, or set metadata.log.dir to keep the store on another disk"
                    ) from None
                raise StoreError(f"cannot open metadata store {target}: {e}") from e
            except BaseException:
                self._conn.close()
                raise
        if reserve is not None:
            keep_reserve(reserve)

    # ---------------------------------------------------------------------------- lifecycle

    def _open_db(self) -> None:
        conn = self._conn
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        # Only a new file is switched to WAL (an existing one is in WAL mode already: no write);
        # it holds nothing yet, so the switch is not synced (a first start's fsyncs would come
        # before the listeners are bound).
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA journal_mode=WAL")
        if self._syncs_deferred:  # no checkpoint either (its database writes are not synced)
            conn.execute("PRAGMA wal_autocheckpoint=0")
        else:
            conn.execute("PRAGMA synchronous=NORMAL")  # FULL once opened (see the module doc)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS nodes ("
                " path TEXT PRIMARY KEY, data BLOB NOT NULL,"
                " version INTEGER NOT NULL, cversion INTEGER NOT NULL,"
                " ctime_ms INTEGER NOT NULL, mtime_ms INTEGER NOT NULL,"
                " ephemeral_owner INTEGER NOT NULL, czxid INTEGER NOT NULL,"
                " mzxid INTEGER NOT NULL, pzxid INTEGER NOT NULL) WITHOUT ROWID"
            )
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            schema = meta.get("schema_version", _SCHEMA_VERSION)
            if schema != _SCHEMA_VERSION:
                raise StoreError(f"unsupported metadata schema version {schema}")
            boot = int(meta.get("boot_count", 0)) + 1
            self._zxid = int(meta.get("zxid", 0))
            conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [("schema_version", _SCHEMA_VERSION), ("boot_count", boot)],
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._session_base = boot << _SESSION_ID_SHIFT
        self._session_counter = 0

        rows = conn.execute(
            "SELECT path, data, version, cversion, ctime_ms, mtime_ms, ephemeral_owner,"
            " czxid, mzxid, pzxid FROM nodes"
        ).fetchall()
        nodes = self._nodes
        for path, data, *ints in rows:
            nodes[path] = _Node(bytes(data), *ints)
        root_missing = "/" not in nodes
        if root_missing:
            now = self._clock_ms()
            nodes["/"] = _Node(b"", 0, 0, now, now, 0, 0, 0, 0)
        for path in sorted(nodes, key=len):
            if path == "/":
                continue
            parent = nodes.get(parent_path(path))
            if parent is None:
                raise StoreError(f"corrupt metadata store: orphan node {path}")
            parent.children.add(path.rsplit("/", 1)[1])

        # No session survives a restart: drop leftover ephemeral nodes (durably).
        stale = sorted((p for p, n in nodes.items() if n.ephemeral_owner), reverse=True)
        txn = _Txn(self._zxid + 1, self._clock_ms())
        if root_missing:
            txn.dirty.add("/")
        try:
            for path in stale:
                self._op_delete(txn, path, ANY_VERSION)
            self._commit(txn)
        except BaseException:
            txn.rollback()
            raise
        if not self._syncs_deferred:
            conn.execute("PRAGMA synchronous=FULL")
        if stale:
            logger.info("purged %d ephemeral node(s) left by a previous run", len(stale))

    def close(self) -> None:
        """Stop the coordinator as a process exit would: live sessions become closed (their
        listeners see CLOSED) without deleting their ephemeral nodes or firing watches; those
        nodes are purged on the next open. Close sessions first for a graceful shutdown. A
        write under way completes first; one still queued for the writer thread fails as its
        session is closed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
            for kind in self._watches.values():
                kind.clear()
            for s in sessions:
                s._state = SessionState.CLOSED
                s._pending.clear()
                self._notify_state(s, SessionState.CLOSED)
        with self._commit_lock, self._lock:  # after the write under way, if any
            if self._syncs_deferred:  # the checkpoint on close syncs, then drops the WAL
                self._end_deferral()
            self._conn.close()
            if self._writer is not None:
                self._writer.shutdown(wait=False)

    def sync(self) -> None:
        """End ``defer_syncs``: every commit so far made durable (the database file, its WAL
        and their directory fsynced; a blocking call), and each commit from now on with an
        fsync of its own. Nothing to do without a deferral."""
        with self._commit_lock, self._lock:
            if not self._syncs_deferred or self._closed:
                return
            self._end_deferral()  # a commit meanwhile (another thread) syncs itself
        if self.db_path is None:
            return
        try:
            for path in (self.db_path, self.db_path.with_name(self.db_path.name + "-wal")):
                fsync_path(path)
            fsync_path(self.db_path.parent)
        except OSError as e:  # as a failed commit: the owner hears of it, then StoreError
            message = f"metadata store {self.db_path} cannot be synced: {e}"
            if self.on_write_failure is not None:
                self.on_write_failure(message)
            raise StoreError(message) from e

    def _end_deferral(self) -> None:
        self._syncs_deferred = False
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA wal_autocheckpoint=1000")  # SQLite's default

    @property
    def closed(self) -> bool:
        return self._closed

    # ---------------------------------------------------------------------------- sessions

    def session(self) -> EmbeddedSession:
        """Open a new session (state CONNECTED)."""
        with self._lock:
            if self._closed:
                raise StoreError("coordinator is closed")
            self._session_counter += 1
            sid = self._session_base | self._session_counter
            s = EmbeddedSession(self, sid)
            self._sessions[sid] = s
            return s

    @property
    def session_ids(self) -> frozenset[int]:
        """Ids of the live (connected or suspended) sessions."""
        with self._lock:
            return frozenset(self._sessions)

    @property
    def last_zxid(self) -> int:
        """Id of the last committed write transaction."""
        return self._zxid

    def expire_session(self, session_id: int) -> bool:
        """Expire a session as ZooKeeper would after a session timeout: its ephemeral nodes are
        deleted (firing other sessions' watches), its watches are dropped, its listeners see
        EXPIRED and its later calls raise `SessionExpiredError`. Returns False if unknown."""
        with self._commit_lock, self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                return False
            self._end_session(s, SessionState.EXPIRED)
            return True

    def suspend_session(self, session_id: int) -> None:
        """Simulate a connection loss: calls raise `ConnectionLossError`, ephemeral nodes and
        watches are kept, watch events are held back until `resume_session`."""
        with self._lock:
            s = self._live_session(session_id)
            if s._state is SessionState.CONNECTED:
                s._state = SessionState.SUSPENDED
                self._notify_state(s, SessionState.SUSPENDED)

    def resume_session(self, session_id: int) -> None:
        """Reconnect a suspended session: listeners see CONNECTED, then held-back watch events
        are delivered."""
        with self._lock:
            s = self._live_session(session_id)
            if s._state is SessionState.SUSPENDED:
                s._state = SessionState.CONNECTED
                self._notify_state(s, SessionState.CONNECTED)
                pending, s._pending = s._pending, []
                for fn, event in pending:
                    self._dispatch(s, fn, event)

    def _live_session(self, session_id: int) -> EmbeddedSession:
        s = self._sessions.get(session_id)
        if s is None:
            raise KeyError(f"no live session {session_id:#x}")
        return s

    def _close_session(self, s: EmbeddedSession) -> None:
        with self._commit_lock, self._lock:
            if s.session_id in self._sessions:
                self._end_session(s, SessionState.CLOSED)

    def _end_session(self, s: EmbeddedSession, state: SessionState) -> None:
        """Close or expire a live session (both locks held, the commit lock first)."""
        s._state = state
        s._pending.clear()
        del self._sessions[s.session_id]
        for kind, path in s._watched:
            by_session = self._watches[kind].get(path)
            if by_session is not None:
                by_session.pop(s.session_id, None)
                if not by_session:
                    del self._watches[kind][path]
        s._watched.clear()
        owned = sorted(self._ephemerals.get(s.session_id, ()), reverse=True)
        try:
            if owned:

                def purge(txn: _Txn) -> None:
                    for path in owned:
                        self._op_delete(txn, path, ANY_VERSION)

                self._write(purge)
        finally:
            self._ephemerals.pop(s.session_id, None)
            self._notify_state(s, state)

    # ---------------------------------------------------------------------------- dispatch

    def _dispatch(self, s: EmbeddedSession, fn: Callable[[Any], None], arg: object) -> None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        target = s._loop if s._loop is not None and not s._loop.is_closed() else running
        if target is None:
            invoke_callback(fn, arg)
        elif target is running:
            target.call_soon(invoke_callback, fn, arg)
        else:
            target.call_soon_threadsafe(invoke_callback, fn, arg)

    def _notify_state(self, s: EmbeddedSession, state: SessionState) -> None:
        for listener in list(s._listeners):
            self._dispatch(s, listener, state)

    def _fire(self, triggers: list[_Trigger]) -> None:
        for etype, path in triggers:
            match etype:
                case EventType.CREATED | EventType.CHANGED:
                    kinds: tuple[_WatchKind, ...] = ("data",)
                case EventType.DELETED:
                    kinds = ("data", "child")
                case EventType.CHILD:
                    kinds = ("child",)
            per_session: dict[int, dict[WatchCallback, None]] = {}
            for kind in kinds:
                for sid, cbs in self._watches[kind].pop(path, {}).items():
                    per_session.setdefault(sid, {}).update(cbs)
                    s = self._sessions.get(sid)
                    if s is not None:
                        s._watched.discard((kind, path))
            if not per_session:
                continue
            event = WatchEvent(etype, path)
            for sid, cbs in per_session.items():
                s = self._sessions.get(sid)
                if s is None:
                    continue
                for cb in cbs:
                    if s._state is SessionState.SUSPENDED:
                        s._pending.append((cb, event))
                    else:
                        self._dispatch(s, cb, event)

    def _add_watch(
        self, s: EmbeddedSession, kind: _WatchKind, path: str, cb: WatchCallback
    ) -> None:
        self._watches[kind].setdefault(path, {}).setdefault(s.session_id, {})[cb] = None
        s._watched.add((kind, path))

    # ---------------------------------------------------------------------------- transactions

    def _read(self, s: EmbeddedSession, fn: Callable[[], _T]) -> _T:
        with self._lock:
            s._check_usable()
            return fn()

    async def _session_write(self, s: EmbeddedSession, fn: Callable[[_Txn], _T]) -> _T:
        """``fn`` as a write of session ``s`` (`_run_write`), once ``s`` is usable."""
        return await self._run_write(lambda: self._write(fn, check=s._check_usable))

    async def _run_write(self, write: Callable[[], _T]) -> _T:
        """Run ``write`` in the writer thread (see ``commits_in_thread``), else in-line: while
        fsyncs are deferred a commit costs no wait."""
        if not self._commits_in_thread or self._syncs_deferred:
            return write()
        with self._lock:  # close() shuts the writer down holding it
            if self._closed:
                queued = None
            else:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(1, thread_name_prefix="metadata-store")
                queued = self._writer.submit(write)
        if queued is None:
            return write()  # the session's check raises: it is closed
        return await asyncio.wrap_future(queued)

    def _write(self, fn: Callable[[_Txn], _T], check: Callable[[], None] | None = None) -> _T:
        """Run ``fn`` as one atomic, durable transaction, then fire its watches: validated
        and undone, committed with only the commit lock held, applied again for all to see
        (the module doc). ``check`` runs first, under the tree's lock (a session's state)."""
        with self._commit_lock:
            with self._lock:
                if check is not None:
                    check()
                txn = _Txn(self._zxid + 1, self._clock_ms())
                try:
                    fn(txn)
                    rows = self._rows(txn)
                finally:
                    txn.rollback()
            if txn.dirty:
                self._commit_rows(txn.zxid, *rows)
            with self._lock:
                applied = _Txn(txn.zxid, txn.now_ms)
                try:
                    result = fn(applied)
                except BaseException as e:  # a write that validated cannot fail here
                    applied.rollback()
                    message = (f"metadata store {self.db_path or ':memory:'} holds a write its"
                               f" tree could not apply: {e!r}")
                    if self.on_write_failure is not None:
                        self.on_write_failure(message)
                    raise StoreError(message) from e
                if applied.dirty:
                    self._zxid = applied.zxid
                self._fire(applied.triggers)
                return result

    def _commit(self, txn: _Txn) -> None:
        """Commit the changes ``txn`` has made to the tree (the opening's purge)."""
        if txn.dirty:
            self._commit_rows(txn.zxid, *self._rows(txn))
            self._zxid = txn.zxid

    def _rows(self, txn: _Txn) -> tuple[list[tuple[Any, ...]], list[tuple[str]]]:
        """The rows ``txn`` changed, as the tree holds them now: (upserts, deletes)."""
        upserts: list[tuple[Any, ...]] = []
        deletes: list[tuple[str]] = []
        for path in txn.dirty:
            n = self._nodes.get(path)
            if n is None:
                deletes.append((path,))
            else:
                upserts.append(
                    (
                        path,
                        n.data,
                        n.version,
                        n.cversion,
                        n.ctime_ms,
                        n.mtime_ms,
                        n.ephemeral_owner,
                        n.czxid,
                        n.mzxid,
                        n.pzxid,
                    )
                )
        return upserts, deletes

    def _commit_rows(
        self, zxid: int, upserts: list[tuple[Any, ...]], deletes: list[tuple[str]]
    ) -> None:
        """One SQLite transaction (commit lock held): the rows and the zxid, fsynced."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if deletes:
                    conn.executemany("DELETE FROM nodes WHERE path = ?", deletes)
                if upserts:
                    conn.executemany(
                        "INSERT OR REPLACE INTO nodes (path, data, version, cversion, ctime_ms,"
                        " mtime_ms, ephemeral_owner, czxid, mzxid, pzxid)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        upserts,
                    )
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('zxid', ?)", (zxid,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            message = f"metadata store {self.db_path or ':memory:'} cannot be written: {e}"
            if self.on_write_failure is not None and disk_failed(e):
                self.on_write_failure(message)
            raise StoreError(message) from e

    # ---------------------------------------------------------------------------- node ops

    def _node(self, path: str) -> _Node:
        n = self._nodes.get(validate_path(path))
        if n is None:
            raise NoNodeError(path=path)
        return n

    def _op_check(self, path: str, version: int) -> None:
        n = self._node(path)
        if version != ANY_VERSION and version != n.version:
            raise BadVersionError(f"{path}: expected version {version}, is {n.version}", path=path)

    def _op_create(self, txn: _Txn, path: str, data: bytes, owner: int, sequential: bool) -> str:
        validate_path(path + "0" if sequential else path)
        if path == "/" and not sequential:
            raise NodeExistsError(path=path)
        ppath = parent_path(path)
        parent = self._nodes.get(ppath)
        if parent is None:
            raise NoNodeError(f"parent of {path} does not exist", path=path)
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError(path=path)
        if sequential:
            path = f"{path}{parent.cversion:010d}"
        if path in self._nodes:
            raise NodeExistsError(path=path)
        zxid, now = txn.zxid, txn.now_ms
        name = path.rsplit("/", 1)[1]
        saved = (parent.cversion, parent.pzxid)
        self._nodes[path] = _Node(data, 0, 0, now, now, owner, zxid, zxid, zxid)
        parent.children.add(name)
        parent.cversion += 1
        parent.pzxid = zxid
        if owner:
            self._ephemerals.setdefault(owner, set()).add(path)

        def undo() -> None:
            del self._nodes[path]
            parent.children.discard(name)
            parent.cversion, parent.pzxid = saved
            if owner:
                self._ephemerals.get(owner, set()).discard(path)

        txn.undo.append(undo)
        txn.dirty.update((path, ppath))
        txn.triggers += ((EventType.CREATED, path), (EventType.CHILD, ppath))
        return path

    def _op_set(self, txn: _Txn, path: str, data: bytes, version: int) -> Stat:
        self._op_check(path, version)
        n = self._nodes[path]
        saved = (n.data, n.version, n.mtime_ms, n.mzxid)
        n.data, n.version, n.mtime_ms, n.mzxid = data, n.version + 1, txn.now_ms, txn.zxid

        def undo() -> None:
            n.data, n.version, n.mtime_ms, n.mzxid = saved

        txn.undo.append(undo)
        txn.dirty.add(path)
        txn.triggers.append((EventType.CHANGED, path))
        return n.stat()

    def _op_delete(self, txn: _Txn, path: str, version: int) -> None:
        if validate_path(path) == "/":
            raise ValueError("cannot delete the root node")
        self._op_check(path, version)
        n = self._nodes[path]
        if n.children:
            raise NotEmptyError(path=path)
        ppath = parent_path(path)
        parent = self._nodes[ppath]
        name = path.rsplit("/", 1)[1]
        saved = (parent.cversion, parent.pzxid)
        del self._nodes[path]
        parent.children.discard(name)
        parent.cversion += 1
        parent.pzxid = txn.zxid
        owner = n.ephemeral_owner
        if owner:
            self._ephemerals.get(owner, set()).discard(path)

        def undo() -> None:
            self._nodes[path] = n
            parent.children.add(name)
            parent.cversion, parent.pzxid = saved
            if owner and owner in self._sessions:
                self._ephemerals.setdefault(owner, set()).add(path)

        txn.undo.append(undo)
        txn.dirty.update((path, ppath))
        txn.triggers += ((EventType.DELETED, path), (EventType.CHILD, ppath))

    def _op_delete_recursive(self, txn: _Txn, path: str, version: int) -> None:
        if validate_path(path) == "/":
            raise ValueError("cannot delete the root node")
        self._op_check(path, version)
        order: list[str] = []
        stack = [path]
        while stack:  # pre-order; reversed it deletes children before parents
            p = stack.pop()
            order.append(p)
            stack.extend(child_path(p, c) for c in sorted(self._nodes[p].children))
        for p in reversed(order):
            self._op_delete(txn, p, ANY_VERSION)

    def _op_multi(self, txn: _Txn, owner: int, ops: Sequence[MultiOp]) -> list[MultiResult]:
        results: list[MultiResult] = []
        for i, op in enumerate(ops):
            try:
                match op:
                    case CheckOp(path, version):
                        self._op_check(path, version)
                        results.append(True)
                    case CreateOp(path, data, ephemeral, sequential):
                        results.append(
                            self._op_create(
                                txn, path, as_bytes(data), owner if ephemeral else 0, sequential
                            )
                        )
                    case SetOp(path, data, version):
                        results.append(self._op_set(txn, path, as_bytes(data), version))
                    case DeleteOp(path, version):
                        self._op_delete(txn, path, version)
                        results.append(True)
                    case _:
                        raise TypeError(f"not a multi op: {op!r}")
            except StoreError as e:
                e.op_index = i
                raise
        return results


class EmbeddedSession(StoreSession):
    """A `MetadataStore` session on an `EmbeddedCoordinator` (see `store.MetadataStore`)."""

    def __init__(self, coordinator: EmbeddedCoordinator, session_id: int) -> None:
        self._coord = coordinator
        self._session_id = session_id
        self._state = SessionState.CONNECTED
        self._listeners: dict[SessionStateListener, None] = {}
        self._watched: set[tuple[_WatchKind, str]] = set()
        self._pending: list[tuple[WatchCallback, WatchEvent]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bind_loop()

    def __repr__(self) -> str:
        return f"EmbeddedSession(id={self._session_id:#x}, state={self._state.value})"

    @property
    def coordinator(self) -> EmbeddedCoordinator:
        return self._coord

    def _bind_loop(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            pass

    # ---------------------------------------------------------------------------- reads

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        self._bind_loop()
        coord = self._coord

        def read() -> tuple[bytes, Stat]:
            n = coord._node(path)
            if watch is not None:
                coord._add_watch(self, "data", path, watch)
            return n.data, n.stat()

        return coord._read(self, read)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        self._bind_loop()
        coord = self._coord

        def read() -> Stat | None:
            n = coord._nodes.get(validate_path(path))
            if watch is not None:
                coord._add_watch(self, "data", path, watch)
            return None if n is None else n.stat()

        return coord._read(self, read)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        self._bind_loop()
        coord = self._coord

        def read() -> list[str]:
            n = coord._node(path)
            if watch is not None:
                coord._add_watch(self, "child", path, watch)
            return sorted(n.children)

        return coord._read(self, read)

    # ---------------------------------------------------------------------------- writes

    async def set(self, path: str, data: bytes, *, version: int = ANY_VERSION) -> Stat:
        self._bind_loop()
        coord = self._coord
        payload = as_bytes(data)
        return await coord._session_write(
            self, lambda txn: coord._op_set(txn, path, payload, version)
        )

    async def delete(
        self, path: str, *, version: int = ANY_VERSION, recursive: bool = False
    ) -> None:
        self._bind_loop()
        coord = self._coord
        op = coord._op_delete_recursive if recursive else coord._op_delete
        await coord._session_write(self, lambda txn: op(txn, path, version))

    async def multi(self, ops: Sequence[MultiOp]) -> list[MultiResult]:
        self._bind_loop()
        coord = self._coord
        ops = list(ops)
        return await coord._session_write(
            self, lambda txn: coord._op_multi(txn, self._session_id, ops)
        )

    # ---------------------------------------------------------------------------- session

    def add_state_listener(self, listener: SessionStateListener) -> None:
        self._bind_loop()
        super().add_state_listener(listener)

    async def close(self) -> None:
        self._bind_loop()
        coord = self._coord
        if self._session_id in coord._sessions:
            await coord._run_write(lambda: coord._close_session(self))
