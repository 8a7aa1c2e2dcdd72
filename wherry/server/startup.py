"""What the broker's start needs besides the broker itself (`broker.py`): the modules
imported once the listeners are bound, when the log manager's tasks first run, the
open-files limit, and its own metadata store, synced once the listeners are bound."""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from wherry.coordination.embedded import EmbeddedCoordinator

log = logging.getLogger(__name__)

API_VERSIONS_PREFIX: Final = b"\x00\x12"  # a request frame's api_key, ApiVersions (18)

# What the broker needs only once its listeners are bound (replication, the controller,
# groups, transactions, admin): imported then, one module at a time with the event loop
# turning in between, so ApiVersions is answered meanwhile. The heavier modules of the tree
# one by one, leaves first, so that each step stays short (a few ms).
LATE_IMPORTS: Final = (
    # the kio codec (ApiVersions is answered before it by `handlers.api_versions.early_answer`),
    # in steps of a few ms
    "typing_extensions",
    "kio.serial._parse",
    "kio.static.primitive",
    "kio.static.protocol",
    "kio.schema.errors",
    "kio.serial._introspect",
    "kio.serial.writers",
    "kio.serial._implicit_defaults",
    "kio.serial",
    "kio.schema.index",
    "kio.index",
    "wherry.protocol.codec",
    "wherry.server.dispatch",
    "wherry.protocol.records",
    "wherry.log.txn_index",
    "wherry.log.producer_state",
    "wherry.log.segment",
    "wherry.log.segments",
    "wherry.log.loader",
    "wherry.log.log",
    "wherry.protocol.interbroker",
    "wherry.purgatory.purgatory",
    "wherry.replication.isr",
    "wherry.replication.partition",
    "wherry.security.scram",
    "wherry.replication.fetch_session",
    "wherry.replication.replica_manager",
    "wherry.replication.fetcher",
    "wherry.replication.network_endpoint",
    "wherry.replication.alter_partition",
    "wherry.replication.truncation",
    "wherry.replication.node",
    "wherry.controller.context",
    "wherry.protocol.interbroker_codec",
    "wherry.controller.channel_manager",
    "wherry.controller.alter_partition",
    "wherry.controller.partition_state",
    "wherry.controller.replica_state",
    "wherry.controller.controller",
    "wherry.server.admin",
    "wherry.server.producer_ids",
    "wherry.group.member",
    "wherry.group.records",
    "wherry.group.group",
    "wherry.group.config",
    "wherry.group.metadata_manager",
    "wherry.group.consumer_group_records",
    "wherry.group.consumer_group",
    "wherry.group.consumer_coordinator",
    "wherry.group.consumer_protocol",
    "wherry.group.classic_members",
    "wherry.group.migration",
    "wherry.group.coordinator",
    "wherry.coordinator.runtime",
    "wherry.coordinator.groups",
    "wherry.server.groups",
    "wherry.txn.coordinator",
    "wherry.coordinator.transactions",
    "wherry.server.transactions",
    "wherry.share.partition",
    "wherry.coordinator.share_state",
    "wherry.coordinator.share_persister",
    "wherry.coordinator.shares",
    "wherry.server.shares",
    "wherry.replication.log_dir_mover",
)


# How long the loop stays idle once the listeners are bound, before the first import: a client
# waiting for the bind (retrying its connect) is accepted, read and answered meanwhile instead
# of after an import step (some take 5-10 ms), at the cost of this much to the whole start.
EARLY_WINDOW_S: Final = 0.005


async def import_late() -> None:
    """Import `LATE_IMPORTS`, yielding to the event loop after each (and first `EARLY_WINDOW_S`
    idle: a client that connects as the listeners are bound -- accepted, read, answered,
    written: one turn each -- has its ApiVersions answered before the first step; a few more
    turns after the window for one accepted at its end)."""
    await asyncio.sleep(EARLY_WINDOW_S)
    for _ in range(4):
        await asyncio.sleep(0)
    for name in LATE_IMPORTS:
        importlib.import_module(name)
        await asyncio.sleep(0)


# How long a start may take before its Kafka listener is bound (a log recovery, a store
# session) until the HTTP listener is brought up meanwhile (`HttpStart`).
HTTP_GRACE_S: Final = 0.5


class HttpStart:
    """When the HTTP listener (`http.listeners`) starts: once the Kafka listener is bound and
    the rest imported (`started`), so that it never delays the first answer; or as soon as the
    start has taken `grace_s` without binding the Kafka listener (a long log recovery), so
    that `/healthz` answers and `/readyz` says why not ready meanwhile."""

    def __init__(self, start: Callable[[], Awaitable[None]], grace_s: float = HTTP_GRACE_S) -> None:
        self._start = start
        self._task: asyncio.Future[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(grace_s, self._begin)

    def _begin(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._start())

    async def started(self) -> None:
        """Start it now (unless the grace ran out before) and wait until it is."""
        self._timer.cancel()
        self._begin()
        assert self._task is not None
        await self._task

    def cancel(self) -> None:
        """A start that failed or is stopped: no HTTP listener after all."""
        self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()


def log_bound(ports: Sequence[int]) -> None:
    """The line saying the listeners are bound, with the process's CPU time so far (the start's
    cost, robust to a busy host: `bench/run.py`'s f1 reports it)."""
    log.info(
        "listeners bound on ports %s after %.1f ms of process CPU",
        ",".join(map(str, ports)),
        time.process_time() * 1000,
    )


def initial_task_delay_ms(period_ms: int, initial_ms: int = 30_000) -> int:
    """When a log manager task first runs: Kafka's InitialTaskDelayMs (30 s, so a start does
    not write every checkpoint at once), or after one period when that is shorter."""
    return min(initial_ms, period_ms)


def raise_open_files_limit() -> int | None:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit (each partition holds one fd, and
    each connection one); returns the soft limit now in force (None where unsupported)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - non-POSIX
        return None
    infinity = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != infinity and (hard == infinity or soft < hard):
        # An unlimited hard limit is not accepted as a soft one: try Linux's default
        # fs.nr_open, then macOS's OPEN_MAX.
        targets = [hard] if hard != infinity else [1 << 20, 10240]
        for target in targets:
            if target <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError) as exc:
                log.warning("cannot raise the open files limit to %d: %s", target, exc)
                continue
            soft = target
            break
    log.info("open files limit (RLIMIT_NOFILE): soft %s, hard %s", soft, hard)
    return soft


def own_store(metadata_dir: Path, halt: Callable[[str], object]) -> EmbeddedCoordinator:
    """The broker's own embedded metadata store, its fsyncs deferred (`sync_in_thread`): until
    the listeners are bound the broker tells no one anything, and once they are it answers
    only ApiVersions (which says nothing of the store) until the start completes, after the
    sync. A start's few writes (a first start's cluster id and persistent paths) are made
    durable together then, their fsyncs off the path to the bind. A write that fails halts
    the broker (`halt`)."""
    from wherry.coordination.embedded import EmbeddedCoordinator

    return EmbeddedCoordinator(
        metadata_dir,
        on_write_failure=lambda m: halt(f"Shutdown broker because {m}"),
        defer_syncs=True,
    )


def sync_in_thread(store: EmbeddedCoordinator | None) -> asyncio.Future[None]:
    """`store.sync()` in the default executor (done at once without a store): awaited before
    the start writes what names the store's contents (meta.properties) or completes."""
    loop = asyncio.get_running_loop()
    if store is None:
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        return done
    return loop.run_in_executor(None, store.sync)
