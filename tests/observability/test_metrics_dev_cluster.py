"""`/metrics`, `/healthz` and `/readyz` on an in-process 3-broker cluster (each broker its own
HTTP listener on a port the OS chooses, its own registry): a follower stopped leaves its
partitions under-replicated on the leader; back, it rejoins the ISR (an ISR expand on the
leader) and under-replicated returns to 0; request, byte and log metrics move when a client
produces."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer

from tests.helpers import create_topic
from tests.observability.scrape import get, metrics, value
from wherry.testing.cluster import DevCluster, wait_until

RM = "kafka_server_replicamanager_"


def test_metrics_health_and_readiness_follow_a_follower_stopped_and_started(
    tmp_path: Path,
) -> None:
    with DevCluster(
        tmp_path,
        brokers=3,
        http_base_port=0,
        overrides={"replica.lag.time.max.ms": "1000", "auto.leader.rebalance.enable": "false"},
    ) as c:
        c.wait_for_controller()
        url = {b: c.http_url(b) for b in c.broker_ids}
        assert all(u is not None and u.startswith("http://127.0.0.1:") for u in url.values())
        assert len(set(url.values())) == 3
        leader = url[0]
        assert leader is not None
        t = f"m-{uuid.uuid4().hex[:8]}"
        create_topic(c.bootstrap, t, [[0, 1, 2]])
        c.wait_for_topic(t, 1)

        for u in url.values():
            assert get(f"{u}/healthz") == (200, "ok\n")
            assert wait_until(lambda u=u: get(f"{u}/readyz")[0] == 200, 15), get(f"{u}/readyz")
        assert wait_until(lambda: value(leader, RM + "underreplicatedpartitions") == 0, 10)
        assert value(leader, RM + "leadercount") >= 1
        assert value(leader, RM + "partitioncount") >= 1
        controller = c.controller_id
        assert controller is not None
        ctl = url[controller]
        assert ctl is not None
        assert value(ctl, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        others = [u for b, u in url.items() if b != controller]
        assert all(
            value(u, "kafka_controller_kafkacontroller_activecontrollercount") == 0
            for u in others if u is not None
        )

        # A client produces: per-API counters, bytes in, log size move on the leader.
        produced_before = value(leader, "kafka_network_requestmetrics_requests_total",
                                request="Produce")
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
        for i in range(20):
            p.produce(t, f"value-{i}".encode(), partition=0)
        assert p.flush(15) == 0
        m = metrics(leader)
        assert m[("kafka_network_requestmetrics_requests_total",
                  (("request", "Produce"),))] > produced_before
        assert m[("kafka_network_requestmetrics_totaltimems_count",
                  (("request", "Produce"),))] >= 1
        assert m[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", t),))] > 0
        assert m[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", t),))] == 20
        assert m[("kafka_log_log_size", (("partition", "0"), ("topic", t)))] > 0
        assert ("kafka_server_delayedoperationpurgatory_purgatorysize",
                (("delayedOperation", "Produce"),)) in m
        follower_fetches = value(leader, "kafka_network_requestmetrics_requests_total",
                                 request="FetchFollower")
        assert follower_fetches > 0  # followers fetch from the leader over the wire

        # A follower stops: under-replicated on the leader, not ready... it is gone.
        expands = value(leader, RM + "isrexpands_total")
        c.stop_broker(2, controlled=False)
        assert wait_until(lambda: value(leader, RM + "underreplicatedpartitions") >= 1, 15)
        assert value(ctl, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

        # Back: it catches up, rejoins the ISR (an expand), under-replicated falls to 0.
        c.start_broker(2)
        assert wait_until(lambda: value(leader, RM + "underreplicatedpartitions") == 0, 20)
        assert value(leader, RM + "isrexpands_total") > expands
        u2 = c.http_url(2)
        assert u2 == url[2]  # the restarted broker keeps its HTTP port
        assert wait_until(lambda: get(f"{u2}/readyz")[0] == 200, 15), get(f"{u2}/readyz")


def test_clusters_have_no_http_listener_unless_asked(tmp_path: Path) -> None:
    with DevCluster(tmp_path, brokers=1) as c:
        assert c.http_url(0) is None
