"""`wherry server` without click: the command's options (declared here once; `main.py` builds
the click command from them), a parser of them for the console entry's fast path (a start
that does not import click), the broker's config from them, and serving until a signal.

The fast path (`run_server_fast`) takes only what it understands exactly: any other argument
(`--help`, an unknown option, a value click would refuse) or a config error hands the command
line back to click, which parses it again and answers as it always did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from wherry.common.record import frozen_record

if TYPE_CHECKING:
    from wherry.server.config import BrokerConfig

T = TypeVar("T")

# The state-change logger's name (`runtime.state_change_log.LOGGER_NAME`; that module is
# imported once the listeners are bound).
STATE_CHANGE_LOGGER = "wherry.state_change"


@frozen_record
class Option:
    """A `--flag VALUE` option: `kind` is "str", "int" or "choice" (one of `choices`)."""

    flag: str
    dest: str
    help: str
    kind: str = "str"
    choices: tuple[str, ...] = ()
    default: str | None = None
    multiple: bool = False
    metavar: str | None = None


LOG_OPTIONS: tuple[Option, ...] = (
    Option(
        "--log-format",
        "log_format",
        "Console log lines: text, or one JSON object per line.",
        kind="choice",
        choices=("text", "json"),
        default="text",
    ),
    Option(
        "--log-level",
        "log_level",
        "Console log level: TRACE, DEBUG, INFO, WARN, ERROR, FATAL or OFF (any case).",
        default="INFO",
    ),
)

# Log4j's level names (and Python's WARNING, CRITICAL) → Python's levels.
LOG_LEVELS: dict[str, int] = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}


class LogLevelError(ValueError):
    """A `--log-level` that names no level."""


def log_level_number(level: str) -> int:
    """The Python level of a `--log-level` value; LogLevelError (one line) for any other."""
    try:
        return LOG_LEVELS[level.strip().upper()]
    except KeyError:
        raise LogLevelError(
            f"Invalid value {level} for --log-level: expected one of TRACE, DEBUG, INFO, WARN, "
            "ERROR, FATAL, OFF"
        ) from None

# `wherry server [PROPERTIES] OPTIONS`, in the order `--help` lists them.
SERVER_OPTIONS: tuple[Option, ...] = (
    Option("--broker-id", "broker_id", "broker.id", kind="int"),
    Option("--listeners", "listeners", "listeners, e.g. PLAINTEXT://127.0.0.1:9092"),
    Option("--advertised-listeners", "advertised_listeners", "advertised.listeners"),
    Option("--log-dirs", "log_dirs", "log.dirs (comma-separated)"),
    Option(
        "--zookeeper",
        "zookeeper",
        "zookeeper.connect: use this ZooKeeper instead of the embedded store.",
        metavar="HOST:PORT[/CHROOT]",
    ),
    Option(
        "--override",
        "overrides",
        "Any broker config, Kafka name (repeatable).",
        multiple=True,
        metavar="KEY=VALUE",
    ),
    *LOG_OPTIONS,
)

# The server options that set a broker config.
_CONFIG_KEYS = (
    ("broker.id", "broker_id"),
    ("listeners", "listeners"),
    ("advertised.listeners", "advertised_listeners"),
    ("log.dirs", "log_dirs"),
    ("zookeeper.connect", "zookeeper"),
)

DEFAULT_HTTP_PORT = 9644


class OverrideError(ValueError):
    """An `--override` that is not KEY=VALUE."""


def parse_server_args(args: Sequence[str]) -> tuple[Path | None, dict[str, Any]] | None:
    """`wherry server`'s arguments (after the command name) as the properties file and the
    options' values, exactly as click would give them; None for anything else (click then
    parses and answers: help, usage errors)."""
    by_flag = {o.flag: o for o in SERVER_OPTIONS}
    values: dict[str, Any] = {
        o.dest: () if o.multiple else o.default for o in SERVER_OPTIONS
    }
    properties: Path | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            if properties is not None:  # one properties file; whether it can be read, the
                return None  # config's reading says
            properties = Path(arg)
            continue
        flag, eq, value = arg.partition("=")
        option = by_flag.get(flag)
        if option is None:
            return None
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        parsed: Any = value
        if option.kind == "int":
            try:
                parsed = int(value)  # as click.INT converts
            except ValueError:
                return None
        elif option.kind == "choice" and value not in option.choices:
            return None
        if option.multiple:
            values[option.dest] = (*values[option.dest], parsed)
        else:
            values[option.dest] = parsed
    return properties, values


def parse_overrides(overrides: Sequence[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise OverrideError(f"{item!r} is not KEY=VALUE")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return props


def parse_broker_overrides(items: Sequence[str]) -> dict[int, dict[str, str]]:
    """`ID:KEY=VALUE` items (`1:broker.rack=b`): broker id → its own settings."""
    out: dict[int, dict[str, str]] = {}
    for item in items:
        head, sep, rest = item.partition(":")
        if not sep or not head.strip().isdigit():
            raise OverrideError(f"{item!r} is not ID:KEY=VALUE")
        out.setdefault(int(head), {}).update(parse_overrides([rest]))
    return out


def default_http_listener(kafka_port: int) -> str:
    """`wherry server`'s HTTP listener when `http.listeners` is not set: 127.0.0.1:9644, or a
    port the OS chooses when the Kafka listener's is chosen so too (port 0: tests, scripts)."""
    return f"http://127.0.0.1:{DEFAULT_HTTP_PORT if kafka_port else 0}"


