"""Stray partitions: a replica whose StopReplica never arrived is dropped by the broker.

A broker that is down while its replica is reassigned away never gets the StopReplica that
would delete it. When it starts again the controller sends it a FULL LeaderAndIsr naming every
partition it is a replica of; the broker stops and deletes the partitions the request does not
name, and the data of the partition's new replicas is untouched. (A broker that stays up and
misses the StopReplica because the controller died before sending it is the simulator's case:
the new controller's FULL LeaderAndIsr at its failover drops it; see `tests/sim`.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.test_cluster_operations import (
    TIMEOUT_S,
    consume_all,
    hosted,
    partition_dir,
    produce,
    reassign,
    state,
    topic_name,
    wait_reassigned,
)
from tests.helpers import create_topic
from wherry.common.topic_partition import TopicPartition
from wherry.testing.cluster import DevCluster, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    c = DevCluster(
        tmp_path,
        brokers=3,
        overrides={
            "offsets.topic.replication.factor": "1",
            "auto.leader.rebalance.enable": "false",
            "replica.lag.time.max.ms": "3000",
        },
    ).start()
    try:
        c.wait_for_controller()
        yield c
    finally:
        c.stop()


def test_a_broker_down_during_a_move_away_deletes_its_stray_replica_when_it_starts(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    c, topic = cluster, topic_name()
    tp = TopicPartition(topic, 0)
    create_topic(c.bootstrap, topic, [[0, 1]])
    produce(c, topic, 200)
    assert wait_until(lambda: state(c, tp)[2] == (0, 1), TIMEOUT_S)
    assert c.controller_id != 1, "the test stops broker 1: it must not be the controller"

    c.stop_broker(1, controlled=False)
    reassign(c, {tp: [0, 2]})
    wait_reassigned(c, [tp])
    assert state(c, tp)[0] == (0, 2)
    stray = partition_dir(c, 1, tp)
    assert stray.exists()  # broker 1 was down: no StopReplica reached it

    with caplog.at_level(logging.WARNING, logger="wherry.state_change"):
        c.start_broker(1)
        assert wait_until(lambda: not stray.exists(), TIMEOUT_S)
    assert not hosted(c, 1, tp)
    assert any("stray partition" in r.getMessage() for r in caplog.records)
    # The partition's own replicas keep every record.
    assert consume_all(c, topic, 0) == [f"v{i}".encode() for i in range(200)]
    produce(c, topic, 10)
