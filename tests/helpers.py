"""Helpers shared by test packages: a real ZooKeeper (and `ZkCluster`s on it), topic creation
through the admin client, polling a consumer, and bounded ``async def`` test bodies."""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import Callable, Collection, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec

import pytest
from confluent_kafka import Consumer, Message
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.testing.cluster import ZkCluster
from wherry.testing.zookeeper import ZooKeeperServer

P = ParamSpec("P")


# --- ZooKeeper ------------------------------------------------------------------------------


@contextmanager
def running_zookeeper(workdir: Path | None = None) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper (Debian's package, tickTime 100 ms), closed afterwards.

    Missing ZooKeeper fails the test when ``CI=true`` (CI installs it) and skips it otherwise.
    """
    reason = ZooKeeperServer.unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"ZooKeeper is required in CI: {reason}")
        pytest.skip(f"ZooKeeper is not available: {reason}")
    with ZooKeeperServer(workdir, tick_time_ms=100) as zk:
        yield zk


def zk_cluster(
    zookeeper: ZooKeeperServer,
    directory: Path,
    *,
    session_timeout_ms: int,
    brokers: int = 3,
    overrides: Mapping[str, str] | None = None,
) -> ZkCluster:
    """``brokers`` `wherry server --zookeeper` processes (not started yet) on ``zookeeper``,
    in a chroot of their own."""
    return ZkCluster(
        directory,
        brokers=brokers,
        zookeeper=zookeeper,
        chroot=f"/wherry-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=session_timeout_ms,
        overrides=overrides,
    )


# --- clients --------------------------------------------------------------------------------


def create_topic(
    bootstrap: str,
    name: str,
    assignment: list[list[int]] | None = None,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    **configs: str,
) -> None:
    """CreateTopics through confluent-kafka's AdminClient, bounded in time: replicas placed
    by ``assignment`` (one list of broker ids per partition), or by the controller for
    ``partitions`` x ``replication_factor``; ``configs`` are topic configs."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    if assignment is not None:
        topic = NewTopic(
            name, num_partitions=len(assignment), replica_assignment=assignment, config=configs
        )
    else:
        topic = NewTopic(name, partitions, replication_factor, config=configs)
    admin.create_topics([topic], operation_timeout=10, request_timeout=15)[name].result(20)


def poll_messages(
    consumer: Consumer,
    count: int,
    timeout_s: float,
    *,
    skip_errors: bool | Collection[int] = False,
    poll_s: float = 0.5,
) -> list[Message]:
    """Poll until `count` messages have arrived or `timeout_s` has passed (whichever comes
    first). A message carrying an error fails the test, unless `skip_errors` passes over it:
    True for every error, or a collection of the error codes to pass over."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        m = consumer.poll(poll_s)
        if m is None:
            continue
        if (error := m.error()) is not None:
            skip = skip_errors if isinstance(skip_errors, bool) else error.code() in skip_errors
            assert skip, error
            continue
        out.append(m)
    return out


# --- asyncio --------------------------------------------------------------------------------


def bounded_async_test(
    timeout_s: float,
) -> Callable[[Callable[P, Coroutine[Any, Any, None]]], Callable[P, None]]:
    """A decorator that runs an ``async def`` test body with `asyncio.run`, failing it after
    ``timeout_s`` (pytest-asyncio is not used)."""

    def decorate(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
            asyncio.run(asyncio.wait_for(fn(*args, **kwargs), timeout_s))

        return wrapper

    return decorate


async def wait_until_async(
    predicate: Callable[[], bool],
    timeout_s: float = 10.0,
    what: Callable[[], object] | None = None,
) -> None:
    """Poll ``predicate()`` on the running loop until it holds; after ``timeout_s`` an
    AssertionError (showing ``what()`` when given)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            detail = "" if what is None else f": {what()!r}"
            raise AssertionError(f"condition not met within {timeout_s} s{detail}")
        await asyncio.sleep(0.01)
