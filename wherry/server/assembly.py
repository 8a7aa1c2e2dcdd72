"""The one place a broker's serving parts are built, from what does its I/O.

`Broker` (what `wherry server`, `wherry dev` and the test fixtures run) and the simulator's
`SimBroker` both build their replica node here: the replica manager with its purgatories,
fetchers and fetch sessions, the ISR and HW machinery, and the controller requests' rules.
What differs between them is only `BrokerIO`: the clock, the seeded randomness, how a
follower opens a connection to its leader (a socket, or the simulated network carrying the
same request frames), how AlterPartition reaches the controller, and whether file work runs
on an executor or inline. Requests reach the handlers one way in both: `dispatch.decode_frame`
then `dispatch.serve` (the codecs, the handlers, fetch sessions and the authorizer).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.outbound.connection import Connect
from wherry.replication.alter_partition import Send
from wherry.replication.controller_requests import ControllerFence
from wherry.replication.fetch_session import (
    DEFAULT_CACHE_SLOTS,
    DEFAULT_EVICTION_MS,
    FetchSessionCache,
)
from wherry.replication.fetcher import FetcherConfig, LeaderAddress
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.network_endpoint import NetworkLeaderEndpoint
from wherry.replication.node import ReplicaNode, ReplicaNodeConfig
from wherry.replication.quota import ReplicationQuotaManager
from wherry.runtime.clock import Clock
from wherry.runtime.tasks import wait_event
from wherry.server.config import BrokerConfig

__all__ = ["BrokerIO", "replica_node", "wait_for_metadata"]


@dataclass(frozen=True, slots=True)
class BrokerIO:
    """What a broker does its I/O and takes its time and chance from."""

    clock: Clock
    rng: random.Random
    # A connection (whole request frames out, answers back) to another broker, a leader.
    connect: Callable[[LeaderAddress], Connect]
    # AlterPartition to the active controller.
    send_to_controller: Send
    # File work (segment rolls, truncation, checkpoints) on the loop's executor; inline
    # when False (the simulator: deterministic, no threads).
    blocking_in_executor: bool = True


def replica_node(
    config: BrokerConfig,
    log_manager: LogManager,
    io: BrokerIO,
    *,
    cache: MetadataCache,
    fence: ControllerFence,
    topic_config: Callable[[str], LogConfig],
    load_topic_configs: Callable[[Collection[str]], Awaitable[None]] | None = None,
    leader_quota: ReplicationQuotaManager | None = None,
    follower_quota: ReplicationQuotaManager | None = None,
) -> ReplicaNode:
    """The broker's replicas and what it does with the controller's requests, configured by
    `config`'s `replica.*` settings; followers fetch over `io.connect`."""
    raw = config.raw
    fetcher = FetcherConfig.from_properties(raw)
    broker_id = config.broker_id
    return ReplicaNode(
        broker_id,
        log_manager,
        config=ReplicaNodeConfig(
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            high_watermark_checkpoint_interval_ms=(
                config.replica_high_watermark_checkpoint_interval_ms
            ),
            fetcher=fetcher,
            blocking_in_executor=io.blocking_in_executor,
        ),
        clock=io.clock,
        topic_config=topic_config,
        leader_endpoint=lambda a: NetworkLeaderEndpoint(
            broker_id, a.host, a.port, config=fetcher, connect=io.connect(a)
        ),
        send_alter_partition=io.send_to_controller,
        load_topic_configs=load_topic_configs,
        fence=fence,
        cache=cache,
        leader_quota=leader_quota,
        follower_quota=follower_quota,
        fetch_sessions=FetchSessionCache(
            int(raw.get("max.incremental.fetch.session.cache.slots", DEFAULT_CACHE_SLOTS)),
            int(raw.get("min.incremental.fetch.session.eviction.ms", DEFAULT_EVICTION_MS)),
            random_id=lambda: io.rng.randint(1, 0x7FFFFFFF),
        ),
    )


async def wait_for_metadata(
    cache: MetadataCache, clock: Clock, predicate: Callable[[], bool], timeout_ms: int
) -> bool:
    """Wait until `predicate()` holds for the metadata cache, at most `timeout_ms`."""
    if predicate():
        return True
    changed = asyncio.Event()
    cache.add_listener(changed.set)
    try:
        deadline = clock.monotonic_ms() + timeout_ms
        while not predicate():
            remaining = deadline - clock.monotonic_ms()
            if remaining <= 0:
                return False
            changed.clear()
            if not await wait_event(changed, remaining / 1000):
                return predicate()
        return True
    finally:
        cache.remove_listener(changed.set)
