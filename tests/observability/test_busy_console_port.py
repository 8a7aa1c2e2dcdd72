"""Three `wherry server --zookeeper` processes on one machine whose HTTP listeners all ask for
the same port (as the default 9644 does; here one free port chosen for the test, so a console
a user already runs on 9644 changes nothing): all three start and serve, the first on that
port, the other two each say in one line where their console went instead; every broker's
`/metrics` carries the process metrics. Skipped without ZooKeeper (failed in CI). And an
address the listener cannot bind at all: the broker serves without it, after one line."""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.helpers import create_topic
from tests.observability.scrape import get, metrics
from wherry.testing.cluster import DevCluster, ZkCluster
from wherry.testing.metadata_probe import fetch_metadata
from wherry.testing.zookeeper import ZooKeeperServer, find_free_port

CONSOLE_AT = re.compile(r"wherry broker \d+ metrics and console on (http://\S+)")
MOVED = "is in use; metrics and console on"


def test_three_brokers_wanting_one_console_port_all_start_and_say_where_it_is(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    wanted = find_free_port()
    with ZkCluster(
        tmp_path / "cluster",
        brokers=3,
        zookeeper=zookeeper,
        session_timeout_ms=20_000,
        start_timeout_s=60,
        overrides={"http.listeners": f"http://127.0.0.1:{wanted}"},
    ) as c:
        assert all(c.is_running(b) for b in c.broker_ids)
        view = fetch_metadata(c.address(0), [], timeout_s=5)
        assert sorted(view.brokers) == [0, 1, 2]

        # Each says where its console is; one got the port asked for, the others moved.
        urls: dict[int, str] = {}
        for b in c.broker_ids:
            found = CONSOLE_AT.findall(c.output(b))
            assert len(found) == 1, c.output(b)[-3000:]
            urls[b] = found[0]
        assert len(set(urls.values())) == 3, urls
        first = [b for b, u in urls.items() if u == f"http://127.0.0.1:{wanted}"]
        assert len(first) == 1, urls
        for b in c.broker_ids:
            moved = [line for line in c.output(b).splitlines() if MOVED in line]
            if b in first:
                assert moved == [], moved
            else:
                assert len(moved) == 1, c.output(b)[-3000:]
                assert f"http://127.0.0.1:{wanted}" in moved[0]
                assert f"metrics and console on {urls[b]} instead" in moved[0]
            assert "Traceback" not in c.output(b)

        # They serve: a record produced through one comes back to a consumer.
        t = f"busy-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, t, partitions=1, replication_factor=3)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
        p.produce(t, b"round trip")
        assert p.flush(30) == 0
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "busy",
                         "auto.offset.reset": "earliest", "log_level": 0})
        try:
            cons.subscribe([t])
            got = None
            deadline = time.monotonic() + 30
            while got is None and time.monotonic() < deadline:
                msg = cons.poll(0.5)
                if msg is not None and msg.error() is None:
                    got = msg.value()
            assert got == b"round trip"
        finally:
            cons.close()

        # Every console answers where it said, with the process metrics on /metrics.
        for u in urls.values():
            assert get(f"{u}/healthz") == (200, "ok\n")
            m = metrics(u)
            assert m[("process_resident_memory_bytes", ())] > 10 << 20
            assert m[("process_open_fds", ())] > 3
            assert m[("process_cpu_seconds_total", ())] > 0
            started = m[("process_start_time_seconds", ())]
            assert time.time() - 600 < started <= time.time()
            assert {"python_info", "python_gc_collections_total"} <= {name for name, _ in m}


def test_a_console_address_not_of_this_machine_leaves_the_broker_serving_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "wherry.observability")
    elsewhere = {"http.listeners": "http://192.0.2.1:9644"}  # TEST-NET-1: no machine has it
    with DevCluster(tmp_path, brokers=1, overrides=elsewhere) as c:
        c.wait_for_controller()
        assert c.http_url(0) is None
        assert sorted(fetch_metadata(c.bootstrap, [], timeout_s=5).brokers) == [0]
    lines = [r.getMessage() for r in caplog.records if "HTTP listener" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("[Broker id=0] HTTP listener http://192.0.2.1:9644 (http.listeners)")
    assert lines[0].endswith("running without metrics and console")
