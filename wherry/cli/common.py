"""What the `wherry` client tools share: errors and how a command reports them, the
connection options, properties, Kafka error text, client construction and the admin client."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, ClassVar, NoReturn, ParamSpec, TypeVar

import click
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from wherry.server.config import BrokerConfigError, parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_MS = 15_000
"""The admin tools' per-request timeout."""

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")


class CommandError(Exception):
    """A failure reported to the user as one line, without a traceback."""


class ErrorsReported(Exception):
    """The errors were printed already; the command exits with status 1."""


# --------------------------------------------------------------------------------------------
# How a command ends on an error


def fail(prefix: str, message: str) -> NoReturn:
    """Print `prefix + message` to stderr and exit with status 1."""
    click.echo(f"{prefix}{message}", err=True)
    sys.exit(1)


def error_text(exc: CommandError | KafkaException) -> str:
    """The line for a failure: a CommandError's own message, else librdkafka's."""
    return str(exc) if isinstance(exc, CommandError) else kafka_error_message(exc)


def exits_on_error(
    prefix: str, describe: Callable[[CommandError | KafkaException], str] = error_text
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A command decorator: a CommandError or KafkaException becomes one line on stderr,
    `prefix + describe(error)`, and exit status 1; ErrorsReported is exit status 1 alone."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except (CommandError, KafkaException) as e:
                fail(prefix, describe(e))
            except ErrorsReported:
                sys.exit(1)

        return wrapper

    return decorate


# --------------------------------------------------------------------------------------------
# Options


def bootstrap_option(*aliases: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`--bootstrap-server HOST:PORT[,HOST:PORT...]` (also under a tool's older spellings,
    `aliases`), every client tool's, passed as `bootstrap_server`."""
    return click.option(
        "--bootstrap-server", *aliases, "bootstrap_server", default=DEFAULT_BOOTSTRAP,
        show_default=True, metavar="HOST:PORT", help="The Kafka server(s) to connect to.",
    )


def command_config_option(help_text: str, *aliases: str
                          ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`--command-config FILE` (also under `aliases`): a Java `.properties` file of client
    settings, passed as `command_config`."""
    return click.option(
        "--command-config", *aliases, "command_config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path), help=help_text,
    )


def admin_options(timeout_help: str, *timeout_aliases: str
                  ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The admin tools' `--bootstrap-server`, `--command-config` and `--timeout-ms` (also
    under `timeout_aliases`), passed as `bootstrap_server`, `command_config`, `timeout_ms`."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        fn = click.option(
            "--timeout-ms", *timeout_aliases, "timeout_ms", type=click.IntRange(min=100),
            default=DEFAULT_TIMEOUT_MS, show_default=True, help=timeout_help,
        )(fn)
        fn = command_config_option("Property file with configs passed to the admin client.")(fn)
        return bootstrap_option()(fn)

    return decorate


# --------------------------------------------------------------------------------------------
# Properties and Kafka errors


def load_properties_file(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        return parse_properties(path.read_bytes().decode("latin-1"))  # as Java reads it
    except OSError as e:
        raise CommandError(f"Cannot read properties file {path}: {e.strerror or e}") from e
    except BrokerConfigError as e:
        raise CommandError(f"Properties file {path}: {e}") from e


def parse_kv(items: Iterable[str], what: str) -> dict[str, str]:
    """`k=v` items (whitespace around `=` ignored) into a dict; a bad item raises CommandError."""
    out: dict[str, str] = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item.strip(), maxsplit=1)
        if len(parts) != 2 or not parts[0]:
            raise CommandError(
                f'Invalid {what} {item!r}: all {what}s must be in the format "key=val".'
            )
        out[parts[0].strip()] = parts[1].strip()
    return out


def kafka_error_message(exc: BaseException) -> str:
    """The human message inside a KafkaException (or any exception)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return str(err.str())
    return str(exc) or type(exc).__name__


def kafka_error_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return int(exc.args[0].code())
    return None


TRANSIENT_ERRORS = frozenset(
    {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
)


def new_client(factory: Callable[[dict[str, Any]], C], conf: dict[str, Any], what: str) -> C:
    """`factory(conf)` (a librdkafka client); a bad setting is `Invalid <what> configuration`."""
    try:
        return factory(conf)
    except (KafkaException, ValueError, TypeError) as e:
        raise CommandError(f"Invalid {what} configuration: {kafka_error_message(e)}") from e


def client_config(
    bootstrap_server: str, command_config: Path | None, timeout_ms: int, client_id: str
) -> dict[str, Any]:
    """librdkafka settings for a short-lived admin client with bounded timeouts."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_server,
        "client.id": client_id,
        "socket.connection.setup.timeout.ms": max(1000, min(timeout_ms, 10_000)),
        "socket.timeout.ms": max(1000, timeout_ms),
        "reconnect.backoff.max.ms": 1000,
        # librdkafka logs connection failures itself; we report a single clear error instead.
        "log_level": 0,
    }
    conf.update(load_properties_file(command_config))
    conf["bootstrap.servers"] = bootstrap_server
    return conf


@dataclass(slots=True)
class AdminService:
    """A synchronous AdminClient with uniform timeouts and error messages (one per tool)."""

    CLIENT_ID: ClassVar[str] = "wherry-admin"
    FAILURE: ClassVar[type[CommandError]] = CommandError

    admin: AdminClient
    bootstrap_server: str
    timeout_ms: int

    @classmethod
    def connect(
        cls, bootstrap_server: str, command_config: Path | None, timeout_ms: int
    ) -> Any:
        conf = client_config(bootstrap_server, command_config, timeout_ms, cls.CLIENT_ID)
        return cls(new_client(AdminClient, conf, "client"), bootstrap_server, timeout_ms)

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def _timed_out(self, call: str, detail: str | None = None) -> CommandError:
        """The FAILURE for a call the cluster did not answer in time (`detail`: why, if known)."""
        message = (f"Timed out after {self.timeout_ms} ms waiting for the cluster at "
                   f"{self.bootstrap_server}. Call: {call}")
        return self.FAILURE(message if detail is None else f"{message} ({detail})")

    def _raise_if_transient(self, exc: KafkaException, call: str) -> None:
        """A timeout or a lost connection is the FAILURE of a call not answered in time."""
        if kafka_error_code(exc) in TRANSIENT_ERRORS:
            raise self._timed_out(call, kafka_error_message(exc)) from exc

    def _wait(self, fut: Future[Any], call: str) -> Any:
        try:
            return fut.result(timeout=self.timeout_s + 5.0)
        except FutureTimeoutError as e:
            raise self._timed_out(call) from e
        except KafkaException as e:
            self._raise_if_transient(e, call)
            raise

    def broker_addresses(self) -> dict[int, tuple[str, int]]:
        """Each live broker's (host, port), from the cluster's metadata."""
        md = self.metadata("describeCluster")
        return {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}

    def metadata(self, call: str = "listTopics") -> Any:
        """The cluster's metadata for all topics (a request for all topics creates none)."""
        try:
            return self.admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            self._raise_if_transient(e, call)
            raise
