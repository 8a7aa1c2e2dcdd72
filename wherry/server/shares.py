"""Share groups in the broker (KIP-932): the share groups of `coordinator/shares.py` and the
share coordinator of `coordinator/share_state.py` (both on the coordinator runtime), with the
broker's edges: their settings from the broker's config, `__share_group_state` created on
first use (`share.coordinator.state.topic.*`, compacted), the persister's connections to the
other brokers' share coordinators."""

from __future__ import annotations

from collections.abc import Callable

from wherry.coordinator.share_persister import SharePersister
from wherry.coordinator.share_state import ShareStateCoordinator
from wherry.coordinator.shares import ShareGroupsRuntime
from wherry.server.coordinator_edges import CoordinatorEdges, TopicSpec
from wherry.share.config import ShareBrokerConfig

__all__ = ["ShareRuntime"]


class ShareRuntime(ShareGroupsRuntime):
    persister: SharePersister

    def __init__(
        self, edges: CoordinatorEdges, offsets_partition_for: Callable[[str], int] | None = None
    ) -> None:
        config, clock, node = edges.config, edges.clock, edges.node
        cfg = ShareBrokerConfig.from_props(config.raw)
        self.coordinator = ShareStateCoordinator(
            config.broker_id,
            node,
            clock.now_ms,
            partitions=cfg["share.coordinator.state.topic.num.partitions"],
            timeout_ms=cfg["share.coordinator.write.timeout.ms"],
            blocking=edges.blocking,
        )
        self.state_topic = edges.internal_topic(
            self.coordinator.runtime,
            TopicSpec(
                partitions=cfg["share.coordinator.state.topic.num.partitions"],
                replication_factor=cfg["share.coordinator.state.topic.replication.factor"],
                configs={
                    "cleanup.policy": "compact",
                    "min.insync.replicas": str(cfg["share.coordinator.state.topic.min.isr"]),
                    "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"]),
                },
            ),
        )
        persister = SharePersister(
            config.broker_id,
            node.cache,
            clock,
            self.coordinator,
            write_timeout_ms=cfg["share.coordinator.write.timeout.ms"],
            connect_to=edges.connect_to,
            ensure_topic=self.state_topic.ensure,
        )
        super().__init__(
            config.broker_id, cfg, clock, node, edges.store, persister, offsets_partition_for
        )

    async def stop(self) -> None:
        await super().stop()
        self.state_topic.cancel()
        await self.coordinator.stop()
