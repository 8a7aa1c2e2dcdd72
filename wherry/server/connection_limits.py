"""The broker's connection and request-memory limits, with Kafka's names and defaults:
`connections.max.idle.ms`, `max.connections` (and per listener,
`listener.name.<listener>.max.connections`), `max.connections.per.ip`,
`max.connections.per.ip.overrides`, `max.connection.creation.rate` (and per listener) and
`queued.max.request.bytes`; read from the broker's properties and checked with Kafka's
ConfigException wording. Pure: no sockets, no name resolution.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field

from wherry.common.record import frozen_record
from wherry.log.config import ConfigType

INT_MAX = 2**31 - 1

IDLE_KEY = "connections.max.idle.ms"
MAX_CONNECTIONS_KEY = "max.connections"
PER_IP_KEY = "max.connections.per.ip"
PER_IP_OVERRIDES_KEY = "max.connections.per.ip.overrides"
CREATION_RATE_KEY = "max.connection.creation.rate"
QUEUED_BYTES_KEY = "queued.max.request.bytes"
# Kafka's client-quota sampling, which the connection rate is measured with
QUOTA_WINDOW_NUM_KEY = "quota.window.num"
QUOTA_WINDOW_SIZE_KEY = "quota.window.size.seconds"

BROKER_KEYS = frozenset({
    IDLE_KEY, MAX_CONNECTIONS_KEY, PER_IP_KEY, PER_IP_OVERRIDES_KEY, CREATION_RATE_KEY,
    QUEUED_BYTES_KEY, QUOTA_WINDOW_NUM_KEY, QUOTA_WINDOW_SIZE_KEY,
})
# Also given per listener: `listener.name.<listener>.max.connections` and
# `listener.name.<listener>.max.connection.creation.rate`
PER_LISTENER_KEYS = (MAX_CONNECTIONS_KEY, CREATION_RATE_KEY)
_PER_LISTENER = re.compile(
    r"listener\.name\.([a-z0-9_-]+)\.(max\.connections|max\.connection\.creation\.rate)"
)


class LimitConfigError(ValueError):
    """A limit the broker cannot start with (Kafka's ConfigException wording)."""


@frozen_record(slots=True)
class ConnectionLimits:
    connections_max_idle_ms: int = 600_000  # negative: never closed for idleness
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    # address (an IP literal or a host name, resolved when the listeners start) -> limit
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = INT_MAX
    # listener name (upper case) -> its own limits
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    listener_max_connection_creation_rate: Mapping[str, int] = field(default_factory=dict)
    queued_max_request_bytes: int = -1  # <= 0: no bound (Kafka's MemoryPool.NONE)
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1

    @property
    def pool_capacity(self) -> int | None:
        return self.queued_max_request_bytes if self.queued_max_request_bytes > 0 else None


def _invalid(key: str, value: str, message: str) -> LimitConfigError:
    return LimitConfigError(f"Invalid value {value.strip()} for configuration {key}: {message}")


def _number(key: str, value: str, *, long: bool, minimum: int | None) -> int:
    text = value.strip()
    bound = 2**63 - 1 if long else INT_MAX
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -bound - 1 <= int(text) <= bound:
        raise _invalid(key, value, f"Not a number of type {'LONG' if long else 'INT'}")
    n = int(text)
    if minimum is not None and n < minimum:
        raise _invalid(key, value, f"Value must be at least {minimum}")
    return n


def parse_overrides(value: str) -> dict[str, int]:
    """`host:count,host:count` (Kafka's map syntax; IPv6 addresses keep their colons: the
    count is after the last one)."""
    out: dict[str, int] = {}
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise _invalid(PER_IP_OVERRIDES_KEY, value,
                           "Map entry should be of form <key>:<value>")
        out[host] = _number(PER_IP_OVERRIDES_KEY, count, long=False, minimum=0)
    return out


def limits_from_props(props: Mapping[str, str], socket_request_max_bytes: int) -> ConnectionLimits:
    kw: dict[str, object] = {}
    if IDLE_KEY in props:
        kw["connections_max_idle_ms"] = _number(IDLE_KEY, props[IDLE_KEY], long=True,
                                                minimum=None)
    for key, name in (
        (MAX_CONNECTIONS_KEY, "max_connections"),
        (PER_IP_KEY, "max_connections_per_ip"),
        (CREATION_RATE_KEY, "max_connection_creation_rate"),
    ):
        if key in props:
            kw[name] = _number(key, props[key], long=False, minimum=0)
    for key, name, minimum in (
        (QUOTA_WINDOW_NUM_KEY, "quota_window_num", 1),
        (QUOTA_WINDOW_SIZE_KEY, "quota_window_size_seconds", 1),
    ):
        if key in props:
            kw[name] = _number(key, props[key], long=False, minimum=minimum)
    overrides: dict[str, int] = {}
    if props.get(PER_IP_OVERRIDES_KEY, "").strip():
        overrides = parse_overrides(props[PER_IP_OVERRIDES_KEY])
    kw["max_connections_per_ip_overrides"] = overrides
    if kw.get("max_connections_per_ip") == 0 and not overrides:
        raise _invalid(PER_IP_KEY, props[PER_IP_KEY],
                       f"{PER_IP_KEY} can be set to zero only if {PER_IP_OVERRIDES_KEY} "
                       "property is set.")
    listener_max: dict[str, int] = {}
    listener_rate: dict[str, int] = {}
    for key, value in props.items():
        m = _PER_LISTENER.fullmatch(key)
        if m is None:
            continue
        n = _number(key, value, long=False, minimum=0)
        (listener_max if m.group(2) == MAX_CONNECTIONS_KEY else listener_rate)[
            m.group(1).upper()] = n
    kw["listener_max_connections"] = listener_max
    kw["listener_max_connection_creation_rate"] = listener_rate
    if QUEUED_BYTES_KEY in props:
        queued = _number(QUEUED_BYTES_KEY, props[QUEUED_BYTES_KEY], long=True, minimum=None)
        if 0 < queued < socket_request_max_bytes:
            raise _invalid(QUEUED_BYTES_KEY, props[QUEUED_BYTES_KEY],
                           f"{QUEUED_BYTES_KEY} must be larger or equal to "
                           f"socket.request.max.bytes ({socket_request_max_bytes})")
        kw["queued_max_request_bytes"] = queued
    return ConnectionLimits(**kw)  # type: ignore[arg-type]


def is_per_listener_key(key: str) -> bool:
    return _PER_LISTENER.fullmatch(key) is not None


def limit_values(limits: ConnectionLimits) -> dict[str, tuple[str, ConfigType]]:
    """The broker-wide limits as DescribeConfigs shows them: name -> (value, type)."""
    overrides = ",".join(f"{h}:{n}" for h, n in limits.max_connections_per_ip_overrides.items())
    return {
        IDLE_KEY: (str(limits.connections_max_idle_ms), ConfigType.LONG),
        MAX_CONNECTIONS_KEY: (str(limits.max_connections), ConfigType.INT),
        PER_IP_KEY: (str(limits.max_connections_per_ip), ConfigType.INT),
        PER_IP_OVERRIDES_KEY: (overrides, ConfigType.STRING),
        CREATION_RATE_KEY: (str(limits.max_connection_creation_rate), ConfigType.INT),
        QUEUED_BYTES_KEY: (str(limits.queued_max_request_bytes), ConfigType.LONG),
    }
