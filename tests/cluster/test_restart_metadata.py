"""What a restarted broker tells a client the moment its listener accepts.

After a kill -9 or a SIGTERM, a broker of a 3-broker ZooKeeper cluster is started again and
asked Metadata as soon as its port accepts. The answer must already be the cluster's: every
live broker, the controller, the topic with all its partitions. Answered from a cache the
controller had not filled yet, it said "no brokers, no controller, no such topic", and
librdkafka's idempotent producer then dropped the topic's partitions (count 3 -> 0 -> 3) and
rebuilt them, one road to its fatal "Unable to reconstruct MessageSet". The brokers are
restarted one by one, each once the ISRs are full again, as an operator's rolling restart."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import zk_cluster
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.metadata_probe import fetch_metadata
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

BROKERS = 3
SESSION_TIMEOUT_MS = 4_000


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with zk_cluster(
        zookeeper, tmp_path, brokers=BROKERS, session_timeout_ms=SESSION_TIMEOUT_MS
    ) as c:
        yield c


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("how", ["kill", "term"])
def test_a_restarted_broker_answers_with_the_cluster_s_metadata(
    cluster: ZkCluster, how: str
) -> None:
    c = cluster
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    c.create_topic(topic, {p: [(p + i) % BROKERS for i in range(BROKERS)] for p in range(3)})
    assert wait_until(
        lambda: all(len(c.metadata(b, [topic]).partitions(topic)) == 3 for b in range(BROKERS)),
        20,
    )
    for victim in range(BROKERS):
        if how == "kill":
            c.kill(victim)
            assert wait_until(lambda v=victim: v not in c.registered_brokers(), 20)
        else:
            c.stop_broker(victim)
        c.start_broker(victim, wait=False)
        deadline = time.monotonic() + 30
        while not _accepts(c.address(victim)):
            assert time.monotonic() < deadline and c.is_running(victim), c.output(victim)[-3000:]
            time.sleep(0.005)
        view = fetch_metadata(c.address(victim), [topic], timeout_s=20)
        assert view.controller_id >= 0, view
        assert set(view.brokers) == set(range(BROKERS)), view
        assert sorted(view.partitions(topic)) == [0, 1, 2], view
        assert all(p.leader >= 0 for p in view.partitions(topic).values()), view
        c.wait_ready(victim)
        # As a rolling restart does: the next broker goes down only once every replica is
        # back in its ISR. Otherwise a partition whose ISR has shrunk to the next victim alone
        # is rightly leaderless (no unclean election) until that victim is back.
        assert wait_until(lambda: _isr_full(c, topic), 30), [
            c.partition_state(topic, p) for p in range(3)
        ]


def _isr_full(c: ZkCluster, topic: str) -> bool:
    states = [c.partition_state(topic, p) for p in range(3)]
    return all(s is not None and len(s.isr) == BROKERS for s in states)
