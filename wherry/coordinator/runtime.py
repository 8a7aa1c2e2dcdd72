"""The runtime every log-backed coordinator runs on (the group coordinator on
`__consumer_offsets`, the transaction coordinator on `__transaction_state`, the share
coordinator on `__share_group_state`), in the broker and in the simulation alike.

`CoordinatorRuntime` holds, for one coordinator and its internal topic on a replica node:

* the storage (`ReplicaCoordinatorStorage`): one acks=-1 batch per append, through the
  replica manager, as the coordinator;
* the loader (`CoordinatorPartitionLoader`), registered as the node's leadership listener: a
  partition this broker becomes leader of is loaded from its log once its high watermark
  reaches its log end, one it stops leading is unloaded;
* the timers: the coordinator (anything with `advance_clock`/`next_expiration_ms`) is
  advanced by the node's purgatory ticker on the coordinator's clock, and its purgatories wake
  the ticker when a newly parked operation has an earlier deadline (`on_earlier_deadline`).

Creating the internal topic on first use needs the admin path and stays with the broker
(`server/internal_topics.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from wherry.coordinator.partition_log import (
    Blocking,
    CoordinatorPartitionLoader,
    PartitionCoordinator,
    ReplicaCoordinatorStorage,
    inline,
)
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.replication.node import ReplicaNode
from wherry.runtime.ticker import Clocked

__all__ = ["CoordinatorRuntime"]


class CoordinatorRuntime:
    """One coordinator's internal topic on a replica node: its storage, its partitions'
    loading, its timers."""

    def __init__(
        self,
        topic: str,
        node: ReplicaNode,
        now_ms: Callable[[], int],
        *,
        timeout_ms: int,
        buffer_bytes: int,
        blocking: Blocking[list[bytes]] = inline,
        prefix: str = "",
    ) -> None:
        self.topic = topic
        self.node = node
        self.now_ms = now_ms
        self.prefix = prefix
        self._buffer_bytes = buffer_bytes
        self._blocking = blocking
        self.storage = ReplicaCoordinatorStorage(
            node.replica_manager, topic, now_ms, timeout_ms=timeout_ms
        )
        self.loader: CoordinatorPartitionLoader | None = None

    def serve(
        self,
        coordinator: PartitionCoordinator,
        *,
        clocked: Clocked | None = None,
        purgatories: Iterable[DelayedOperationPurgatory[Any]] = (),
        on_loaded: Callable[[int], None] | None = None,
    ) -> None:
        """Run `coordinator` on the topic's partitions this node leads: load and unload them as
        leadership moves (`on_loaded(partition)` after each load), advance `clocked` on the
        node's ticker and let `purgatories` wake it."""
        self.loader = CoordinatorPartitionLoader(
            self.topic,
            coordinator,
            self.node.replica_manager,
            self.now_ms,
            buffer_bytes=self._buffer_bytes,
            blocking=self._blocking,
            on_loaded=on_loaded,
            prefix=self.prefix,
        )
        ticker = self.node.ticker
        for purgatory in purgatories:
            purgatory.on_earlier_deadline = ticker.earlier_deadline
        if clocked is not None:
            ticker.add(clocked, self.now_ms)
        self.node.leadership_listeners.append(self.loader.on_leadership_change)

    def abandon(self) -> list[asyncio.Task[None]]:
        """Stop loading at once (the process dies, or stops); the load tasks, to await."""
        return [] if self.loader is None else self.loader.cancel()

    async def stop(self) -> None:
        for task in self.abandon():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
