"""Clusters of wherry brokers for tests, scripts and `wherry dev`.

* `AsyncDevCluster`: N brokers in this process on the running event loop. One
  `EmbeddedCoordinator` (``<dir>/__meta/metadata.db``) is shared, each broker holding its own
  session (so its ephemeral ``/brokers/ids/<id>`` vanishes when it stops); each broker has
  its own data dir ``<dir>/broker-<id>`` and listener ``host:base_port+id``, or with
  ``base_port=0`` (the default) a port chosen by the OS at its first start and kept across
  restarts, so a cluster never collides with a broker already on 9092 (`wherry dev` passes
  its user-facing default, 9092, explicitly). Every broker runs for controller; the
  controller reaches the brokers through one `InProcessChannel` shared by all.
* `DevCluster`: the same on an event loop of its own in a background thread, with blocking
  methods, for pytest (whose Kafka clients block) and scripts.
* `ZkCluster`: N ``wherry server --zookeeper`` child processes and a real ZooKeeper, for
  multi-process fault tests: each process is started with a bounded wait, stopped by its own
  PID (SIGTERM, then SIGKILL), killed with SIGKILL, restarted.

Stopping one broker (`stop_broker`) is a controlled shutdown when the broker's
`controlled.shutdown.enable` says so (the default): the controller moves its leaderships away
before it closes its listener. The dev clusters' ``stop_broker(b, controlled=False)`` skips that
(a hard stop: logs still closed cleanly, leaderships left to the controller's broker-change
handling). Stopping a whole cluster (`stop`) stops its brokers without controlled shutdown:
with every broker going, the last ones would only wait out their retries. The clusters retry
controlled shutdown 100 ms apart unless told otherwise (`HARNESS_DEFAULTS`).

Broker ids are 0..N-1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from wherry.common.closeable import Startable
from wherry.testing.metadata_probe import ClusterView, fetch_metadata
from wherry.testing.zookeeper import ZooKeeperServer, find_free_port

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from wherry.controller.channel import InProcessChannel
    from wherry.coordination.embedded import EmbeddedCoordinator
    from wherry.coordination.paths import PartitionState
    from wherry.server.broker import Broker
    from wherry.server.config import BrokerConfig

__all__ = [
    "AsyncDevCluster",
    "ClusterView",
    "DevCluster",
    "DevClusterOptions",
    "ZkCluster",
    "wait_until",
]

_T = TypeVar("_T")

log = logging.getLogger(__name__)

PER_BROKER_KEYS = ("broker.id", "node.id", "listeners", "log.dirs", "log.dir")
"""Settings a cluster sets per broker; given as overrides they would clash."""

HARNESS_DEFAULTS: Mapping[str, str] = {"controlled.shutdown.retry.backoff.ms": "100"}
"""What the clusters set unless the overrides (or the properties file) say otherwise. As in
Kafka's own test harness (TestUtils.createBrokerConfig): a broker that cannot hand its
leaderships over — the last one of a cluster — retries its controlled shutdown 100 ms apart
rather than 5 s."""


def wait_until(
    predicate: Callable[[], object], timeout_s: float = 10.0, interval_s: float = 0.05
) -> bool:
    """Poll ``predicate`` until it is truthy (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return True
        except (OSError, ConnectionError):  # a broker not answering yet
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def _check_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    clash = sorted(k for k in overrides if k in PER_BROKER_KEYS)
    if clash:
        raise ValueError(f"{', '.join(clash)} are set per broker by the cluster")
    return dict(overrides)


# --------------------------------------------------------------------------- in-process


class DevClusterOptions(TypedDict, total=False):
    """`AsyncDevCluster`'s options, which `DevCluster` passes on."""

    brokers: int
    base_port: int
    host: str
    overrides: Mapping[str, str] | None
    properties_file: Path | None
    http_base_port: int | None
    log_dirs: Mapping[int, Sequence[Path]] | None
    broker_overrides: Mapping[int, Mapping[str, str]] | None


class AsyncDevCluster:
    """N brokers in this process, on the running event loop (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        brokers: int = 3,
        base_port: int = 0,
        host: str = "127.0.0.1",
        overrides: Mapping[str, str] | None = None,
        properties_file: Path | None = None,
        http_base_port: int | None = None,
        log_dirs: Mapping[int, Sequence[Path]] | None = None,
        broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        """``http_base_port``: None leaves the brokers without HTTP listener (unless the
        overrides set `http.listeners`); 0 gives each one on a port the OS chooses; N gives
        broker b port N+b (`http_url`), kept across restarts. ``log_dirs[b]`` gives broker b
        several log dirs (default: ``<directory>/broker-<b>``). ``broker_overrides[b]`` goes
        over ``overrides`` for broker b only (its `broker.rack`, ...). A broker whose every
        log dir fails is stopped (hard), not the process."""
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        props = _check_overrides(overrides or {})
        self.http_base_port = http_base_port
        self._http_ports: dict[int, int] = {}  # bound at a first start on port 0, kept
        self.directory = Path(directory)
        self.host = host
        self.broker_ids = list(range(brokers))
        self.overrides = props
        self.properties_file = properties_file
        self.log_dirs = {b: list(d) for b, d in (log_dirs or {}).items()}
        self.broker_overrides = {
            b: _check_overrides(o) for b, o in (broker_overrides or {}).items()
        }
        self._ports = {b: base_port + b if base_port else 0 for b in self.broker_ids}
        self.coordinator: EmbeddedCoordinator | None = None
        self.brokers: dict[int, Broker] = {}
        self._failed_stops: set[asyncio.Task[None]] = set()
        self._channel: InProcessChannel | None = None
        # Configuration errors surface before anything starts.
        if any(self.config_for(b).zookeeper_connect for b in self.broker_ids):
            raise ValueError("a dev cluster uses the embedded store, not zookeeper.connect")

    def config_for(self, broker_id: int) -> BrokerConfig:
        from wherry.server.config import load_config, read_properties

        props = {**self.overrides, **self.broker_overrides.get(broker_id, {})}
        given = read_properties(self.properties_file) if self.properties_file else {}
        for key, value in HARNESS_DEFAULTS.items():
            if key not in props and key not in given:
                props[key] = value
        props["broker.id"] = str(broker_id)
        props["listeners"] = f"PLAINTEXT://{self.host}:{self._ports[broker_id]}"
        own = self.log_dirs.get(broker_id, [self.directory / f"broker-{broker_id}"])
        props["log.dirs"] = ",".join(map(str, own))
        if self.http_base_port is not None:
            port = self._http_ports.get(broker_id) or (
                self.http_base_port + broker_id if self.http_base_port else 0
            )
            props["http.listeners"] = f"http://{self.host}:{port}"
        return load_config(self.properties_file, props)

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the shared store and start every broker (in id order)."""
        from wherry.controller.channel import InProcessChannel
        from wherry.coordination.embedded import EmbeddedCoordinator

        self.directory.mkdir(parents=True, exist_ok=True)
        self.coordinator = EmbeddedCoordinator(self.directory)
        self._channel = InProcessChannel()
        try:
            for b in self.broker_ids:
                await self.start_broker(b)
        except BaseException:
            await self.stop()
            raise

    async def __aenter__(self) -> AsyncDevCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop every running broker (the controller last, none controlled: the whole cluster
        goes) and close the store."""
        controller = self.controller_id
        for b in sorted(self.brokers, key=lambda b: (b == controller, b)):
            await self.stop_broker(b, controlled=False)
        if self.coordinator is not None:
            self.coordinator.close()
            self.coordinator = None

    async def start_broker(self, broker_id: int) -> Broker:
        """Start a broker (again); it keeps its data dir and port."""
        from wherry.server.broker import Broker

        if self.coordinator is None:
            raise RuntimeError("the cluster is not started")
        if broker_id not in self._ports:
            raise KeyError(f"no broker {broker_id} in this cluster")
        if broker_id in self.brokers:
            raise RuntimeError(f"broker {broker_id} is running")
        broker = Broker(
            self.config_for(broker_id), coordinator=self.coordinator, channel=self._channel
        )
        broker.fatal = functools.partial(self._broker_failed, broker_id)
        try:
            await broker.start()
        except BaseException:
            await broker.stop()
            raise
        self.brokers[broker_id] = broker
        if not self._ports[broker_id]:
            self._ports[broker_id] = broker.bound_ports[0]
        if broker.http is not None and broker.http.bound:
            self._http_ports.setdefault(broker_id, broker.http.bound[0][1])
        return broker

    def _broker_failed(self, broker_id: int, message: str) -> None:
        """A broker must stop (every log dir failed): a hard stop of that broker alone."""
        log.error("%s", message)
        task = asyncio.get_running_loop().create_task(
            self.stop_broker(broker_id, controlled=False), name=f"stop-failed-{broker_id}"
        )
        self._failed_stops.add(task)
        task.add_done_callback(self._failed_stops.discard)

    async def stop_broker(self, broker_id: int, *, controlled: bool = True) -> None:
        """Stop a broker cleanly; its session ends, so its registration disappears.

        With ``controlled`` (and ``controlled.shutdown.enable``, the default) it is a
        controlled shutdown: the controller moves the broker's leaderships away first, while
        it still serves. ``controlled=False`` is a hard stop."""
        broker = self.brokers.pop(broker_id, None)
        if broker is None:
            raise KeyError(f"broker {broker_id} is not running")
        await broker.stop(controlled=controlled)

    def expire_session(self, broker_id: int) -> bool:
        """Expire a running broker's store session (as ZooKeeper does to a silent client)."""
        assert self.coordinator is not None
        return self.coordinator.expire_session(self.brokers[broker_id].store.session_id)

    # --- views -----------------------------------------------------------------------------
    def port(self, broker_id: int) -> int:
        port = self._ports[broker_id]
        if not port:
            raise RuntimeError(f"broker {broker_id} has not started yet (port chosen at start)")
        return port

    def address(self, broker_id: int) -> str:
        return f"{self.host}:{self.port(broker_id)}"

    def http_url(self, broker_id: int) -> str | None:
        """A running broker's first HTTP listener (`http://host:port`), None without one."""
        broker = self.brokers.get(broker_id)
        if broker is None or broker.http is None or not broker.http.urls:
            return None
        return broker.http.urls[0]

    @property
    def bootstrap(self) -> str:
        """The running brokers' addresses, comma-separated (a bootstrap.servers value)."""
        return ",".join(self.address(b) for b in sorted(self.brokers))

    @property
    def controller_id(self) -> int | None:
        """The broker whose controller instance is active, if any."""
        for b, broker in sorted(self.brokers.items()):
            if hasattr(broker, "controller") and broker.controller.active:
                return b
        return None

    async def wait_for_controller(self, timeout_s: float = 10.0) -> int:
        deadline = time.monotonic() + timeout_s
        while (c := self.controller_id) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no active controller after {timeout_s} s")
            await asyncio.sleep(0.02)
        return c


# --------------------------------------------------------------------------- threaded


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class DevCluster(Startable):
    """An `AsyncDevCluster` run on its own event loop in a background thread.

    Blocking methods, each bounded by ``timeout_s``; use it as a context manager::

        with DevCluster(tmp_path, brokers=3) as cluster:
            producer = Producer({"bootstrap.servers": cluster.bootstrap})
            cluster.stop_broker(cluster.controller_id)

    ``base_port=0`` (the default, as for `AsyncDevCluster`) lets the OS choose each broker's
    port at its first start; a restarted broker keeps its port.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        timeout_s: float = 60.0,
        **options: Unpack[DevClusterOptions],
    ) -> None:
        self.cluster = AsyncDevCluster(directory, **options)
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # --- the loop thread -------------------------------------------------------------------
    def _run_loop(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def run(
        self, coro: Coroutine[Any, Any, _T] | Awaitable[_T], timeout_s: float | None = None
    ) -> _T:
        """Run a coroutine on the cluster's loop and wait (bounded) for its result."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the cluster is not running")
        if threading.current_thread() is self._thread:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RuntimeError("blocking DevCluster call on its own loop (use .cluster there)")

        async def wrap() -> _T:
            return await coro

        fut = asyncio.run_coroutine_threadsafe(wrap(), loop)
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            return fut.result(limit)
        except TimeoutError:
            fut.cancel()
            raise TimeoutError(f"cluster operation did not finish within {limit} s") from None

    def call(self, fn: Callable[[], _T], timeout_s: float | None = None) -> _T:
        """Call a plain function on the cluster's loop (to read broker state safely)."""

        async def wrap() -> _T:
            return fn()

        return self.run(wrap(), timeout_s)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> DevCluster:
        if self._loop is not None:
            return self
        loop = _new_loop()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(loop, ready), name="wherry-dev-cluster", daemon=True
        )
        self._thread.start()
        ready.wait(10.0)
        self._loop = loop
        try:
            self.run(self.cluster.start())
        except BaseException:
            self._stop_loop()
            raise
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            self.run(self.cluster.stop())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(self.timeout_s)
            self._thread = None

    # --- brokers ---------------------------------------------------------------------------
    def stop_broker(self, broker_id: int, *, controlled: bool = True) -> None:
        """Stop a broker: a controlled shutdown unless ``controlled=False`` (see
        `AsyncDevCluster.stop_broker`)."""
        self.run(self.cluster.stop_broker(broker_id, controlled=controlled))

    def start_broker(self, broker_id: int) -> None:
        self.run(self.cluster.start_broker(broker_id))

    def expire_session(self, broker_id: int) -> bool:
        return self.call(lambda: self.cluster.expire_session(broker_id))

    def broker(self, broker_id: int) -> Broker:
        """The running broker object (read its state through `call`)."""
        return self.cluster.brokers[broker_id]

    @property
    def broker_ids(self) -> list[int]:
        return list(self.cluster.broker_ids)

    @property
    def running(self) -> list[int]:
        return self.call(lambda: sorted(self.cluster.brokers))

    def address(self, broker_id: int) -> str:
        return self.cluster.address(broker_id)

    def http_url(self, broker_id: int) -> str | None:
        return self.call(lambda: self.cluster.http_url(broker_id))

    @property
    def bootstrap(self) -> str:
        return self.call(lambda: self.cluster.bootstrap)

    @property
    def controller_id(self) -> int | None:
        return self.call(lambda: self.cluster.controller_id)

    # --- waiting ---------------------------------------------------------------------------
    def wait_for_controller(self, timeout_s: float = 10.0) -> int:
        return self.run(self.cluster.wait_for_controller(timeout_s), timeout_s + 5)

    def metadata(self, broker_id: int, topics: list[str] | None = None) -> ClusterView:
        """Broker ``broker_id``'s answer to a Metadata request (over the wire)."""
        return fetch_metadata(self.address(broker_id), topics)

    def wait_for_topic(self, topic: str, partitions: int, timeout_s: float = 15.0) -> None:
        """Until every running broker reports ``partitions`` partitions of ``topic``, each with
        a live leader."""

        def ready() -> bool:
            for b in self.running:
                view = self.metadata(b, [topic])
                parts = view.partitions(topic)
                if len(parts) != partitions:
                    return False
                if any(p.leader not in view.brokers for p in parts.values()):
                    return False
            return True

        if not wait_until(ready, timeout_s):
            raise TimeoutError(f"topic {topic} not ready on every broker after {timeout_s} s")


