"""Connection and memory limits of a real `wherry server`: 500 connections announcing 100 MiB
frames and trickling bytes hold what arrived, not what was announced, are closed once they
go quiet, and a confluent-kafka producer on another connection is served all along; an
address over max.connections.per.ip is refused while an override lets another open more."""

from __future__ import annotations

import json
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic
from tests.kafka_wire import encode_request, is_closed, read_response

MiB = 1 << 20
POOL = 100 * MiB  # queued.max.request.bytes: at least socket.request.max.bytes (100 MiB)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class LatencyProbe:
    """A confluent-kafka producer sending a record every 20 ms from its own thread; the
    delivery latency (produce to delivery report) of each."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                  "acks": "all", "log_level": 0})
        self.topic = topic
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()

            def report(err: object, _msg: object, sent: float = sent) -> None:
                if err is not None:
                    self.failures.append(str(err))
                else:
                    self.latencies.append(time.monotonic() - sent)

            self.producer.produce(self.topic, b"v" * 100, on_delivery=report)
            deadline = time.monotonic() + 0.02
            while time.monotonic() < deadline:
                self.producer.poll(0.005)
        self.producer.flush(10)

    def start(self) -> LatencyProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)

    def p99_ms(self, since: int = 0) -> float:
        values = sorted(self.latencies[since:])
        assert values, "no delivery"
        return values[min(len(values) - 1, int(len(values) * 0.99))] * 1000


@pytest.fixture
def limited_broker(tmp_path: Path) -> BrokerProcess:
    b = BrokerProcess(tmp_path / "data", overrides=[
        "connections.max.idle.ms=2000",
        f"queued.max.request.bytes={POOL}",
    ]).start()
    yield b  # type: ignore[misc]
    b.stop()


# The trickling clients, in a process of their own (so that the latency probe's thread does
# not wait for this process's GIL): 500 connections announce 100 MiB frames, then each gets
# 4 KiB every 250 ms for 6 s (96 KiB each, 48 MiB in all), then nothing; reports how long
# after going quiet the broker had closed them all.
TRICKLER = r"""
import json, os, socket, struct, sys, time
host, port, n, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(struct.pack(">i", 100 << 20))
    s.setblocking(False)
    socks.append(s)
print("connected", flush=True)
chunk = os.urandom(4096)
end = time.monotonic() + seconds
while time.monotonic() < end:
    started = time.monotonic()
    for s in socks:
        try:
            s.send(chunk)
        except BlockingIOError:
            pass
    time.sleep(max(0.0, 0.25 - (time.monotonic() - started)))
quiet = time.monotonic()

def closed(s):
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True

early = sum(closed(s) for s in socks)
print("quiet", flush=True)
still = set(range(n))
while still and time.monotonic() - quiet < 8:
    for i in list(still):
        if closed(socks[i]):
            still.discard(i)
    time.sleep(0.05)
print(json.dumps({"closed_while_trickling": early, "still_open": len(still),
                  "closed_after": time.monotonic() - quiet}), flush=True)
