"""What the `wherry` client tools share: errors, properties, Kafka error text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException

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
