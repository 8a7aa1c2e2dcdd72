"""The broker's loggers as Kafka's BROKER_LOGGER config resource: their levels described, and
set or unset while the broker runs (DescribeConfigs, IncrementalAlterConfigs).

Each logger of the process is a config named after it (`root` is the root logger), its value
its level in force with Kafka's names (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF). Setting
a level (SET) takes effect at once for that logger and the ones below it that have none of
their own; DELETE gives a logger back its parent's level. As in Kafka, nothing is stored: a
restart starts from the configured levels. The loggers are the process's, so the brokers of
one process (`wherry dev`) share them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from kio.schema.errors import ErrorCode

from wherry.server.dynamic_validation import APPEND, DELETE, SET, SUBTRACT

__all__ = ["ROOT_LOGGER", "LoggerConfigError", "apply", "levels", "resource_problem"]

ROOT_LOGGER = "root"
TRACE = 5  # below DEBUG: nothing in wherry logs finer than DEBUG
_LEVELS = {
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
VALID_LEVELS = ", ".join(sorted(_LEVELS))
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

logger = logging.getLogger(__name__)


class LoggerConfigError(Exception):
    """Why a BROKER_LOGGER resource or change is refused: Kafka's error code and words."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def resource_problem(name: str, broker_id: int) -> str | None:
    """Why `name` is not this broker's BROKER_LOGGER resource (None: it is)."""
    if not name:
        return "Broker id must not be empty"
    try:
        asked = int(name)
    except ValueError:
        return f"Node id must be an integer, but it is: {name}"
    if asked != broker_id:
        return f"Unexpected broker id, expected {broker_id} but received {name}"
    return None


def level_name(level: int) -> str:
    """Kafka's name of a Python level (the nearest one at or below it)."""
    for name in ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG"):
        if level >= _LEVELS[name]:
            return name
    return "TRACE"


def levels(names: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(logger, level in force) of every logger (`names`: those of them), root first."""
    known = _known()
    if names is not None:
        asked = set(names)
        known = [n for n in known if n in asked]
    return [(n, level_name(_effective(n))) for n in known]


def apply(
    name: str, broker_id: int, changes: Sequence[tuple[str, str | None, int]], *,
    validate_only: bool = False,
) -> None:
    """Check every change of the resource (logger, level, operation), then make them all
    (unless `validate_only`); LoggerConfigError for the first one refused."""
    problem = resource_problem(name, broker_id)
    if problem is not None:
        raise LoggerConfigError(ErrorCode.invalid_request, problem)
    known = set(_known())
    for logger_name, level, op in changes:
        _check(logger_name, level, op, known)
    if validate_only:
        return
    for logger_name, level, op in changes:
        target = logging.getLogger() if logger_name == ROOT_LOGGER else logging.getLogger(
            logger_name)
        if op == SET:
            target.setLevel(_LEVELS[str(level)])
            logger.warning("Updated the log level of %s to %s", logger_name, level)
        else:
            target.setLevel(logging.NOTSET)
            logger.warning("Unset the log level of %s", logger_name)


def _check(name: str, level: str | None, op: int, known: set[str]) -> None:
    if op in _OP_NAMES:
        raise LoggerConfigError(
            ErrorCode.invalid_request,
            f"{_OP_NAMES[op]} operation is not allowed for the BROKER_LOGGER resource",
        )
    if op not in (SET, DELETE):
        raise LoggerConfigError(
            ErrorCode.invalid_request,
            f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource",
        )
    if name not in known:
        raise LoggerConfigError(ErrorCode.invalid_config, f"Logger {name} does not exist!")
    if op == SET and level not in _LEVELS:
        raise LoggerConfigError(
            ErrorCode.invalid_config,
            f"Cannot set the log level of {name} to {level} as it is not a supported log "
            f"level. Valid log levels are {VALID_LEVELS}",
        )
    if op == DELETE and name == ROOT_LOGGER:
        raise LoggerConfigError(
            ErrorCode.invalid_request,
            f"Removing the log level of the {ROOT_LOGGER} logger is not allowed",
        )


def _known() -> list[str]:
    """The root logger, then every logger of the process and every dotted prefix of one (a
    prefix's level applies to the loggers below it), sorted."""
    return [ROOT_LOGGER, *sorted(logging.root.manager.loggerDict)]


def _effective(name: str) -> int:
    """The level in force for `name`: its own, else its nearest ancestor's, else the root's
    (without making a logger of a prefix that is not one yet)."""
    loggers = logging.root.manager.loggerDict
    while name != ROOT_LOGGER:
        found = loggers.get(name)
        if isinstance(found, logging.Logger) and found.level != logging.NOTSET:
            return found.level
        name = name.rsplit(".", 1)[0] if "." in name else ROOT_LOGGER
    return logging.getLogger().level
