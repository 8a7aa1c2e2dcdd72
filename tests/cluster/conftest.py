from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import running_zookeeper
from wherry.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper per test module, for the multi-process `ZkCluster` tests (skipped
    where ZooKeeper is not installed, failed in CI)."""
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk
