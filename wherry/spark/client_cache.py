"""Kafka clients kept for the next call in the same Python process.

A streaming query asks the driver for offsets at every micro-batch, and every task of a batch
reads a range on an executor. A new librdkafka client per call costs more than the call: it
connects, learns the cluster from its bootstrap servers, and its first request can race the
retirement of the bootstrap connection and wait for the next metadata refresh (1-3 s with
librdkafka 2.x). Spark keeps the Python process that runs a streaming source's driver calls for
the query's life, and reuses its executors' Python workers from task to task, so clients kept
here serve the calls after the first one. (Spark's own Kafka connector pools its consumers on
the executors for the same reason.)

Clients are keyed by their full configuration; at most `MAX_IDLE` of each kind are kept,
oldest dropped first. A range reader's client (a librdkafka consumer, or the connections of
`fetch_client`) is lent to one reader at a time and given back idle; one whose read failed
is closed, not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol, TypeVar

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

MAX_IDLE = 4
"""Clients of one kind kept at most (different configurations: different clusters or
settings)."""

_lock = threading.Lock()
_admins: OrderedDict[tuple[tuple[str, str], ...], AdminClient] = OrderedDict()
_readers: OrderedDict[Hashable, list[Any]] = OrderedDict()


class _Closable(Protocol):
    def close(self) -> Any: ...


R = TypeVar("R", bound=_Closable)


def _key(conf: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in conf.items()))


def admin(conf: Mapping[str, Any]) -> AdminClient:
    """The kept AdminClient of ``conf``, created (by ``AdminClient(conf)``) on first use."""
    key = _key(conf)
    with _lock:
        client = _admins.pop(key, None)
        if client is None:
            client = AdminClient(dict(conf))
        _admins[key] = client
        while len(_admins) > MAX_IDLE:
            _admins.popitem(last=False)
    return client


def forget_admin(conf: Mapping[str, Any]) -> None:
    """Drop the kept AdminClient of ``conf`` (after it failed: the next call starts afresh)."""
    with _lock:
        _admins.pop(_key(conf), None)


def take_reader(key: Hashable, create: Callable[[], R]) -> R:
    """An idle range reader's client kept under ``key``, else a new one from ``create``."""
    with _lock:
        idle = _readers.get(key)
        if idle:
            client: R = idle.pop()
            return client
    return create()


def keep_reader(key: Hashable, client: _Closable) -> None:
    """Keep ``client`` (idle) for the next reader of ``key``."""
    closing: list[_Closable] = []
    with _lock:
        idle = _readers.pop(key, [])
        idle.append(client)
        _readers[key] = idle
        if len(idle) > MAX_IDLE:
            closing.append(idle.pop(0))
        while len(_readers) > MAX_IDLE:
            closing.extend(_readers.popitem(last=False)[1])
    for c in closing:
        c.close()


def take_consumer(key_conf: Mapping[str, Any], create: Callable[[], Consumer]) -> Consumer:
    """An idle consumer kept for ``key_conf``, else a new one from ``create``."""
    return take_reader(("consumer", _key(key_conf)), create)


def kept() -> tuple[int, int]:
    """How many AdminClients and idle range readers' clients this process keeps."""
    with _lock:
        return len(_admins), sum(len(v) for v in _readers.values())


def close_idle() -> None:
    """Close every idle range reader's client and drop the kept AdminClients."""
    with _lock:
        closing = [c for idle in _readers.values() for c in idle]
        _readers.clear()
        _admins.clear()
    for c in closing:
        c.close()


def give_back(key_conf: Mapping[str, Any], consumer: Consumer) -> None:
    """Keep ``consumer`` (unassigned here) for the next reader of ``key_conf``."""
    consumer.unassign()
    keep_reader(("consumer", _key(key_conf)), consumer)
