from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from coord_helpers import EmbeddedBackend, StoreBackend, ZooKeeperBackend

from wherry.testing.zookeeper import ZooKeeperServer

BACKENDS = ["embedded", "zookeeper"]


@pytest.fixture
def zk_chroot() -> str:
    """A fresh chroot path per test, so each test's sessions see an empty namespace."""
    return f"/wherry-tests/{uuid.uuid4().hex}"


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperServer, zk_chroot: str) -> str:
    """The connect string of the test's fresh chroot on the session's ZooKeeper."""
    return zookeeper_server.connect_string + zk_chroot


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
