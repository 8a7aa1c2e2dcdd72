"""Coordination: a ZooKeeper-shaped metadata store (`MetadataStore`) and its implementations.

* `wherry.coordination.store` -- the interface, `Stat`, ops, errors, watch/session types.
* `wherry.coordination.embedded` -- `EmbeddedCoordinator`: in-process, persisted in SQLite.
* `wherry.coordination.zookeeper` -- `ZooKeeperStore` (`connect_zookeeper`): a ZooKeeper
  session through kazoo.
* `wherry.coordination.paths` -- Kafka's znode layout and JSON records.
"""

from wherry.coordination.embedded import EmbeddedCoordinator, EmbeddedSession
from wherry.coordination.store import (
    ANY_VERSION,
    BadVersionError,
    CheckOp,
    ConnectionLossError,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    MultiOp,
    MultiResult,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionClosedError,
    SessionExpiredError,
    SessionState,
    SessionStateListener,
    SetOp,
    Stat,
    StoreError,
    WatchCallback,
    WatchEvent,
)
from wherry.coordination.zookeeper import (
    ZooKeeperStore,
    ZooKeeperUnavailableError,
    connect_zookeeper,
)

__all__ = [
    "ANY_VERSION",
    "BadVersionError",
    "CheckOp",
    "ConnectionLossError",
    "CreateOp",
    "DeleteOp",
    "EmbeddedCoordinator",
    "EmbeddedSession",
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
    "ZooKeeperStore",
    "ZooKeeperUnavailableError",
    "connect_zookeeper",
]
