"""Test clusters listen only on ports the OS chooses: a broker a user runs on the default
port (127.0.0.1:9092, `wherry server`'s and `wherry dev`'s) must not break the suite. Each
test here starts a cluster with its defaults while something listens on 127.0.0.1:9092."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from wherry.testing.cluster import AsyncDevCluster, DevCluster, wait_until
from wherry.testing.metadata_probe import parse_address

USER_PORT = 9092


@pytest.fixture(scope="module")
def user_port_taken() -> Iterator[None]:
    """A listener on 127.0.0.1:9092 for this module's tests (module scope: it is up before
    any function-scoped cluster fixture). If something listens there already, that is the
    same situation: the tests just run."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no reason
        try:
            s.bind(("127.0.0.1", USER_PORT))
            s.listen()
        except OSError:
            pass  # in use already
        yield


def assert_serves(cluster: DevCluster, brokers: int) -> None:
    """Every broker is on a port of its own, not 9092, and answers Metadata with them all."""
    addresses = {b: parse_address(cluster.address(b)) for b in cluster.broker_ids}
    assert len(addresses) == brokers
    assert USER_PORT not in {port for _, port in addresses.values()}
    for b in cluster.broker_ids:
        assert wait_until(lambda b=b: cluster.metadata(b).brokers == addresses), b


@pytest.mark.usefixtures("user_port_taken")
def test_async_dev_cluster_defaults(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = AsyncDevCluster(tmp_path)
        await cluster.start()
        try:
            await cluster.wait_for_controller()
            ports = [cluster.port(b) for b in cluster.broker_ids]
            assert len(ports) == 3 and USER_PORT not in ports
        finally:
            await cluster.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.usefixtures("user_port_taken")
def test_dev_cluster_defaults(tmp_path: Path) -> None:
    with DevCluster(tmp_path) as cluster:
        cluster.wait_for_controller()
        assert_serves(cluster, 3)


@pytest.mark.usefixtures("user_port_taken")
def test_plugin_fixture(wherry_broker: DevCluster) -> None:
    wherry_broker.wait_for_controller()
    assert_serves(wherry_broker, 1)
