"""The coordination-store interface: a small, ZooKeeper-shaped metadata store.

`MetadataStore` is one *session* against a hierarchical namespace of znodes. Its semantics
deliberately follow ZooKeeper (as seen through kazoo) so that an embedded implementation
(`wherry.coordination.embedded`) and a ZooKeeper implementation can be swapped under the
controller and brokers:

* Paths are absolute, ``/``-separated, with no trailing slash (except the root ``/``), no empty,
  ``.`` or ``..`` components and no NUL characters. Malformed paths raise `ValueError`.
* Every node has a data version (`Stat.version`, starting at 0 and bumped by each `set`) and a
  child version (`Stat.cversion`, bumped whenever a direct child is created or deleted).
  ``version=-1`` means "any version" in conditional operations.
* Sequential nodes get a ``%010d`` suffix that grows with every sequential create under the
  parent and is never reused (the embedded store takes the parent's `cversion`; ZooKeeper
  3.8's counter does not count deletes, so callers must not rely on exact numbers).
* Ephemeral nodes belong to the session that created them (`Stat.ephemeral_owner`), cannot have
  children, and vanish when that session is closed or expires.
* Watches are one-shot callbacks set by `get` / `exists` (data watches) and `get_children`
  (child watches). They fire after the triggering write has committed, never from inside the
  writer's call, and only for the session that set them:

  ========================  =================================================================
  registered by             fires with
  ========================  =================================================================
  ``get``                   ``CHANGED`` (set) or ``DELETED``
  ``exists`` (node exists)  ``CHANGED`` or ``DELETED``
  ``exists`` (no node)      ``CREATED``
  ``get_children``          ``CHILD`` (a child created/deleted) or ``DELETED`` (node deleted)
  ========================  =================================================================

  A callback registered several times for the same path and kind fires once. ``get`` and
  ``get_children`` on a missing node raise `NoNodeError` and leave no watch behind. Watches of a
  session that closes or expires are discarded without firing.
* A session is dead once closed (`SessionClosedError`) or expired (`SessionExpiredError`); every
  later call raises. To continue, open a new session. (ZooKeeper tells a client of its expiry
  only when it reconnects, so listeners see ``SUSPENDED`` then ``EXPIRED``.) While a session
  is *suspended* (disconnected but not yet expired) calls raise `ConnectionLossError`;
  ephemeral nodes and watches survive and pending watch events are delivered after
  reconnection.

This module must not import other wherry packages.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from wherry.common.record import frozen_record

__all__ = [
    "ANY_VERSION",
    "BadVersionError",
    "BatchReader",
    "CheckOp",
    "ConnectionLossError",
    "CreateOp",
    "DeleteOp",
    "EventType",
    "MetadataStore",
    "MultiOp",
    "MultiResult",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionClosedError",
    "SessionExpiredError",
    "SessionState",
    "SessionStateListener",
    "SetOp",
    "Stat",
    "StoreError",
    "WatchCallback",
    "WatchEvent",
    "child_path",
    "parent_path",
    "validate_path",
]

ANY_VERSION = -1
"""Version wildcard for conditional operations (ZooKeeper's ``-1``)."""


# --------------------------------------------------------------------------------------------
# Node metadata
# --------------------------------------------------------------------------------------------


@frozen_record(slots=True)
class Stat:
    """Node metadata, mirroring ZooKeeper's ``Stat`` (kazoo's ``ZnodeStat``).

    ``czxid``/``mzxid``/``pzxid`` are the ids of the transactions that created the node, last
    changed its data, and last changed its children; they increase monotonically across the whole
    store (Kafka uses the broker registration's ``czxid`` as the broker epoch).
    """

    version: int
    cversion: int
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int
    num_children: int
    data_length: int
    czxid: int
    mzxid: int
    pzxid: int


# --------------------------------------------------------------------------------------------
# Errors (1:1 with kazoo.exceptions)
# --------------------------------------------------------------------------------------------


class StoreError(Exception):
    """Base class of coordination-store errors.

    ``path`` is the node concerned (when known); ``op_index`` is set when the error aborted a
    `MetadataStore.multi` transaction and names the failing operation.
    """

    def __init__(self, message: str = "", *, path: str | None = None) -> None:
        super().__init__(message or (path or ""))
        self.path = path
        self.op_index: int | None = None


class NoNodeError(StoreError):
    """The node (or, for a create, its parent) does not exist."""


class NodeExistsError(StoreError):
    """The node already exists."""


class BadVersionError(StoreError):
    """A conditional operation's expected version did not match."""


class NotEmptyError(StoreError):
    """The node has children (non-recursive delete)."""


class NoChildrenForEphemeralsError(StoreError):
    """Ephemeral nodes cannot have children."""


class ConnectionLossError(StoreError):
    """The session is suspended (disconnected, not yet expired); retry later."""


class SessionExpiredError(StoreError):
    """The session has expired; open a new session."""


class SessionClosedError(SessionExpiredError):
    """The session was closed by its owner (kazoo: ``ConnectionClosedError``)."""


# --------------------------------------------------------------------------------------------
# Watches and session state
# --------------------------------------------------------------------------------------------


class EventType(enum.StrEnum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    CHILD = "child"


@frozen_record(slots=True)
class WatchEvent:
    type: EventType
    path: str


WatchCallback = Callable[[WatchEvent], None]
"""A one-shot watch. Runs on the event loop; must not block; exceptions are logged."""


class SessionState(enum.StrEnum):
    """Session states (kazoo: CONNECTED / SUSPENDED / LOST)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    EXPIRED = "expired"
    CLOSED = "closed"


SessionStateListener = Callable[[SessionState], None]
"""Called (on the event loop, never re-entrantly) on every session state transition."""


# --------------------------------------------------------------------------------------------
# Transactions
# --------------------------------------------------------------------------------------------


@frozen_record(slots=True)
class CheckOp:
    """Assert that ``path`` exists with data version ``version`` (``-1``: merely exists)."""

    path: str
    version: int = ANY_VERSION


@frozen_record(slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@frozen_record(slots=True)
class SetOp:
    path: str
    data: bytes
    version: int = ANY_VERSION


@frozen_record(slots=True)
class DeleteOp:
    path: str
    version: int = ANY_VERSION


MultiOp = CheckOp | CreateOp | SetOp | DeleteOp
MultiResult = bool | str | Stat
"""Per-op result of `MetadataStore.multi`: check/delete -> ``True``, create -> the created path,
set -> the new `Stat` (as in kazoo's ``TransactionRequest.commit``)."""


# --------------------------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------------------------


@runtime_checkable
class MetadataStore(Protocol):
    """One session against a ZooKeeper-shaped metadata store. All I/O methods are coroutines.

    `create` is written here once, as a `multi` of create ops (its missing parents first):
    the stores that subclass this class inherit it; other implementations may write their own.
    """

    @property
    def session_id(self) -> int:
        """Non-zero id of this session (the ``ephemeral_owner`` of its ephemeral nodes)."""
        ...

    @property
    def state(self) -> SessionState: ...

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node and return its actual path (differs from ``path`` if sequential).

        Raises `NodeExistsError`, `NoNodeError` (parent missing and not ``make_parents``),
        `NoChildrenForEphemeralsError`. Parents made by ``make_parents`` are persistent and
        empty; they are created with the node in one `multi`, looked for again (up to
        `_TREE_RETRIES` times) when another session creates or deletes one meanwhile.
        """
        validate_path(path + "0" if sequential else path)
        if path == "/" and not sequential:
            raise NodeExistsError(path=path)
        node = CreateOp(path, data, ephemeral, sequential)
        try:
            return await _create_all(self, [node])
        except NoNodeError:
            if not make_parents:
                raise
        for _ in range(_TREE_RETRIES):
            missing = await _missing_ancestors(self, path)
            try:
                return await _create_all(self, [*map(CreateOp, missing), node])
            except NodeExistsError as e:
                if e.path == path:
                    raise  # the node itself exists
            except NoNodeError:
                pass  # a parent was deleted meanwhile: look again
        raise NoNodeError(f"parents of {path} keep changing; gave up creating them", path=path)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Stat]:
        """Return the node's data and stat; raises `NoNodeError`."""
        ...

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        """Return the node's stat or ``None``; the watch is set in both cases."""
        ...

    async def set(self, path: str, data: bytes, *, version: int = ANY_VERSION) -> Stat:
        """Replace the node's data; raises `NoNodeError`, `BadVersionError`."""
        ...

    async def delete(
        self, path: str, *, version: int = ANY_VERSION, recursive: bool = False
    ) -> None:
        """Delete a node; raises `NoNodeError`, `BadVersionError`, `NotEmptyError`.

        With ``recursive`` the whole subtree goes; ``version`` is checked against ``path``
        only. (The embedded store does this atomically; the ZooKeeper store in one transaction
        for subtrees of up to 1000 nodes, bottom-up in chunks above that.)
        """
        ...

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        """Return the names (not paths) of the node's children, sorted; raises `NoNodeError`."""
        ...

    async def multi(self, ops: Sequence[MultiOp]) -> list[MultiResult]:
        """Apply ``ops`` atomically, in order (later ops see earlier ones' effects).

        If any op fails nothing is applied and that op's error (e.g. `BadVersionError` for a
        failed `CheckOp`) is raised with ``op_index`` set.
        """
        ...

    def add_state_listener(self, listener: SessionStateListener) -> None: ...

    def remove_state_listener(self, listener: SessionStateListener) -> None: ...

    async def close(self) -> None:
        """End the session: its ephemeral nodes are deleted (firing other sessions' watches),
        its own watches are dropped, listeners see `SessionState.CLOSED`. Idempotent."""
        ...


_TREE_RETRIES = 10
"""How often `MetadataStore.create` looks for missing parents again after a concurrent change."""


async def _create_all(store: MetadataStore, ops: list[CreateOp]) -> str:
    """Create the nodes of `ops` in one `multi`; the last one's actual path. An error is the
    create's own (no ``op_index``)."""
    try:
        results = await store.multi(ops)
    except StoreError as e:
        e.op_index = None
        raise
    return str(results[-1])


async def _missing_ancestors(store: MetadataStore, path: str) -> list[str]:
    """The ancestors of `path` that do not exist, topmost first."""
    missing: list[str] = []
    p = parent_path(path)
    while p != "/" and await store.exists(p) is None:
        missing.append(p)
        p = parent_path(p)
    missing.reverse()
    return missing


@runtime_checkable
class BatchReader(Protocol):
    """A store that reads many nodes in one round trip (ZooKeeper's multiRead); callers that
    read thousands of nodes at once (the controller at failover) use it when the store has it
    and fall back to one `MetadataStore.get` per node otherwise."""

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, Stat] | None]:
        """Each node's data and stat, in order; None for a node that does not exist. No
        watches are set. Raises as `MetadataStore.get` does for anything but a missing node."""
        ...


# --------------------------------------------------------------------------------------------
# Path helpers
# --------------------------------------------------------------------------------------------


def validate_path(path: str) -> str:
    """Return ``path`` if it is a well-formed absolute znode path, else raise `ValueError`."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"znode path must be an absolute str: {path!r}")
    if path == "/":
        return path
    if path.endswith("/") or "\x00" in path:
        raise ValueError(f"invalid znode path: {path!r}")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"invalid znode path: {path!r}")
    return path


def parent_path(path: str) -> str:
    """Parent of a (valid, non-root) path: ``/a/b`` -> ``/a``, ``/a`` -> ``/``."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def child_path(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"
