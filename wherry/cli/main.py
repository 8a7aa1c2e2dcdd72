"""The `wherry` command."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import importlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from wherry.runtime.state_change_log import LOGGER_NAME as STATE_CHANGE_LOGGER
from wherry.server.config import BrokerConfigError, load_config
from wherry.server.config_keys import warn_unused

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class _ConsoleFilter(logging.Filter):
    """State-change lines belong in each broker's state-change.log; the console shows them only
    when it shows DEBUG."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return self.level <= logging.DEBUG or not record.name.startswith(STATE_CHANGE_LOGGER)


class JsonFormatter(logging.Formatter):
    """`--log-format json`: one JSON object per line: time (ISO 8601 UTC, ms), level, logger,
    message, and the exception's text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        when = dt.datetime.fromtimestamp(record.created, dt.UTC)
        out: dict[str, str] = {
            "time": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


def _setup_logging(level: str, log_format: str = "text") -> None:
    # The state-change log (SPEC H12) gets its own file from each broker (Broker.start).
    numeric = getattr(logging, level.upper(), logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
        )
    handler.addFilter(_ConsoleFilter(numeric))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)


def _log_options(f: F) -> F:
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Console log lines: text, or one JSON object per line.",
    )(f)
    return click.option("--log-level", default="INFO", show_default=True)(f)


def _overrides_option(help_text: str) -> Callable[[F], F]:
    """`--override KEY=VALUE` (repeatable), passed as `overrides`."""
    return click.option(
        "--override", "overrides", multiple=True, metavar="KEY=VALUE", help=help_text
    )


class _LazyGroup(click.Group):
    """A group whose tool commands (`TOOLS`) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *TOOLS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in TOOLS:
            module, _, attr = TOOLS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return command


@click.group(cls=_LazyGroup)
@click.version_option(package_name="wherry")
def main() -> None:
    """wherry: a Kafka-compatible commit-log broker."""


