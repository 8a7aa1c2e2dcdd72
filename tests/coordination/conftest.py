from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from coord_helpers import EmbeddedBackend, StoreBackend, ZooKeeperBackend

from wherry.testing.zookeeper import ZooKeeperServer

BACKENDS = ["embedded", "zookeeper"]


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper (Debian's package) for the test session.

    Missing ZooKeeper fails the tests that need it when ``CI=true`` (CI installs it) and skips
    them otherwise.
    """
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


@pytest.fixture
def zk_chroot() -> str:
    """A fresh chroot path per test, so each test's sessions see an empty namespace."""
    return f"/wherry-tests/{uuid.uuid4().hex}"


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    """A fresh, empty store per test, for every `MetadataStore` implementation."""
    backend: StoreBackend
    match request.param:
        case "embedded":
            backend = EmbeddedBackend(tmp_path)
        case "zookeeper":
            server = request.getfixturevalue("zookeeper_server")
            backend = ZooKeeperBackend(server, request.getfixturevalue("zk_chroot"))
        case other:
            raise AssertionError(other)
    yield backend
    asyncio.run(backend.aclose())
