"""What the `wherry` client tools share: errors, properties, Kafka error text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from wherry.server.config import parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class CommandError(Exception):
    """A failure reported to the user as one line, without a traceback."""


def load_properties_file(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CommandError(f"Cannot read properties file {path}: {e.strerror or e}") from e


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
        try:
            admin = AdminClient(conf)
        except (KafkaException, ValueError, TypeError) as e:
            raise CommandError(f"Invalid client configuration: {kafka_error_message(e)}") from e
        return cls(admin, bootstrap_server, timeout_ms)

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def _timeout_message(self, call: str) -> str:
        return (f"Timed out after {self.timeout_ms} ms waiting for the cluster at "
                f"{self.bootstrap_server}. Call: {call}")

    def _wait(self, fut: Future[Any], call: str) -> Any:
        try:
            return fut.result(timeout=self.timeout_s + 5.0)
        except FutureTimeoutError as e:
            raise self.FAILURE(self._timeout_message(call)) from e
        except KafkaException as e:
            if kafka_error_code(e) in TRANSIENT_ERRORS:
                raise self.FAILURE(
                    f"{self._timeout_message(call)} ({kafka_error_message(e)})"
                ) from e
            raise