@main.command()
@click.argument(
    "properties", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--broker-id", type=int, help="broker.id")
@click.option("--listeners", help="listeners, e.g. PLAINTEXT://127.0.0.1:9092")
@click.option("--advertised-listeners", help="advertised.listeners")
@click.option("--log-dirs", help="log.dirs (comma-separated)")
@click.option(
    "--zookeeper",
    metavar="HOST:PORT[/CHROOT]",
    help="zookeeper.connect: use this ZooKeeper instead of the embedded store.",
)
@_overrides_option("Any broker config, Kafka name (repeatable).")
@_log_options
def server(
    properties: Path | None,
    broker_id: int | None,
    listeners: str | None,
    advertised_listeners: str | None,
    log_dirs: str | None,
    zookeeper: str | None,
    overrides: tuple[str, ...],
    log_level: str,
    log_format: str,
) -> None:
    """Run a broker (defaults: id 0, 127.0.0.1:9092, data in ./wherry-data).

    With --zookeeper (zookeeper.connect) brokers of many processes or machines form one
    cluster through ZooKeeper; give each its own --broker-id."""
    from wherry.server.listener_security import SecurityConfigError, broker_security

    props = _parse_overrides(overrides)
    for key, value in (
        ("broker.id", broker_id),
        ("listeners", listeners),
        ("advertised.listeners", advertised_listeners),
        ("log.dirs", log_dirs),
        ("zookeeper.connect", zookeeper),
    ):
        if value is not None:
            props[key] = str(value)
    try:
        cfg = load_config(properties, props)
        if "http.listeners" not in cfg.raw:  # on by default; `http.listeners=` turns it off
            props["http.listeners"] = default_http_listener(cfg.listeners[0].port)
            cfg = load_config(properties, props)
        broker_security(cfg.raw, cfg.listeners, cfg.advertised)  # key stores readable?
    except (BrokerConfigError, SecurityConfigError) as e:
        raise click.ClickException(str(e)) from e
    _setup_logging(log_level, log_format)
    warn_unused(cfg.raw, logging.getLogger("wherry.server.config"))
    sys.exit(_run(_serve(cfg)))


DEFAULT_HTTP_PORT = 9644


def default_http_listener(kafka_port: int) -> str:
    """`wherry server`'s HTTP listener when `http.listeners` is not set: 127.0.0.1:9644, or a
    port the OS chooses when the Kafka listener's is chosen so too (port 0: tests, scripts)."""
    return f"http://127.0.0.1:{DEFAULT_HTTP_PORT if kafka_port else 0}"


def dev_defaults(brokers: int) -> dict[str, str]:
    """What `wherry dev --brokers N` sets unless the overrides or the properties file do:
    internal topics replicated min(3, N) times (Kafka's code default is 3; the quickstart's 1
    suits one broker only)."""
    rf = str(min(3, brokers))
    return {
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": str(min(2, brokers)),
    }


def _parse_overrides(overrides: tuple[str, ...]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--override")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return props


def _run(main_coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(main_coro)
    return uvloop.run(main_coro)


async def _serve_until_signal(
    start: Callable[[], Awaitable[T]],
    announce: Callable[[T], None],
    stop: Callable[[], Awaitable[None]],
) -> int:
    """Start, announce what `start` returned, and stop on SIGTERM or SIGINT: exit status 0;
    a failed start is logged and stopped: exit status 1."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        started = await start()
    except Exception as e:
        logging.getLogger("wherry").exception("startup failed: %s", e)
        await stop()
        return 1
    finally:
        if not gc.isenabled():  # the console entry turned it off for the start
            gc.freeze()
            gc.enable()
    announce(started)
    await stopping.wait()
    await stop()
    return 0


async def _serve(cfg: object) -> int:
    from wherry.server.broker import Broker
    from wherry.server.config import BrokerConfig

    assert isinstance(cfg, BrokerConfig)
    broker = Broker(cfg)

    def announce(_: None) -> None:
        bound = zip(cfg.listeners, broker.bound_ports, strict=True)
        where = f" (ZooKeeper {cfg.zookeeper_connect})" if cfg.zookeeper_connect else ""
        print(
            f"wherry broker {cfg.broker_id} ready on "
            f"{','.join(f'{ep.host}:{port}' for ep, port in bound)}{where}",
            flush=True,
        )
        if broker.http is not None:
            urls = ", ".join(broker.http.urls)
            print(f"wherry broker {cfg.broker_id} metrics and console on {urls}", flush=True)

    return await _serve_until_signal(broker.start, announce, broker.stop)


@main.command()
@click.argument(
    "properties", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--brokers",
    default=3,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Number of brokers (ids 0..N-1).",
)
@click.option(
    "--base-port",
    default=9092,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Broker N listens on BASE_PORT+N (0: ports chosen by the OS).",
)
@click.option(
    "--http-base-port",
    type=click.IntRange(0, 65535),
    help="Broker N's HTTP listener (metrics, console) on HTTP_BASE_PORT+N "
    "(0: ports chosen by the OS). Default: 9644, or 0 with --base-port 0.",
)
@click.option("--no-http", is_flag=True, help="No HTTP listeners.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listener host.")
@click.option(
    "--dir",
    "directory",
    default="wherry-dev",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Data: <DIR>/broker-N per broker, the shared store in <DIR>/__meta.",
)
@_overrides_option("Any broker config, Kafka name, for every broker (repeatable).")
@_log_options
def dev(
    properties: Path | None,
    brokers: int,
    base_port: int,
    http_base_port: int | None,
    no_http: bool,
    host: str,
    directory: Path,
    overrides: tuple[str, ...],
    log_level: str,
    log_format: str,
) -> None:
    """Run a cluster of several brokers in one process (embedded store, no ZooKeeper).

    Every broker runs for controller (one wins); Ctrl-C or SIGTERM stops them all."""
    from wherry.server.config import BrokerConfigError, read_properties
    from wherry.testing.cluster import AsyncDevCluster

    if base_port and base_port + brokers - 1 > 65535:
        raise click.BadParameter("ports beyond 65535", param_hint="--base-port")
    if http_base_port is None:
        http_base_port = DEFAULT_HTTP_PORT if base_port else 0
    if http_base_port and http_base_port + brokers - 1 > 65535:
        raise click.BadParameter("ports beyond 65535", param_hint="--http-base-port")
    props = _parse_overrides(overrides)
    try:
        given = read_properties(properties) if properties is not None else {}
        for key, value in dev_defaults(brokers).items():
            if key not in props and key not in given:
                props[key] = value
        cluster = AsyncDevCluster(
            directory,
            brokers=brokers,
            base_port=base_port,
            host=host,
            overrides=props,
            properties_file=properties,
            http_base_port=None if no_http else http_base_port,
        )
    except (BrokerConfigError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    _setup_logging(log_level, log_format)
    warn_unused(cluster.config_for(0).raw, logging.getLogger("wherry.server.config"))
    sys.exit(_run(_serve_dev(cluster)))


async def _serve_dev(cluster: object) -> int:
    from wherry.testing.cluster import AsyncDevCluster

    assert isinstance(cluster, AsyncDevCluster)

    async def start() -> int:
        await cluster.start()
        return await cluster.wait_for_controller()

    def announce(controller: int) -> None:
        for b in cluster.broker_ids:
            role = " (controller)" if b == controller else ""
            print(f"wherry broker {b} ready on {cluster.address(b)}{role}", flush=True)
        for b in cluster.broker_ids:
            if (url := cluster.http_url(b)) is not None:
                print(f"wherry broker {b} metrics and console on {url}", flush=True)
        print(
            f"wherry dev cluster ready: {len(cluster.broker_ids)} brokers, "
            f"bootstrap servers {cluster.bootstrap}, controller {controller}",
            flush=True,
        )

    return await _serve_until_signal(start, announce, cluster.stop)


# The tools' commands: name → "module:attribute", imported when the command is run or listed
# in --help, so `wherry server` imports none of them (nor confluent-kafka).
TOOLS: dict[str, str] = {
    "topics": "wherry.cli.topics:topics",
    "groups": "wherry.cli.groups:groups",
    "produce": "wherry.cli.console:produce",
    "consume": "wherry.cli.console:consume",
    "reassign": "wherry.cli.reassign:reassign",
    "elect": "wherry.cli.elect:elect",
    "configs": "wherry.cli.configs:configs",
    "acls": "wherry.cli.acls:acls",
    "verify-replicas": "wherry.cli.verify_replicas:verify_replicas",
    "dump-log": "wherry.cli.dump_log:dump_log",
    "log-dirs": "wherry.cli.log_dirs:log_dirs",
    "state-change-log": "wherry.cli.state_change_log:state_change_log",
    "users": "wherry.cli.users:users",
}
