"""Coordination: a ZooKeeper-shaped metadata store (`MetadataStore`) and its implementations.

* `wherry.coordination.store` -- the interface, `Stat`, ops, errors, watch/session types
  (re-exported here as a whole).
* `wherry.coordination.session` -- what the implementations share (`StoreSession`).
* `wherry.coordination.embedded` -- `EmbeddedCoordinator`: in-process, persisted in SQLite.
* `wherry.coordination.zookeeper` -- `ZooKeeperStore` (`connect_zookeeper`): a ZooKeeper
  session through kazoo.
* `wherry.coordination.paths` -- Kafka's znode layout and JSON records.
"""

from wherry.coordination import store
from wherry.coordination.embedded import EmbeddedCoordinator, EmbeddedSession
from wherry.coordination.store import *  # noqa: F403
from wherry.coordination.zookeeper import (
    ZooKeeperStore,
    ZooKeeperUnavailableError,
    connect_zookeeper,
)

__all__ = [
    *store.__all__,
    "EmbeddedCoordinator",
    "EmbeddedSession",
    "ZooKeeperStore",
    "ZooKeeperUnavailableError",
    "connect_zookeeper",
]
