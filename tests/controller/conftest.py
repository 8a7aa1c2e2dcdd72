from __future__ import annotations

from collections.abc import Callable

import pytest
from controller_harness import Backend, EmbeddedBackend, ZooKeeperBackend


@pytest.fixture(params=["embedded", "zookeeper"])
def new_backend(request: pytest.FixtureRequest) -> Callable[[], Backend]:
    """Makes the store backend (inside the test's event loop)."""
    if request.param == "embedded":
        return EmbeddedBackend
    server = request.getfixturevalue("zookeeper_server")
    return lambda: ZooKeeperBackend(server)
