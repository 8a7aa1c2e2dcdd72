"""Client requests held until the broker has its first metadata from the controller.

A broker's start completes once it is registered and its controller instance has started, but
what it knows of the cluster -- the live brokers, the controller, the partitions -- comes only
with the controller's first UpdateMetadata, a moment later. A Metadata request answered in
between would say "no brokers, no controller" (and CreateTopics would count no live broker):
librdkafka then forgets the controller and its admin requests wait for one until they time
out, a producer sees its partitions without a leader. Kafka's KRaft broker likewise serves
clients only once it has caught up with the cluster's metadata.

So, once the start is done, requests from clients wait until the metadata cache lists this
broker and names a controller, at most `hold_ms` (after which the broker serves with what it
has, and logs it once). The requests of the cluster itself are never held: the controller's
(LeaderAndIsr, StopReplica, UpdateMetadata -- the very request that opens the gate --,
ControlledShutdown, AlterPartition), the replicas' (Fetch, OffsetForLeaderEpoch), transaction
markers, and ApiVersions and the SASL exchange that precede any of them. Decided from a
frame's first two bytes (its api key), before it is decoded.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from wherry.replication.metadata_cache import MetadataCache
    from wherry.server.config import BrokerConfig

log = logging.getLogger(__name__)

# Api keys served as soon as the start completes, metadata or not.
NOT_HELD: Final = frozenset(
    {
        1,  # Fetch (followers)
        4,  # LeaderAndIsr
        5,  # StopReplica
        6,  # UpdateMetadata
        7,  # ControlledShutdown
        17,  # SaslHandshake
        18,  # ApiVersions
        23,  # OffsetForLeaderEpoch (followers)
        27,  # WriteTxnMarkers
        36,  # SaslAuthenticate
        56,  # AlterPartition
    }
)


def api_key_of(frame: bytes | memoryview) -> int | None:
    """A request frame's api key (its first two bytes, big-endian), None when shorter."""
    if len(frame) < 2:
        return None
    return int.from_bytes(frame[:2], "big", signed=True)


def has_metadata(cache: MetadataCache) -> bool:
    """The cache lists this broker alive and names a controller."""
    return (
        cache.controller_id is not None
        and cache.controller_id >= 0
        and cache.broker_id in cache.brokers
    )


class MetadataGate:
    """Open once `has_metadata(cache)` (checked on each cache update, `on_update`) or once
    `hold_ms` passed since `start_holding`."""

    def __init__(self, cache: MetadataCache, hold_ms: int, prefix: str = "") -> None:
        self._cache = cache
        self._hold_s = hold_ms / 1000
        self._prefix = prefix
        self._open = asyncio.Event()
        self._deadline: float | None = None

    @property
    def cache(self) -> MetadataCache:
        return self._cache

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def on_update(self) -> None:
        """A metadata cache listener."""
        if not self._open.is_set() and has_metadata(self._cache):
            self._open.set()

    def start_holding(self, now_s: float) -> None:
        """The start completed at `now_s` (the event loop's clock): the bound runs from here."""
        self._deadline = now_s + self._hold_s
        self.on_update()

    def holds(self, frame: bytes | memoryview) -> bool:
        """Whether this request frame is to wait for the gate."""
        return not self._open.is_set() and api_key_of(frame) not in NOT_HELD

    async def wait(self) -> None:
        """Until the gate opens or the bound passes (then it opens for every request)."""
        if self._open.is_set():
            return
        loop = asyncio.get_running_loop()
        deadline = self._deadline if self._deadline is not None else loop.time() + self._hold_s
        remaining = deadline - loop.time()
        if remaining > 0:
            try:
                await asyncio.wait_for(self._open.wait(), remaining)
                return
            except TimeoutError:
                pass
        if not self._open.is_set():
            log.warning(
                "%s no metadata from the controller %.0f s after the start; serving clients "
                "with what this broker has",
                self._prefix,
                self._hold_s,
            )
            self._open.set()


def broker_gate(config: BrokerConfig, prefix: str) -> MetadataGate:
    """A broker's metadata cache (empty) behind its gate."""
    from wherry.replication.metadata_cache import MetadataCache

    return metadata_gate(MetadataCache(config.broker_id, config.inter_broker_listener), config,
                         prefix)


def metadata_gate(cache: MetadataCache, config: BrokerConfig, prefix: str) -> MetadataGate:
    """The gate in front of `cache`, checked on every cache update, held at most
    `controller.socket.timeout.ms`."""
    gate = MetadataGate(cache, config.controller_socket_timeout_ms, prefix)
    cache.add_listener(gate.on_update)
    return gate
