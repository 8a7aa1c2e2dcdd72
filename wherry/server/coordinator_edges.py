"""What the broker hands its coordinators besides the replica node (`CoordinatorEdges`): its
config, clock, admin path (internal topics created on first use), metadata store and the
security of its outbound connections. `coordinator/` runs the coordinators; `server/groups.py`,
`server/transactions.py` and `server/shares.py` add these edges."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from wherry.coordination.store import MetadataStore
from wherry.coordinator.runtime import CoordinatorRuntime
from wherry.outbound.connection import Connect, OutboundConnection
from wherry.outbound.security import ClientSecurity
from wherry.replication.node import ReplicaNode
from wherry.runtime.clock import Clock
from wherry.server.admin import AdminManager
from wherry.server.config import BrokerConfig
from wherry.server.internal_topics import InternalTopic

__all__ = ["CoordinatorEdges"]


@dataclass(frozen=True, slots=True)
class CoordinatorEdges:
    config: BrokerConfig
    clock: Clock
    node: ReplicaNode
    admin: Callable[[], AdminManager]
    security: Callable[[], ClientSecurity]
    store: Callable[[], MetadataStore]

    def internal_topic(
        self,
        runtime: CoordinatorRuntime,
        *,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
    ) -> InternalTopic:
        """The runtime's internal topic, created on first use."""
        return InternalTopic(
            runtime.topic,
            self.node.cache,
            self.admin,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=configs,
            prefix=runtime.prefix,
        )

    def connect_to(self, _broker_id: int, host: str, port: int) -> Connect:
        """A coordinator's connection to another broker's inter-broker listener, each request
        bounded by `controller.socket.timeout.ms` (a `txn_markers.ConnectTo`)."""
        timeout_s = self.config.controller_socket_timeout_ms / 1000
        return OutboundConnection(
            host,
            port,
            connect_timeout_s=timeout_s,
            request_timeout_s=timeout_s,
            security=self.security(),
        ).connect