def server_config(properties: Path | None, values: dict[str, Any]) -> BrokerConfig:
    """The broker's config from `wherry server`'s arguments. Raises OverrideError,
    LogLevelError, BrokerConfigError or SecurityConfigError."""
    from wherry.observability.endpoints import parse_http_listeners
    from wherry.server.config import load_config
    from wherry.server.listener_security import broker_security

    log_level_number(values["log_level"])
    props = parse_overrides(values["overrides"])
    for key, dest in _CONFIG_KEYS:
        if values[dest] is not None:
            props[key] = str(values[dest])
    cfg = load_config(properties, props)
    if "http.listeners" not in cfg.raw:  # on by default; `http.listeners=` turns it off
        # as if given last (the file and the other settings are not read and checked again)
        http = default_http_listener(cfg.listeners[0].port)
        cfg = dataclasses.replace(
            cfg, http_listeners=parse_http_listeners(http), raw={**cfg.raw, "http.listeners": http}
        )
    broker_security(cfg.raw, cfg.listeners, cfg.advertised)  # key stores readable?
    return cfg


def serve_server(cfg: BrokerConfig, log_level: str, log_format: str) -> int:
    """Run a broker until SIGTERM or SIGINT; the exit status."""
    from wherry.server.config_keys import warn_unused

    setup_logging(log_level, log_format)
    warn_unused(cfg.raw, logging.getLogger("wherry.server.config"))
    return run(_serve(cfg))


def run_server_fast(args: Sequence[str]) -> None:
    """The console entry's `wherry server`: serves and exits, or returns (having done nothing
    but read the config) when click must handle the command line."""
    from wherry.server.config import BrokerConfigError
    from wherry.server.listener_security import SecurityConfigError

    parsed = parse_server_args(args)
    if parsed is None:
        return
    properties, values = parsed
    try:
        cfg = server_config(properties, values)
    except (OverrideError, LogLevelError, BrokerConfigError, SecurityConfigError):
        return  # click reports it
    sys.exit(serve_server(cfg, values["log_level"], values["log_format"]))


class _ConsoleFilter(logging.Filter):
    """State-change lines belong in each broker's state-change.log; the console shows them only
    when it shows DEBUG."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return self.level <= logging.DEBUG or not record.name.startswith(STATE_CHANGE_LOGGER)


def setup_logging(level: str, log_format: str = "text") -> None:
    # The state-change log gets its own file from each broker (Broker.start).
    numeric = log_level_number(level)
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from wherry.cli.json_log import JsonFormatter

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


GIL_SWITCH_INTERVAL_S = 0.0005  # see serve_until_signal


def run(main_coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(main_coro)
    return uvloop.run(main_coro)


async def serve_until_signal(
    start: Callable[[], Awaitable[T]],
    announce: Callable[[T], None],
    stop: Callable[[], Awaitable[None]],
    describe_error: Callable[[Exception], str] | None = None,
) -> int:
    """Start, announce what `start` returned, and stop on SIGTERM or SIGINT: exit status 0.
    A failed start is stopped: exit status 1, after one `Error: <describe_error(e)>` line on
    stderr (its traceback logged only when DEBUG is on), or without `describe_error` logged
    with its traceback."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        started = await start()
    except Exception as e:
        logger = logging.getLogger("wherry")
        if describe_error is None or logger.isEnabledFor(logging.DEBUG):
            logger.exception("startup failed: %s", e)
        try:
            await stop()
        except Exception as stop_error:  # what was started is gone with the process anyway
            logger.debug("stopping after the failed start failed too: %s", stop_error,
                         exc_info=True)
        if describe_error is not None:
            print(f"Error: {describe_error(e)}", file=sys.stderr, flush=True)
        return 1
    finally:
        if not gc.isenabled():  # the console entry turned it off for the start
            gc.freeze()
            gc.enable()
    # The event loop answers requests; the other threads (the log cleaner, flushes, retention)
    # do background work. Python hands the GIL over every 5 ms by default, so a request that
    # arrives while a background thread runs Python could wait that long, twice or more:
    # 0.5 ms bounds that wait (bench/sustained.py: p99 at 1,000 records/s with the cleaner
    # running, 11-19 ms -> 7-8 ms).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    announce(started)
    await stopping.wait()
    await stop()
    return 0


async def _serve(cfg: BrokerConfig) -> int:
    from wherry.server.broker import Broker

    broker = Broker(cfg)

    def announce(_: None) -> None:
        bound = zip(cfg.listeners, broker.bound_ports, strict=True)
        where = f" (ZooKeeper {cfg.zookeeper_connect})" if cfg.zookeeper_connect else ""
        print(
            f"wherry broker {cfg.broker_id} ready on "
            f"{','.join(f'{ep.host}:{port}' for ep, port in bound)}{where}",
            flush=True,
        )
        if broker.http is not None and broker.http.urls:
            urls = ", ".join(broker.http.urls)
            print(f"wherry broker {cfg.broker_id} metrics and console on {urls}", flush=True)

    def describe(e: Exception) -> str:
        from wherry.cli.start_errors import describe_start_error

        return describe_start_error(e, cfg, len(broker.bound_ports))

    return await serve_until_signal(broker.start, announce, broker.stop, describe)
