"""The group coordinator (classic and consumer groups, and the share groups' membership
records) on the coordinator runtime: `group.GroupCoordinator` on `__consumer_offsets`.

Its groups' metadata and offsets are appended (acks=-1) to `__consumer_offsets-<p>`; a
partition is loaded when this broker becomes its leader, once its high watermark reaches its
log end (requests for its groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile), and unloaded
when it stops leading it. Rebalance and session timeouts run on the coordinator's clock on the
node's ticker, which a newly parked join or heartbeat wakes.
"""

from __future__ import annotations

from collections.abc import Callable

from wherry.coordinator.partition_log import Blocking, ReplicaCoordinatorStorage, inline
from wherry.coordinator.runtime import CoordinatorRuntime
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.coordinator import GroupCoordinator
from wherry.group.records import OFFSETS_TOPIC
from wherry.replication.node import ReplicaNode

__all__ = ["GroupCoordinatorHost"]


class GroupCoordinatorHost:
    """A replica node's group coordinator and its runtime."""

    def __init__(
        self,
        broker_id: int,
        config: GroupCoordinatorConfig,
        node: ReplicaNode,
        now_ms: Callable[[], int],
        *,
        timeout_ms: int,
        buffer_bytes: int,
        blocking: Blocking[list[bytes]] = inline,
        on_loaded: Callable[[int], None] | None = None,
    ) -> None:
        self.runtime = CoordinatorRuntime(
            OFFSETS_TOPIC,
            node,
            now_ms,
            timeout_ms=timeout_ms,
            buffer_bytes=buffer_bytes,
            blocking=blocking,
            prefix=f"[GroupCoordinator {broker_id}]:",
        )
        self.coordinator = GroupCoordinator(
            broker_id, config, self.runtime.storage, now_ms=now_ms()
        )
        self.runtime.serve(
            self.coordinator,
            clocked=self.coordinator,
            purgatories=(
                self.coordinator.rebalance_purgatory,
                self.coordinator.heartbeat_purgatory,
            ),
            on_loaded=on_loaded,
        )

    @property
    def storage(self) -> ReplicaCoordinatorStorage:
        return self.runtime.storage

    def abandon(self) -> None:
        self.runtime.abandon()

    async def stop(self) -> None:
        await self.runtime.stop()
        self.coordinator.shutdown()