# --------------------------------------------------------------------------- processes


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """SIGTERM, wait; SIGKILL when it does not exit in time. Returns the exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10.0)
    return proc.returncode if proc.returncode is not None else -9


def _kill_all(procs: dict[int, subprocess.Popen[bytes]]) -> None:
    for proc in list(procs.values()):
        if proc.poll() is None:
            with contextlib.suppress(Exception):
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10.0)


class ZkCluster(Startable):
    """``brokers`` ``wherry server --zookeeper`` processes sharing one real ZooKeeper.

    The ZooKeeper is started here (``tick_time_ms``) unless one is passed in; the brokers use
    the chroot ``chroot`` and ``zookeeper.session.timeout.ms = session_timeout_ms``. Each
    broker's output goes to ``<dir>/broker-<id>.out``. Every wait is bounded; processes still
    running when this object is collected or the interpreter exits are killed.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        session_timeout_ms: int = 4_000,
        tick_time_ms: int = 100,
        chroot: str = "/wherry",
        zookeeper: ZooKeeperServer | None = None,
        host: str = "127.0.0.1",
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 20.0,
        listeners: Sequence[str] = ("PLAINTEXT",),
        broker_overrides: Mapping[int, Mapping[str, str]] | None = None,
        http: bool = False,
        log_dirs: Mapping[int, Sequence[Path]] | None = None,
    ) -> None:
        """`listeners` names each broker's listeners (one free port each, the first is
        `address(b)`); their security comes from `overrides` (listener.security.protocol.map,
        ssl.*, sasl.*, ...). `broker_overrides[b]` goes over `overrides` for broker b only;
        it is a mutable attribute, read at each (re)start, so a test can restart a broker with
        other settings (a wrong password, ...). `http` gives each broker an HTTP listener on a
        free port (`http_url(b)`); without it the brokers run with none (`http.listeners=`).
        `log_dirs[b]` gives broker b several log dirs (default: ``<directory>/broker-<b>``)."""
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.listeners = tuple(listeners)
        self.directory = Path(directory)
        self.broker_ids = list(range(brokers))
        self.overrides = _check_overrides(overrides or {})
        self.broker_overrides: dict[int, dict[str, str]] = {
            b: _check_overrides(o) for b, o in (broker_overrides or {}).items()
        }
        self.session_timeout_ms = session_timeout_ms
        self.chroot = chroot
        self.host = host
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeperServer(
            self.directory / "zookeeper", tick_time_ms=tick_time_ms
        )
        self.listener_ports = {
            b: {name: find_free_port(host) for name in self.listeners} for b in self.broker_ids
        }
        self.ports = {b: ports[self.listeners[0]] for b, ports in self.listener_ports.items()}
        self.http_ports = {b: find_free_port(host) for b in self.broker_ids} if http else {}
        self.log_dirs = {b: list(d) for b, d in (log_dirs or {}).items()}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._starts: dict[int, int] = {}  # output offset where the current run began
        self._zk: KazooClient | None = None
        self._finalizer = weakref.finalize(self, _kill_all, self.procs)

    # --- addresses -------------------------------------------------------------------------
    @property
    def connect_string(self) -> str:
        return f"{self.zookeeper.connect_string}{self.chroot}"

    def address(self, broker_id: int, listener: str | None = None) -> str:
        if listener is None:
            return f"{self.host}:{self.ports[broker_id]}"
        return f"{self.host}:{self.listener_ports[broker_id][listener]}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(b) for b in self.broker_ids)

    def http_url(self, broker_id: int) -> str | None:
        port = self.http_ports.get(broker_id)
        return None if port is None else f"http://{self.host}:{port}"

    def bootstrap_of(self, listener: str) -> str:
        return ",".join(self.address(b, listener) for b in self.broker_ids)

    def output_path(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}.out"

    def output(self, broker_id: int) -> str:
        try:
            return self.output_path(broker_id).read_text(errors="replace")
        except OSError:
            return ""

    def pid(self, broker_id: int) -> int:
        return self.procs[broker_id].pid

    def is_running(self, broker_id: int) -> bool:
        proc = self.procs.get(broker_id)
        return proc is not None and proc.poll() is None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> ZkCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._own_zookeeper:
            self.zookeeper.start()
        try:
            for b in self.broker_ids:
                self.start_broker(b, wait=False)
            for b in self.broker_ids:
                self._wait_first_start(b)
            self.wait_metadata_settled()
        except BaseException:
            self.stop()
            raise
        return self

    def plaintext_listener(self) -> str | None:
        """The first listener speaking PLAINTEXT (by `listener.security.protocol.map`, else
        by its name), or None."""
        mapping = dict(
            item.split(":", 1)
            for item in self.overrides.get("listener.security.protocol.map", "").split(",")
            if ":" in item
        )
        for name in self.listeners:
            if mapping.get(name, name).upper() == "PLAINTEXT":
                return name
        return None

    def wait_metadata_settled(self, timeout_s: float | None = None) -> None:
        """Until every running broker, asked on its own, names a controller and every running
        broker (bounded by ``start_timeout_s``). A broker that has not had the controller's
        first UpdateMetadata answers controller -1, and librdkafka's admin client then never
        asks again: a CreateTopics right after the start would wait out its whole timeout.
        Only over a PLAINTEXT listener; a cluster without one is not waited for here."""
        listener = self.plaintext_listener()
        if listener is None:
            return
        running = {b for b in self.broker_ids if self.is_running(b)}
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        for b in sorted(running):
            last = "no answer"
            while True:
                try:
                    view = fetch_metadata(self.address(b, listener), [], timeout_s=2.0)
                    if view.controller_id >= 0 and running <= set(view.brokers):
                        break
                    last = f"controller {view.controller_id}, brokers {sorted(view.brokers)}"
                except OSError as e:
                    last = str(e)
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"broker {b}'s metadata did not settle ({last}) after "
                        f"{self.start_timeout_s} s:\n" + self.output(b)[-4000:]
                    )
                time.sleep(0.05)

    def _wait_first_start(self, broker_id: int, attempts: int = 3) -> None:
        """Wait for a first start; if another process took the free port picked for the
        broker meanwhile, pick another (a restart keeps its port, clients know it)."""
        for attempt in range(attempts):
            try:
                self.wait_ready(broker_id)
                return
            except RuntimeError as e:
                # `wherry server` says "listener ... port N is already in use"
                if attempt == attempts - 1 or "already in use" not in str(e).lower():
                    raise
            self.procs.pop(broker_id, None)
            self.listener_ports[broker_id] = {n: find_free_port(self.host) for n in self.listeners}
            self.ports[broker_id] = self.listener_ports[broker_id][self.listeners[0]]
            self.start_broker(broker_id, wait=False)

    def command(self, broker_id: int) -> list[str]:
        b = broker_id
        cmd = [
            sys.executable,
            "-m",
            "wherry",
            "server",
            "--zookeeper",
            self.connect_string,
            "--broker-id",
            str(broker_id),
            "--listeners",
            ",".join(f"{n}://{self.address(broker_id, n)}" for n in self.listeners),
            "--log-dirs",
            ",".join(map(str, self.log_dirs.get(broker_id, [self.directory / f"broker-{b}"]))),
            "--override",
            f"zookeeper.session.timeout.ms={self.session_timeout_ms}",
        ]
        own = _check_overrides(self.broker_overrides.get(broker_id, {}))
        http = self.http_url(broker_id) or ""
        for k, v in {**HARNESS_DEFAULTS, "http.listeners": http, **self.overrides, **own}.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start_broker(self, broker_id: int, *, wait: bool = True) -> None:
        if self.is_running(broker_id):
            raise RuntimeError(f"broker {broker_id} is running")
        path = self.output_path(broker_id)
        with open(path, "ab") as out:
            self._starts[broker_id] = out.tell()
            self.procs[broker_id] = subprocess.Popen(
                self.command(broker_id),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # a terminal's Ctrl-C goes to the test runner only
            )
        if wait:
            self.wait_ready(broker_id)

    def wait_ready(self, broker_id: int) -> None:
        """Until the broker printed its "ready" line (bounded by ``start_timeout_s``)."""
        proc = self.procs[broker_id]
        marker = f"wherry broker {broker_id} ready on"
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if marker in self.output(broker_id)[self._starts.get(broker_id, 0) :]:
                return
            if proc.poll() is not None:
                raise RuntimeError(
                    f"broker {broker_id} exited with {proc.returncode} during startup:\n"
                    + self.output(broker_id)[-4000:]
                )
            if time.monotonic() >= deadline:
                stop_process(proc, 5.0)
                raise TimeoutError(
                    f"broker {broker_id} not ready after {self.start_timeout_s} s:\n"
                    + self.output(broker_id)[-4000:]
                )
            time.sleep(0.05)

    def stop_broker(self, broker_id: int) -> int:
        """SIGTERM (a controlled, clean shutdown), SIGKILL if it takes longer than
        ``stop_timeout_s``; `kill` is the hard stop."""
        proc = self.procs.pop(broker_id, None)
        return 0 if proc is None else stop_process(proc, self.stop_timeout_s)

    def kill(self, broker_id: int) -> None:
        """SIGKILL a broker (a crash): its session lives on until ZooKeeper expires it."""
        proc = self.procs.pop(broker_id, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10.0)

    def restart(self, broker_id: int) -> None:
        self.stop_broker(broker_id)
        self.start_broker(broker_id)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP a broker (a long pause: its session expires if it lasts long enough)."""
        os.kill(self.procs[broker_id].pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        os.kill(self.procs[broker_id].pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop every broker (SIGTERM to all, then wait for each), then ZooKeeper."""
        procs = [self.procs.pop(b) for b in list(self.procs)]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            stop_process(proc, self.stop_timeout_s)
        if self._zk is not None:
            zk, self._zk = self._zk, None
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()
        if self._own_zookeeper:
            self.zookeeper.close()

    # --- ZooKeeper's view ------------------------------------------------------------------
    def zk(self) -> KazooClient:
        """A kazoo client on the cluster's chroot (started on first use, closed by `stop`)."""
        if self._zk is None:
            from kazoo.client import KazooClient

            client = KazooClient(hosts=self.connect_string, timeout=10.0)
            client.start(timeout=10.0)
            self._zk = client
        return self._zk

    def controller(self) -> int | None:
        """The broker id in ``/controller`` (None when there is no controller)."""
        from kazoo.exceptions import NoNodeError

        from wherry.coordination.paths import CONTROLLER, ControllerInfo

        try:
            data, _ = self.zk().get(CONTROLLER)
        except NoNodeError:
            return None
        return ControllerInfo.from_json(data).broker_id

    def controller_epoch(self) -> int:
        from wherry.coordination.paths import CONTROLLER_EPOCH, decode_controller_epoch

        data, _ = self.zk().get(CONTROLLER_EPOCH)
        return decode_controller_epoch(data)

    def registered_brokers(self) -> set[int]:
        from wherry.coordination.paths import BROKER_IDS

        return {int(b) for b in self.zk().get_children(BROKER_IDS)}

    def broker_epoch(self, broker_id: int) -> int | None:
        """The czxid of the broker's registration (Kafka's broker epoch); None if absent."""
        from wherry.coordination.paths import broker_path

        stat = self.zk().exists(broker_path(broker_id))
        return None if stat is None else int(stat.czxid)

    def create_topic(self, topic: str, assignment: Mapping[int, list[int]]) -> None:
        """Write a topic straight into ZooKeeper (as ``kafka-topics --zookeeper`` did): its
        (empty) config, then its assignment; the controller brings it online."""
        import uuid

        from wherry.coordination.paths import (
            TopicAssignment,
            encode_config,
            topic_config_path,
            topic_path,
        )

        zk = self.zk()
        zk.create(topic_config_path(topic), encode_config({}), makepath=True)
        zk.create(
            topic_path(topic),
            TopicAssignment(uuid.uuid4(), {p: list(r) for p, r in assignment.items()}).to_json(),
            makepath=True,
        )

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        from kazoo.exceptions import NoNodeError

        from wherry.coordination.paths import PartitionState, partition_state_path

        try:
            data, _ = self.zk().get(partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return PartitionState.from_json(data)

    def metadata(self, broker_id: int, topics: list[str] | None = None) -> ClusterView:
        return fetch_metadata(self.address(broker_id), topics)
