"""Connection and memory limits of a real `wherry server`: 500 connections announcing 100 MiB
frames and trickling bytes hold what arrived, not what was announced, are closed once they
go quiet, and a confluent-kafka producer on another connection is served all along; an
address over max.connections.per.ip is refused while an override lets another open more."""

from __future__ import annotations

import os
import socket
import struct
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


def test_trickling_100_mib_frames_hold_no_memory_and_are_closed_when_quiet(
    limited_broker: BrokerProcess,
) -> None:
    broker = limited_broker
    create_topic(broker.bootstrap, "probe")
    probe = LatencyProbe(broker.bootstrap, "probe").start()
    socks: list[socket.socket] = []
    try:
        assert wait_until(lambda: len(probe.latencies) >= 50, 20)
        baseline = _rss(broker.pid)
        host, port = broker.bootstrap.rsplit(":", 1)
        for _ in range(500):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(struct.pack(">i", 100 * MiB))  # announces 100 MiB
            socks.append(s)
        for s in socks:
            s.setblocking(False)
        during = len(probe.latencies)
        chunk = os.urandom(4096)
        peak = baseline
        # every connection gets 4 KiB every 250 ms for 6 s: 96 KiB each, 48 MiB in all
        t_end = time.monotonic() + 6
        while time.monotonic() < t_end:
            round_start = time.monotonic()
            for s in socks:
                try:
                    s.send(chunk)
                except BlockingIOError:
                    pass  # its socket buffer is full: the broker pauses it (pool), fine
            peak = max(peak, _rss(broker.pid))
            time.sleep(max(0.0, 0.25 - (time.monotonic() - round_start)))
        quiet = time.monotonic()
        assert not any(_closed_now(s) for s in socks)  # all kept open while trickling
        # all closed as idle within 3 s of going quiet
        open_socks = set(range(len(socks)))
        while open_socks and time.monotonic() - quiet < 5:
            for i in list(open_socks):
                if _closed_now(socks[i]):
                    open_socks.discard(i)
            time.sleep(0.05)
        closed_after = time.monotonic() - quiet
        assert not open_socks, f"{len(open_socks)} connections still open"
        assert closed_after < 3.0, closed_after
        peak = max(peak, _rss(broker.pid))
        # what arrived (48 MiB) is within the pool; nothing near 500 x 100 MiB
        assert peak - baseline < POOL + 64 * MiB, (baseline, peak)
        time.sleep(0.5)
        p99 = probe.p99_ms(during)
        print(f"rss baseline {baseline / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB; all closed "
              f"{closed_after:.2f} s after going quiet; producer p99 {p99:.1f} ms over "
              f"{len(probe.latencies) - during} deliveries")
        assert len(probe.latencies) - during > 200
        assert p99 < 50, p99
        assert not probe.failures
        log = broker.log_text()
        assert "Closed" in log and "idle connection" in log
        assert "Traceback" not in log
    finally:
        probe.stop()
        for s in socks:
            s.close()


def _closed_now(sock: socket.socket) -> bool:
    """Whether the broker has closed `sock` (without waiting)."""
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
