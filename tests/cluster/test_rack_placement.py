"""Racks on a dev cluster: `broker.rack` per broker (`broker_overrides`, `wherry dev
--broker-override`), reported by DescribeCluster and Metadata, and CreateTopics / CreatePartitions
placing each partition's replicas over the racks (Kafka's rack-aware assignment)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from wherry.cli.serve import OverrideError, parse_broker_overrides
from wherry.testing.cluster import DevCluster

RACKS = {0: "a", 1: "a", 2: "b", 3: "b"}


def test_created_topics_spread_over_the_racks(tmp_path: Path) -> None:
    with DevCluster(tmp_path / "cluster", brokers=4,
                    broker_overrides={b: {"broker.rack": r} for b, r in RACKS.items()}) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
        assert {n.id: n.rack for n in admin.describe_cluster().result(20).nodes} == RACKS
        admin.create_topics([NewTopic("spread", 8, 2)])["spread"].result(30)
        c.wait_for_topic("spread", 8)
        admin.create_partitions([NewPartitions("spread", 12)])["spread"].result(30)
        c.wait_for_topic("spread", 12)
        parts = c.metadata(0, ["spread"]).partitions("spread")
        assert len(parts) == 12
        for p in parts.values():
            assert sorted(RACKS[b] for b in p.replicas) == ["a", "b"], p
        leaders = sorted(p.replicas[0] for p in parts.values())
        assert leaders == sorted([0, 1, 2, 3] * 3)


def test_broker_overrides_parse() -> None:
    assert parse_broker_overrides(["1:broker.rack=b", "2:broker.rack = c", "1:a=b"]) == {
        1: {"broker.rack": "b", "a": "b"}, 2: {"broker.rack": "c"}}
    for bad in ("broker.rack=b", "x:broker.rack=b", "1:broker.rack"):
        with pytest.raises(OverrideError):
            parse_broker_overrides([bad])
