"""A real ZooKeeper for the tests here that run `wherry server --zookeeper` processes (skipped
without one, failed in CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import running_zookeeper
from wherry.testing.zookeeper import ZooKeeperServer


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with running_zookeeper(tmp_path / "zookeeper") as zk:
        yield zk
