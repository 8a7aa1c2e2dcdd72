"""Client quotas on three `wherry server --zookeeper` processes (RF 3): stored in ZooKeeper in
Kafka's layout, applied by every broker, kept through a broker restart and a controller
failover (kill -9), and changes made meanwhile reach the restarted broker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import kafka_wire
from tests.helpers import create_topic, zk_cluster
from wherry.cli.quota_configs import alter, describe
from wherry.protocol.records import build_batch
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 4_000
RATE = 10_000  # bytes/s: a 20 KB request is throttled about a second
RECORDS = build_batch([(None, b"z" * 20_000)])


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[ZkCluster]:
    with zk_cluster(zookeeper, tmp_path, session_timeout_ms=SESSION_TIMEOUT_MS) as c:
        yield c


def throttle_ms(c: ZkCluster, broker: int, topic: str, client_id: str) -> float:
    """The throttle time of a 20 KB Produce from `client_id` to `broker` (recorded whether or
    not the broker leads the partition: a produce quota counts request bytes)."""
    with kafka_wire.connect(c.address(broker)) as sock:
        sock.sendall(kafka_wire.encode_request(
            0, 9, kafka_wire.produce_body(topic, RECORDS), client_id=client_id))
        resp = kafka_wire.read_response(sock, 0, 9)
    return float(resp.throttle_time.total_seconds() * 1000)


def throttled_everywhere(c: ZkCluster, brokers: list[int], topic: str) -> bool:
    """Every broker throttles a fresh client id (each has its own default client quota)."""
    return all(throttle_ms(c, b, topic, f"fresh-{uuid.uuid4().hex[:6]}") > 300
               for b in brokers)


def test_quotas_survive_restart_and_controller_failover(cluster: ZkCluster) -> None:
    c = cluster
    assert wait_until(lambda: c.controller() is not None, 15)
    topic = "quota-events"
    create_topic(c.bootstrap, topic, partitions=1, replication_factor=3)
    assert not throttled_everywhere(c, [0, 1, 2], topic)  # no quota yet

    alter(c.address(0), [("client-id", None)], {"producer_byte_rate": str(RATE)}, [], 10)
    data, _ = c.zk().get("/config/clients/<default>")
    assert json.loads(data)["config"] == {"producer_byte_rate": str(RATE)}
    changes = c.zk().get_children("/config/changes")
    assert any(json.loads(c.zk().get(f"/config/changes/{n}")[0]) == {
        "version": 2, "entity_path": "clients/<default>"} for n in changes)
    assert wait_until(lambda: throttled_everywhere(c, [0, 1, 2], topic), 15)

    # A broker restart: the quota is read back from ZooKeeper at start.
    c.restart(1)
    assert throttled_everywhere(c, [1], topic)

    # The controller dies (kill -9); a new one takes over; the quotas hold on the others.
    old = c.controller()
    assert old is not None
    c.kill(old)
    assert wait_until(lambda: c.controller() not in (None, old), SESSION_TIMEOUT_MS / 1000 + 10)
    survivors = sorted({0, 1, 2} - {old})
    assert throttled_everywhere(c, survivors, topic)

    # A change while the old controller is down: a user quota on a survivor.
    alter(c.address(survivors[0]), [("user", "ANONYMOUS"), ("client-id", "app")],
          {"producer_byte_rate": str(RATE * 100)}, [], 10)
    assert wait_until(lambda: all(throttle_ms(c, b, topic, "app") == 0 for b in survivors), 15)

    # The old controller comes back with both quotas.
    c.start_broker(old)
    assert throttled_everywhere(c, [old], topic)
    assert throttle_ms(c, old, topic, "app") == 0  # the user+client quota (1 MB/s) wins
    lines = describe(c.address(old), ["clients"], [], 10)
    assert lines == [f"Quota configs for client-id the default are "
                     f"producer_byte_rate={float(RATE)}"]
