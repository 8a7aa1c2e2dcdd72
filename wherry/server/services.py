"""What a request handler may use of the broker (`server/handlers/`).

Handlers get this narrow view rather than the `Broker` itself: the broker's configuration and
identity, the metadata cache, the replica node (produce, fetch, the controller's requests),
the group and transaction runtimes, the admin manager and producer ids. `Broker` provides it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wherry.replication.log_dir_mover import LogDirMover
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.node import ReplicaNode
from wherry.replication.replica_manager import ReplicaManager
from wherry.runtime.clock import Clock
from wherry.security.authorizer import Authorizer
from wherry.security.scram_store import ScramCredentialCache
from wherry.server.admin import AdminManager
from wherry.server.client_quotas import ClientQuotas
from wherry.server.config import BrokerConfig
from wherry.server.groups import GroupsRuntime
from wherry.server.shares import ShareRuntime
from wherry.server.transactions import TransactionsRuntime

__all__ = ["BrokerServices", "ProducerIds"]


class ProducerIds(Protocol):
    """Where new producer ids come from (`producer_ids.ProducerIdManager`: blocks claimed in
    the metadata store)."""

    async def next_id(self) -> int: ...


class BrokerServices(Protocol):
    @property
    def config(self) -> BrokerConfig: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def cache(self) -> MetadataCache: ...

    @property
    def node(self) -> ReplicaNode: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...

    @property
    def groups(self) -> GroupsRuntime: ...

    @property
    def log_dir_mover(self) -> LogDirMover:
        """Moves replicas between this broker's log dirs (AlterReplicaLogDirs)."""
        ...

    @property
    def transactions(self) -> TransactionsRuntime: ...

    @property
    def shares(self) -> ShareRuntime: ...

    @property
    def admin(self) -> AdminManager: ...

    @property
    def producer_ids(self) -> ProducerIds: ...

    @property
    def authorizer(self) -> Authorizer | None:
        """The ACL authorizer, or None when `authorizer.class.name` is unset (all allowed)."""
        ...

    @property
    def scram_credentials(self) -> ScramCredentialCache:
        """Every user's SCRAM credentials as this broker last read them (SASL/SCRAM logins)."""
        ...

    @property
    def client_quotas(self) -> ClientQuotas:
        """The client quotas (producer/consumer byte rates, request percentages)."""
        ...

    async def wait_for_metadata(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Wait until `predicate()` holds for the metadata cache, at most `timeout_ms`."""
        ...
