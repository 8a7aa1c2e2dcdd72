"""A console lists the consumer groups other brokers coordinate (two `wherry server
--zookeeper` processes): on the broker that does not coordinate the group, `/api/cluster`
shows it with its coordinator, members and lag per partition; on both brokers the end of a
partition held here is read in place and of one held only by the other broker asked of it
(ListOffsets), so both show the whole lag. The
coordinator paused (SIGSTOP: alive in the metadata, silent on the wire), the group stays,
marked stale with its last known lag, within the bounded requests; resumed, it is fresh
again. Skipped without ZooKeeper (failed in CI)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from tests.helpers import create_topic
from tests.observability.scrape import get
from wherry.testing.cluster import ZkCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

GROUP = "watchers"


def _group(url: str) -> dict[str, Any] | None:
    status, body = get(url + "/api/cluster", timeout_s=20)
    assert status == 200, body
    return next((g for g in json.loads(body)["groups"] if g["group"] == GROUP), None)


def test_a_console_shows_the_groups_of_another_broker_and_marks_them_stale_when_it_is_silent(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    with ZkCluster(
        tmp_path / "cluster",
        brokers=2,
        zookeeper=zookeeper,
        session_timeout_ms=30_000,
        http=True,
        overrides={"offsets.topic.num.partitions": "4", "offsets.topic.replication.factor": "2"},
    ) as c:
        t = f"watched-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, t, [[0], [1]])  # each partition on one broker only
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
        for i in range(20):
            p.produce(t, f"v{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 45_000, "log_level": 0})
        paused: int | None = None
        try:
            cons.subscribe([t])
            seen = 0
            deadline = time.monotonic() + 60
            while seen < 20 and time.monotonic() < deadline:
                msg = cons.poll(0.5)
                if msg is not None and msg.error() is None:
                    seen += 1
            assert seen == 20
            cons.commit(asynchronous=False)
            for i in range(10):  # 5 behind on each partition
                p.produce(t, f"late{i}".encode(), partition=i % 2)
            assert p.flush(30) == 0

            # Both consoles: the whole lag, whichever broker holds each partition.
            url = {b: c.http_url(b) for b in c.broker_ids}
            views = {}
            for b, u in url.items():
                assert u is not None
                assert wait_until(
                    lambda u=u: (g := _group(u)) is not None and g["lag"] == 10, 30)
                views[b] = _group(u)
            coordinators = {g["coordinator"] for g in views.values()}
            assert len(coordinators) == 1
            (coordinator,) = coordinators
            console = url[1 - coordinator]
            assert console is not None
            for g in views.values():
                assert g["state"] == "Stable" and len(g["members"]) == 1
                assert g["lag_complete"] and not g["stale"]
                assert [(o["partition"], o["committed"], o["end"], o["lag"])
                        for o in g["offsets"]] == [(0, 10, 15, 5), (1, 10, 15, 5)]

            c.pause(coordinator)
            paused = coordinator
            started = time.monotonic()
            g = _group(console)
            assert time.monotonic() - started < 15
            assert g is not None and g["stale"] and g["lag"] == 10, g
            assert _group(console)["stale"]  # type: ignore[index]
            said = [line for line in c.output(1 - coordinator).splitlines()
                    if f"the groups of broker {coordinator} are not known now" in line]
            assert len(said) == 1, said  # one line, not one per refresh
            c.resume(coordinator)
            paused = None
            assert wait_until(lambda: (g := _group(console)) is not None and not g["stale"], 30)
        finally:
            if paused is not None:
                c.resume(paused)
            cons.close()
