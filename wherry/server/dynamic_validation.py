"""What Kafka refuses in an alter of dynamic broker configs, with its answers (its
DynamicBrokerConfig.validateConfigs, then each reconfigurable part's own check).

In order: keys the broker knows but cannot change at run time ("Cannot update these configs
dynamically"), key-store settings without a listener prefix, values that do not parse (a
listener-prefixed key is checked as its base key), per-broker keys at the cluster-default
level; then the checks of the new configuration as a whole: thread pools may at most double
or halve at once, the connection limits must be usable, listeners must stay consistent (the
advertised ones among them, each in the protocol map, the inter-broker one advertised, no
listener changing its protocol), a listener's new key store must load.
Keys the broker does not know are custom configs: stored as they are. Refusals are
INVALID_REQUEST (Kafka's request pre-processing answers so) with Kafka's message. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from wherry.log.config import ConfigError, LogConfig
from wherry.server import dynamic_keys as dk
from wherry.server.connection_limits import LimitConfigError, limits_from_props

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

__all__ = [
    "APPEND",
    "DELETE",
    "SET",
    "SUBTRACT",
    "DynamicConfigError",
    "apply_incremental",
    "effective_props",
    "list_operation",
    "validate",
]

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_INVALID_DYNAMIC = "Invalid dynamic configuration"
_INT = re.compile(r"[+-]?[0-9]+")


class DynamicConfigError(Exception):
    """A refused broker config alter; `error_code` is the answer."""

    def __init__(self, error_code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _refuse(message: str) -> DynamicConfigError:
    from kio.schema.errors import ErrorCode  # a refused alter's: not imported by a start

    return DynamicConfigError(ErrorCode.invalid_request, message)


def _check_value(name: str, value: str) -> None:
    base = dk.base_name(name) or name
    key = dk.key_of(name)
    if key is not None:
        dk.parse_value(base if base in dk.DYNAMIC_KEYS else key.name, key, value)
    elif base in dk.LOG_KEYS:
        try:
            LogConfig().with_props({dk.LOG_KEYS[base]: value})
        except ConfigError as e:
            message = f"Invalid value {value} for configuration {base}: {e.message}"
            raise ValueError(message) from None


def effective_props(
    static: Mapping[str, str], defaults: Mapping[str, str], per_broker: Mapping[str, str]
) -> dict[str, str]:
    """The broker's configuration in force: static, overridden by the cluster default, then by
    this broker's own (a dynamic value hides the static synonyms of its key, e.g.
    `log.retention.ms` the static `log.retention.hours`)."""
    out = dict(static)
    for layer in (defaults, per_broker):
        for name, value in layer.items():
            for synonym in dk.broker_synonyms(name):
                if synonym != name and dk.base_name(name) is None:
                    out.pop(synonym, None)
            out[name] = value
    return out


def _int_value(props: Mapping[str, str], name: str) -> int:
    key = dk.DYNAMIC_KEYS[name]
    try:
        return int(dk.parse_value(name, key, props[name])) if name in props else int(
            key.default or 0
        )
    except ValueError:
        return int(key.default or 0)


def _reconfiguration_problem(
    old: Mapping[str, str], new: Mapping[str, str], socket_request_max_bytes: int
) -> str | None:
    for name in sorted(dk.THREAD_POOL_KEYS | {"num.network.threads"}):
        before, after = _int_value(old, name), _int_value(new, name)
        if before == after:
            continue
        what = f"Dynamic thread count update validation failed for {name}={after}"
        if after <= 0:
            return f"{what}, value should be at least 1"
        if after < before // 2:
            return f"{what}, value should be at least half the current value {before}"
        if after > before * 2:
            return f"{what}, value should not be greater than double the current value {before}"
    try:
        limits_from_props(new, socket_request_max_bytes)
    except LimitConfigError as e:
        return str(e)
    return _listener_limit_problem(old, new) or _listener_problem(old, new)


def _listener_limit_problem(old: Mapping[str, str], new: Mapping[str, str]) -> str | None:
    """Kafka's per-listener connection quota check: a listener's `max.connections` and
    `max.connection.creation.rate` in force (its own, else the broker's) must stay positive."""
    from wherry.server.config import BrokerConfigError, parse_listeners

    try:
        listeners = parse_listeners(new.get("listeners") or "PLAINTEXT://:9092")
    except BrokerConfigError:
        return None  # refused by the listener check
    for endpoint in listeners:
        for key in ("max.connections", "max.connection.creation.rate"):
            prefixed = f"listener.name.{endpoint.listener.lower()}.{key}"
            value, before = new.get(prefixed, new.get(key)), old.get(prefixed, old.get(key))
            if value is None or value == before or not _INT.fullmatch(value.strip()):
                continue
            if int(value) <= 0:
                return f"Invalid {key} {int(value)}"
    return None


_LISTENER_KEYS = ("listeners", "advertised.listeners", "listener.security.protocol.map")


def _listener_problem(old: Mapping[str, str], new: Mapping[str, str]) -> str | None:
    """Kafka's DynamicListenerConfig check of changed listener settings (wherry stores them;
    its listeners change at the next start)."""
    if all(old.get(k) == new.get(k) for k in _LISTENER_KEYS):
        return None
    from wherry.server.config import BrokerConfigError, parse_listeners
    from wherry.server.listener_security import inter_broker_listener, protocol_map

    def names(props: Mapping[str, str], key: str) -> list[str]:
        value = props.get(key) or props.get("listeners") or "PLAINTEXT://:9092"
        return [e.listener for e in parse_listeners(value)]

    try:
        listeners, advertised = names(new, "listeners"), names(new, "advertised.listeners")
        protocols, old_protocols = protocol_map(new), protocol_map(old)
        before = names(old, "listeners")
        inter_broker = inter_broker_listener(new, protocols)
    except (BrokerConfigError, ValueError) as e:
        return str(e)
    if not set(advertised) <= set(listeners):
        return (
            f"Advertised listeners '{new.get('advertised.listeners')}' must be a subset of "
            f"listeners '{new.get('listeners')}'"
        )
    if not set(listeners) <= set(protocols):
        return (
            f"Listeners '{new.get('listeners')}' must be subset of listener map "
            f"'{new.get('listener.security.protocol.map')}'"
        )
    for name in sorted(set(listeners) & set(before)):
        if old_protocols.get(name) != protocols.get(name):
            return f"Security protocol cannot be updated for existing listener {name}"
    if inter_broker not in advertised:
        return f"Advertised listener must be specified for inter-broker listener {inter_broker}"
    return None


def validate(
    props: Mapping[str, str],
    *,
    per_broker: bool,
    known: Callable[[str], bool],
    current: tuple[Mapping[str, str], Mapping[str, str], Mapping[str, str]],
    socket_request_max_bytes: int,
    check_listeners: Callable[[Mapping[str, str], Mapping[str, str]], str | None] | None = None,
) -> None:
    """Kafka's validation of a broker entity's new configs `props` (the whole entity).
    `current`: (static, cluster default, this broker's) configs in force; `known` tells the
    broker's own keys; `check_listeners(old, new)` may refuse a listener's new TLS settings."""
    fixed = [k for k in props if k not in dk.ALL_DYNAMIC and known(k)]
    if fixed:
        raise _refuse(f"Cannot update these configs dynamically: {dk.scala_set(fixed)}")
    unprefixed = [k for k in props if k in dk.LISTENER_ONLY_KEYS]
    if unprefixed:
        raise _refuse(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {dk.scala_set(unprefixed)}"
        )
    for name, value in props.items():
        try:
            _check_value(name, value)
        except ValueError as e:
            raise _refuse(str(e)) from None
    if not per_broker:
        only = [k for k in props if dk.is_per_broker(k)]
        if only:
            raise _refuse(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {dk.scala_set(only)}"
            )
    static, defaults, mine = current
    old = effective_props(static, defaults, mine)
    new = (
        effective_props(static, defaults, props)
        if per_broker
        else effective_props(static, props, mine)
    )
    problem = _reconfiguration_problem(old, new, socket_request_max_bytes)
    if problem is None and check_listeners is not None:
        problem = check_listeners(old, new)
    if problem is not None:
        raise _refuse(
            f"Invalid value org.apache.kafka.common.config.ConfigException: {problem} "
            f"for configuration {_INVALID_DYNAMIC}"
        )


def _list_default(name: str) -> str | None:
    key = dk.key_of(name)
    if key is not None and key.type == dk.T.LIST:
        return key.default or ""
    base = dk.base_name(name) or name
    if base == "log.cleanup.policy":
        return "delete"
    return None


def list_operation(base: str, value: str | None, *, append: bool) -> str:
    """APPEND or SUBTRACT of a LIST config's comma-separated items (each item once)."""
    items = [v for v in base.split(",") if v]
    given = [v for v in (value or "").split(",") if v]
    if append:
        items += [v for v in given if v not in items]
    else:
        items = [v for v in items if v not in given]
    return ",".join(items)


def apply_incremental(current: Mapping[str, str], ops: Iterable[Any]) -> dict[str, str]:
    """IncrementalAlterConfigs' operations on a broker entity's stored configs (Kafka's
    prepareIncrementalConfigs; the result is validated afterwards)."""
    from kio.schema.errors import ErrorCode  # an alter's: not imported by a start

    new = dict(current)
    for op in ops:
        match op.config_operation:
            case 0:
                new[op.name] = op.value
            case 1:
                new.pop(op.name, None)
            case 2 | 3:
                what = "append" if op.config_operation == APPEND else "subtract"
                default = _list_default(op.name)
                if default is None:
                    if dk.key_of(op.name) is None and op.name not in dk.LOG_KEYS:
                        # Kafka looks the key up and fails outright on a name it lacks
                        raise DynamicConfigError(ErrorCode.unknown_server_error, None)
                    raise DynamicConfigError(
                        ErrorCode.invalid_config,
                        f"Config value {what} is not allowed for config key: {op.name}",
                    )
                new[op.name] = list_operation(
                    new.get(op.name, default), op.value, append=op.config_operation == APPEND
                )
            case other:
                raise _refuse(f"Unknown operations type {other}")
    return new
