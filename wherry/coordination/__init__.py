"""Coordination: a ZooKeeper-shaped metadata store (`MetadataStore`) and its implementations.

* `wherry.coordination.store` -- the interface, `Stat`, ops, errors, watch/session types
  (re-exported here as a whole).
* `wherry.coordination.session` -- what the implementations share (`StoreSession`).
* `wherry.coordination.embedded` -- `EmbeddedCoordinator`: in-process, persisted in SQLite.
* `wherry.coordination.zookeeper` -- `ZooKeeperStore` (`connect_zookeeper`): a ZooKeeper
  session through kazoo.
* `wherry.coordination.paths` -- Kafka's znode layout and JSON records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.common.lazy import lazy_attributes
from wherry.coordination import store
from wherry.coordination.store import *  # noqa: F403

if TYPE_CHECKING:
    from wherry.coordination.embedded import EmbeddedCoordinator, EmbeddedSession
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

# submodule → the names it gives this package, imported on first access (PEP 562):
# importing one submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, ...]] = {
    "wherry.coordination.embedded": ("EmbeddedCoordinator", "EmbeddedSession"),
    "wherry.coordination.zookeeper": (
        "ZooKeeperStore",
        "ZooKeeperUnavailableError",
        "connect_zookeeper",
    ),
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