"""


def _trickle_round(broker: BrokerProcess, probe: LatencyProbe) -> tuple[float, int, float]:
    """One round of the trickling clients: (seconds until all were closed after going quiet,
    the broker's peak RSS, the probe's p99 in ms while they were connected)."""
    host, port = broker.bootstrap.rsplit(":", 1)
    trickler = subprocess.Popen(
        [sys.executable, "-c", TRICKLER, host, port, "500", "6"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(line) for line in trickler.stdout],  # type: ignore[union-attr]
            daemon=True,
        ).start()
        assert lines.get(timeout=30).strip() == "connected"
        during = len(probe.latencies)
        peak = 0
        report = None
        deadline = time.monotonic() + 40
        while report is None and time.monotonic() < deadline:
            peak = max(peak, _rss(broker.pid))
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if line.startswith("{"):
                report = json.loads(line)
        assert report is not None, "the trickling clients did not finish"
        assert report["closed_while_trickling"] == 0  # all kept open while trickling
        assert report["still_open"] == 0, report
        assert len(probe.latencies) - during > 200
        return report["closed_after"], max(peak, _rss(broker.pid)), probe.p99_ms(during)
    finally:
        trickler.kill()
        trickler.wait(10)


@pytest.mark.slow
def test_trickling_100_mib_frames_hold_no_memory_and_are_closed_when_quiet(
    limited_broker: BrokerProcess,
) -> None:
    """Each round must hold the memory and idle bounds; the producer's p99 must be under
    50 ms in one of three rounds (the machine is shared: a neighbour's burst can stall any
    process for longer) and under 500 ms in all."""
    broker = limited_broker
    create_topic(broker.bootstrap, "probe")
    probe = LatencyProbe(broker.bootstrap, "probe").start()
    try:
        assert wait_until(lambda: len(probe.latencies) >= 50, 20)
        baseline = _rss(broker.pid)
        p99s: list[float] = []
        for _ in range(3):
            closed_after, peak, p99 = _trickle_round(broker, probe)
            print(f"rss baseline {baseline / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB; all "
                  f"closed {closed_after:.2f} s after going quiet; producer p99 {p99:.1f} ms")
            # all closed as idle within 3 s of going quiet
            assert closed_after < 3.0, closed_after
            # what arrived (48 MiB) is within the pool; nothing near 500 x 100 MiB
            assert peak - baseline < POOL + 64 * MiB, (baseline, peak)
            assert p99 < 500, p99
            p99s.append(p99)
            if p99 < 50:
                break
        assert min(p99s) < 50, p99s
        assert not probe.failures
        log = broker.log_text()
        assert "idle connections (connections.max.idle.ms=2000)" in log
        assert "Traceback" not in log
    finally:
        probe.stop()


def _closed_now(sock: socket.socket) -> bool:
    """Whether the broker has closed `sock` (without waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _api_versions(sock: socket.socket) -> int:
    sock.sendall(encode_request(18, 3, {"client_software_name": "t",
                                        "client_software_version": "1"}))
    return int(read_response(sock, 18, 3).error_code)


def _connect(port: int, source: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def test_max_connections_per_ip_and_an_override(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides=[
        "max.connections.per.ip=10",
        "max.connections.per.ip.overrides=127.0.0.2:20",
    ]).start()
    socks: list[socket.socket] = []
    try:
        first = [_connect(broker.port, "127.0.0.1") for _ in range(10)]
        socks += first
        assert [_api_versions(s) for s in first] == [0] * 10
        eleventh = _connect(broker.port, "127.0.0.1")
        socks.append(eleventh)
        assert is_closed(eleventh)
        assert [_api_versions(s) for s in first] == [0] * 10  # the first ten still work
        other = [_connect(broker.port, "127.0.0.2") for _ in range(20)]
        socks += other
        assert [_api_versions(s) for s in other] == [0] * 20
        over = _connect(broker.port, "127.0.0.2")
        socks.append(over)
        assert is_closed(over)
        assert wait_until(lambda: "maximum of 20 connections" in broker.log_text(), 5)
        log = broker.log_text()
        assert ("Rejected connection from /127.0.0.1, address already has the configured "
                "maximum of 10 connections.") in log
        assert "supplied but are not used" not in log
        from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

        for s in first:  # the admin client's connections come from 127.0.0.1 too
            s.close()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        resource = ConfigResource(ResourceType.BROKER, "0")
        described = admin.describe_configs([resource])[resource].result(20)
        assert described["max.connections.per.ip"].value == "10"
        assert not described["max.connections.per.ip"].is_default
        assert described["max.connections.per.ip.overrides"].value == "127.0.0.2:20"
        assert described["connections.max.idle.ms"].value == "600000"
        assert described["connections.max.idle.ms"].is_default
        assert described["queued.max.request.bytes"].value == "-1"
    finally:
        for s in socks:
            s.close()
        broker.stop()


def test_small_memory_pool_serves_concurrent_producers_without_loss(tmp_path: Path) -> None:
    """queued.max.request.bytes of 2 MiB against four producers sending 1 MiB requests at
    once: connections wait for memory in turn, and every acknowledged record reads back
    exactly as sent."""
    from confluent_kafka import Consumer, TopicPartition

    broker = BrokerProcess(tmp_path / "data", overrides=[
        "socket.request.max.bytes=1100000",
        "queued.max.request.bytes=2200000",
        "message.max.bytes=1100000",
    ]).start()
    try:
        create_topic(broker.bootstrap, "pooled", partitions=4)
        sent: dict[bytes, bytes] = {}
        acked: list[bytes] = []
        errors: list[str] = []
        lock = threading.Lock()

        def produce(worker: int) -> None:
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                          "batch.size": 1_000_000, "message.max.bytes": 1_000_000,
                          "acks": "all", "log_level": 0})

            def report(err: object, msg: object) -> None:
                with lock:
                    if err is not None:
                        errors.append(str(err))
                    else:
                        acked.append(msg.key())  # type: ignore[attr-defined]

            for i in range(600):
                key = f"{worker}-{i}".encode()
                value = os.urandom(8000)
                with lock:
                    sent[key] = value
                while True:
                    try:
                        p.produce("pooled", value, key, partition=i % 4, on_delivery=report)
                        break
                    except BufferError:
                        p.poll(0.05)
                p.poll(0)
            assert p.flush(60) == 0

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert not errors and len(acked) == 2400
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                             "enable.auto.commit": False, "log_level": 0})
        consumer.assign([TopicPartition("pooled", p, 0) for p in range(4)])
        got: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < 2400 and time.monotonic() < deadline:
            for m in consumer.consume(500, 1):
                if m.error() is None:
                    got[m.key()] = m.value()
        consumer.close()
        assert got == sent
        assert "Traceback" not in broker.log_text()
    finally:
        broker.stop()


def test_announced_frames_take_no_memory_with_the_default_settings(tmp_path: Path) -> None:
    """Three connections announcing 100 MiB and sending 64 KiB each (no pool configured):
    the broker holds what arrived, not 300 MiB; they are answered nothing and stay open."""
    broker = BrokerProcess(tmp_path / "data").start()
    socks: list[socket.socket] = []
    try:
        time.sleep(0.5)
        baseline = _rss(broker.pid)
        host, port = broker.bootstrap.rsplit(":", 1)
        for _ in range(3):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(struct.pack(">i", 100 * MiB) + os.urandom(64 * 1024))
            socks.append(s)
        time.sleep(1.0)
        grown = _rss(broker.pid) - baseline
        assert grown < 16 * MiB, grown / MiB
        assert not any(_closed_now(s) for s in socks)
        # the broker still answers others
        with socket.create_connection((host, int(port)), timeout=10) as other:
            assert _api_versions(other) == 0
    finally:
        for s in socks:
            s.close()
        broker.stop()
