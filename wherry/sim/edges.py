"""A simulated broker's coordinator edges (`server.coordinator_edges.CoordinatorEdges`): the
same group coordinator, transaction coordinator and share groups `wherry server` builds
(`server/groups.py`, `server/transactions.py`, `server/shares.py`), from the broker's config
with the simulation's settings on top, their connections to other brokers over the simulated
network (request frames into the destination's request path), their internal topics the ones
the world creates before any client runs, and their logs read inline (no threads:
deterministic). The simulation has no metadata store: what a coordinator would read there
(a share group's dynamic configs) its host answers itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wherry.coordination.store import MetadataStore
from wherry.coordinator.partition_log import Blocking, inline
from wherry.coordinator.runtime import CoordinatorRuntime
from wherry.coordinator.txn_markers import ConnectTo
from wherry.outbound.connection import Connect
from wherry.replication.node import ReplicaNode
from wherry.runtime.clock import Clock
from wherry.server.config import BrokerConfig
from wherry.server.coordinator_edges import TopicSpec
from wherry.sim.node import SimBroker
from wherry.sim.wire import Brokers, broker_connect_to

__all__ = ["SimEdges", "WorldTopic", "sim_edges"]


class WorldTopic:
    """An internal topic the world created before any client ran: nothing to create."""

    def ensure(self) -> None:
        return None

    def cancel(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class SimEdges:
    config: BrokerConfig
    clock: Clock
    node: ReplicaNode
    connect: ConnectTo
    blocking: Blocking[list[bytes]] = inline

    def store(self) -> MetadataStore:
        raise RuntimeError("the simulation has no metadata store")

    def internal_topic(self, runtime: CoordinatorRuntime, spec: TopicSpec) -> WorldTopic:
        return WorldTopic()

    def connect_to(self, broker_id: int, host: str, port: int) -> Connect:
        return self.connect(broker_id, host, port)


def sim_edges(world: Brokers, node: SimBroker, settings: Mapping[str, str]) -> SimEdges:
    """`node`'s edges for a coordinator run with `settings` (broker config
    keys) on top of the broker's config; its connections to other brokers bounded by
    `controller.socket.timeout.ms`, as `wherry server`'s."""
    config = BrokerConfig.from_props({**node.broker_config.raw, **settings})
    return SimEdges(
        config,
        node.clock,
        node.replica,
        broker_connect_to(world, node, config.controller_socket_timeout_ms),
    )
