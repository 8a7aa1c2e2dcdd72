from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from controller_harness import Backend, EmbeddedBackend, ZooKeeperBackend

from wherry.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def controller_zookeeper() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the controller tests (skipped where ZooKeeper is not installed,
    failed in CI)."""
    reason = ZooKeeperServer.unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"ZooKeeper is required in CI: {reason}")
        pytest.skip(f"ZooKeeper is not available: {reason}")
    server = ZooKeeperServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["embedded", "zookeeper"])
def new_backend(request: pytest.FixtureRequest) -> Callable[[], Backend]:
    """Makes the store backend (inside the test's event loop)."""
    if request.param == "embedded":
        return EmbeddedBackend
    server = request.getfixturevalue("controller_zookeeper")
    return lambda: ZooKeeperBackend(server)
