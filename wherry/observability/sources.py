"""What the observability layer reads of one broker: its parts as they are now (None while
the broker starts or after it stops), passed in by the broker as callables so this package
imports nothing of the server and holds no reference that outlives a part."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wherry.observability.network_stats import NetworkStats
from wherry.observability.request_stats import RequestStats
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.runtime.loop_lag import LoopLag

if TYPE_CHECKING:  # (what the start imports is kept small: these come after the bind)
    from wherry.controller.controller import Controller
    from wherry.group.coordinator import GroupCoordinator
    from wherry.log.manager import LogManager
    from wherry.quotas.manager import QuotaType
    from wherry.replication.metadata_cache import MetadataCache
    from wherry.replication.replica_manager import ReplicaManager


class QuotaSnapshot(Protocol):
    def snapshot(self) -> list[tuple[QuotaType, str, str, float, float]]:
        """(type, user, client id, rate, average throttle ms) per client recorded."""
        ...


def _none() -> None:
    return None


@dataclass(frozen=True, slots=True)
class BrokerSources:
    broker_id: int
    cache: MetadataCache
    request_stats: RequestStats
    # The broker's state-change log (the console's timeline starts with its tail).
    state_change_log: Path | None = None
    replica_lag_time_max_ms: int = 30_000
    # The settings the broker was started with (its properties and overrides), for the console.
    config: Mapping[str, str] = field(default_factory=dict)
    network_stats: NetworkStats | None = None
    replica_manager: Callable[[], ReplicaManager | None] = _none
    controller: Callable[[], Controller | None] = _none
    groups: Callable[[], GroupCoordinator | None] = _none
    log_manager: Callable[[], LogManager | None] = _none
    # Started (serving requests) and registered (its /brokers/ids node on a live session).
    started: Callable[[], bool] = lambda: False
    registered: Callable[[], bool] = lambda: False
    # How this broker connects to the others (the console asks them for their groups).
    client_security: Callable[[], ClientSecurity] = lambda: PLAINTEXT
    # The clients the client quotas recorded (`ClientQuotas`).
    client_quotas: Callable[[], QuotaSnapshot | None] = _none
    # How late the event loop runs what is due (`runtime/loop_lag.py`).
    loop_lag: LoopLag | None = None
