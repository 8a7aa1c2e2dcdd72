"""Shared fixtures: a real broker process for client tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess


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
