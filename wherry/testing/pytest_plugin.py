"""pytest fixtures for testing against real wherry brokers (registered as the ``wherry``
plugin through the ``pytest11`` entry point, so installing wherry makes them available).

* ``wherry_cluster``: a `DevCluster` of 3 brokers in the test process (function scope).
* ``wherry_broker``: the same with 1 broker.

Both listen on ports chosen by the OS (``.bootstrap`` gives ``bootstrap.servers``), keep
their data under the test's ``tmp_path``, set ``group.initial.rebalance.delay.ms=0`` (as
Kafka's own test harness does) and are stopped after the test. The marker
``@pytest.mark.wherry(brokers=5, overrides={"num.partitions": "3"})`` changes the broker
count and adds broker configs. Disable the plugin with ``-p no:wherry``.

``cluster.stop_broker(b)`` is `DevCluster.stop_broker`: a controlled shutdown (the controller
moves the broker's leaderships away first), or a hard stop with
``stop_broker(b, controlled=False)``; the teardown stops the whole cluster without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from wherry.testing.cluster import DevCluster

TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "wherry(brokers=N, overrides={...}): broker count and configs of the wherry_cluster "
        "and wherry_broker fixtures",
    )


def _cluster(request: pytest.FixtureRequest, path: Path, brokers: int) -> Iterator[DevCluster]:
    from wherry.testing.cluster import DevCluster

    marker = request.node.get_closest_marker("wherry")
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    overrides = {**TEST_DEFAULTS, **kwargs.pop("overrides", {})}
    brokers = int(kwargs.pop("brokers", brokers))
    if kwargs:
        raise pytest.UsageError(f"unknown arguments of the wherry marker: {sorted(kwargs)}")
    cluster = DevCluster(path, brokers=brokers, base_port=0, overrides=overrides)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def wherry_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DevCluster]:
    """Three wherry brokers in this process; ``.bootstrap`` for clients."""
    yield from _cluster(request, tmp_path / "wherry-cluster", 3)


@pytest.fixture
def wherry_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DevCluster]:
    """One wherry broker in this process; ``.bootstrap`` for clients."""
    yield from _cluster(request, tmp_path / "wherry-broker", 1)
