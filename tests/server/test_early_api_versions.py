"""ApiVersions while a broker starts (issue 15, start <= 150 ms): answered by the hand-written
codec (`protocol.api_versions_codec`) before the kio codec is imported, with the bytes the kio
path gives once started; real clients that connect during the start work on."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.kafka_wire import recv_exact
from wherry.protocol.codec import decode_response, encode_request, encode_response
from wherry.server.handlers import SUPPORTED_VERSIONS
from wherry.server.handlers.api_versions import (
    DEFAULT_TRANSACTION_VERSION,
    answer,
    features_of,
    unsupported_version_response,
)
from wherry.testing.cluster import stop_process
from wherry.testing.zookeeper import find_free_port

REPO = Path(__file__).resolve().parents[2]


def _api_versions(version: int, correlation_id: int) -> bytes:
    body = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    return encode_request(18, version, correlation_id, body, client_id="early")


def _kio_answer(version: int, correlation_id: int) -> bytes:
    lo, hi = SUPPORTED_VERSIONS[18]
    if lo <= version <= hi:  # a broker of the default `transaction.version`
        body = answer(features_of(DEFAULT_TRANSACTION_VERSION), version)
        return encode_response(18, version, correlation_id, body)
    return encode_response(18, 0, correlation_id, unsupported_version_response())


def test_a_broker_not_started_answers_every_version_as_kio_does(tmp_path: Path) -> None:
    asyncio.run(_every_version(tmp_path))


async def _every_version(tmp_path: Path) -> None:
    from wherry.security.scram_store import ScramCredentialCache
    from wherry.server.broker import Broker
    from wherry.server.config import load_config
    from wherry.server.listener_security import broker_security
    from wherry.server.network import ConnectionInfo
    from wherry.server.sasl_gate import SaslGate

    cfg = load_config(
        None,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required user_alice="alice-secret";',
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(tmp_path),
            "http.listeners": "",
        },
    )
    broker = Broker(cfg)  # not started: only ApiVersions is answered
    broker.security = broker_security(cfg.raw, cfg.listeners, cfg.advertised)
    broker.sasl_gate = SaslGate(broker.security, ScramCredentialCache)
    for listener in ("PLAINTEXT", "SASL_PLAINTEXT"):  # the early codec, the SASL gate's path
        conn = ConnectionInfo("127.0.0.1:1", listener, 1)
        for version in (*range(0, SUPPORTED_VERSIONS[18][1] + 2), 77):
            frame = _api_versions(min(version, 4), 1000 + version)
            frame = frame[:6] + struct.pack(">h", version) + frame[8:]  # the asked version
            answer = await asyncio.wait_for(broker.handle_frame(conn, memoryview(frame[4:])), 5)
            assert answer == _kio_answer(version, 1000 + version), (listener, version)


def _probe(port: int, found: dict[str, object], stop: threading.Event) -> None:
    """Ask ApiVersions v3 as soon as the port accepts (as `bench/run.py` f1 does)."""
    request = _api_versions(3, 7)
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(request)
                (size,) = struct.unpack(">i", recv_exact(s, 4))
                found["answer"] = struct.pack(">i", size) + recv_exact(s, size)
                found["at"] = time.monotonic()
                return
        except OSError:
            time.sleep(0.001)


@pytest.mark.slow
def test_real_clients_connecting_during_the_start(tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    port = find_free_port()
    found: dict[str, object] = {}
    stop = threading.Event()
    probe = threading.Thread(target=_probe, args=(port, found, stop), daemon=True)
    probe.start()
    cmd = [sys.executable, "-m", "wherry", "server", "--listeners",
           f"PLAINTEXT://127.0.0.1:{port}", "--log-dirs", str(tmp_path / "data"),
           "--override", "http.listeners=", "--override", "num.partitions=1"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    ready_at: list[float] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "ready on" in line and not ready_at:
                ready_at.append(time.monotonic())

    threading.Thread(target=pump, daemon=True).start()
    bootstrap = f"127.0.0.1:{port}"
    # Both clients are made while the broker starts, retrying the connection quickly.
    producer = Producer({"bootstrap.servers": bootstrap, "reconnect.backoff.ms": 1,
                         "reconnect.backoff.max.ms": 10, "linger.ms": 0})
    consumer: KafkaConsumer | None = None
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, reconnect_backoff_ms=1,
                                 reconnect_backoff_max_ms=10, bootstrap_timeout_ms=30000,
                                 request_timeout_ms=30000, consumer_timeout_ms=20000,
                                 auto_offset_reset="earliest", group_id=None)
        probe.join(30)
        assert "answer" in found, "".join(lines)
        # The first answer came before the start completed (the early codec) and is, byte for
        # byte, what the started broker answers.
        deadline = time.monotonic() + 30
        while not ready_at:
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.01)
        assert found["at"] < ready_at[0], "the probe was answered only after the start"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(_api_versions(3, 7))
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            assert found["answer"] == struct.pack(">i", size) + recv_exact(s, size)
        _, resp = decode_response(18, 3, bytes(found["answer"])[4:], expect_correlation_id=7)  # type: ignore[arg-type]
        assert {int(k.api_key) for k in resp.api_keys} == set(SUPPORTED_VERSIONS)

        delivered: list[object] = []
        producer.produce("early", b"v", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0 and delivered == [None], (delivered, "".join(lines))
        from kafka import TopicPartition

        tp = TopicPartition("early", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = next(iter(consumer))
        assert got.value == b"v"
    finally:
        stop.set()
        if consumer is not None:
            consumer.close()
        stop_process(proc, 30.0)
