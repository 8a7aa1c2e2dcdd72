"""Shared fixtures: a real broker process for client tests, a real ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.helpers import running_zookeeper
from wherry.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One `wherry server` for the session (port chosen by the OS)."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("broker"), overrides=["log.retention.check.interval.ms=1000"]
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def broker_bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own for a test that restarts or kills it."""
    b = BrokerProcess(tmp_path / "data")
    try:
        yield b
    finally:
        b.kill()


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the session's store and controller tests (each test works in a
    chroot of its own). Skipped where ZooKeeper is not installed, failed in CI."""
    with running_zookeeper() as server:
        yield server

