"""What a broker hands its coordinators besides the replica node (`CoordinatorEdges`): its
config, clock, how their internal topics come to exist, how they reach the other brokers, its
metadata store, and where they read their logs. `coordinator/` runs the coordinators;
`server/groups.py`, `server/transactions.py` and `server/shares.py` build them from these
edges, for `wherry server` (`BrokerEdges`: sockets, the admin path, the executor) and for the
simulator alike (its edges: the simulated network, topics its world creates, inline reads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from wherry.coordination.store import MetadataStore
from wherry.coordinator.partition_log import Blocking, in_executor
from wherry.coordinator.runtime import CoordinatorRuntime
from wherry.outbound.connection import Connect, OutboundConnection
from wherry.outbound.security import ClientSecurity
from wherry.replication.node import ReplicaNode
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminManager
from wherry.server.config import BrokerConfig
from wherry.server.internal_topics import InternalTopic

__all__ = ["BrokerEdges", "CoordinatorEdges", "TopicOnFirstUse", "TopicSpec"]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """How a coordinator's internal topic is created."""

    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


class TopicOnFirstUse(Protocol):
    """A coordinator's internal topic: `ensure` starts creating it unless it exists or is
    being created; `cancel` gives up a creation under way."""

    def ensure(self) -> None: ...

    def cancel(self) -> None: ...


class CoordinatorEdges(Protocol):
    @property
    def config(self) -> BrokerConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def node(self) -> ReplicaNode: ...

    @property
    def blocking(self) -> Blocking[list[bytes]]:
        """Where a coordinator reads its partitions' logs when it loads them."""
        ...

    def store(self) -> MetadataStore: ...

    def internal_topic(self, runtime: CoordinatorRuntime, spec: TopicSpec) -> TopicOnFirstUse:
        """The runtime's internal topic, created on first use as `spec` says."""
        ...

    def connect_to(self, broker_id: int, host: str, port: int) -> Connect:
        """A coordinator's connection to another broker (a `txn_markers.ConnectTo`)."""
        ...


@dataclass(frozen=True, slots=True)
class BrokerEdges:
    """`wherry server`'s edges: internal topics created through the admin path, connections
    to the other brokers' inter-broker listeners, logs read on the loop's executor."""

    config: BrokerConfig
    clock: Clock
    node: ReplicaNode
    admin: Callable[[], AdminManager]
    security: Callable[[], ClientSecurity]
    metadata_store: Callable[[], MetadataStore]

    @property
    def blocking(self) -> Blocking[list[bytes]]:
        return in_executor

    def store(self) -> MetadataStore:
        return self.metadata_store()

    def internal_topic(self, runtime: CoordinatorRuntime, spec: TopicSpec) -> InternalTopic:
        return InternalTopic(
            runtime.topic,
            self.node.cache,
            self.admin,
            partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            configs=spec.configs,
            prefix=runtime.prefix,
        )

    def connect_to(self, _broker_id: int, host: str, port: int) -> Connect:
        """Each request bounded by `controller.socket.timeout.ms`."""
        timeout_s = self.config.controller_socket_timeout_ms / 1000
        return OutboundConnection(
            host,
            port,
            connect_timeout_s=timeout_s,
            request_timeout_s=timeout_s,
            security=self.security(),
        ).connect
