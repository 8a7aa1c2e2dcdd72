"""A tiny blocking Kafka-protocol client for tests that need exact bytes on the wire."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader

from wherry.protocol import codec


def connect(bootstrap: str, timeout_s: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout_s)
    return s


def encode_request(api_key: int, version: int, body: dict[str, Any] | Any,
                   correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    return codec.encode_request(api_key, version, correlation_id, body, client_id=client_id)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        out += chunk
    return bytes(out)


def read_response(sock: socket.socket, api_key: int, version: int) -> Any:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    raw = recv_exact(sock, size)
    cls = load_response_schema(api_key, version)
    hdr = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
    resp, _ = entity_reader(cls)(raw, hdr)
    return resp


def call(
    bootstrap_or_sock: str | socket.socket, api_key: int, version: int, body: dict[str, Any] | Any
) -> Any:
    sock = connect(bootstrap_or_sock) if isinstance(bootstrap_or_sock, str) else bootstrap_or_sock
    try:
        sock.sendall(encode_request(api_key, version, body))
        return read_response(sock, api_key, version)
    finally:
        if isinstance(bootstrap_or_sock, str):
            sock.close()


def is_closed(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True when the broker closed the connection (EOF or reset) within the timeout."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def produce_body(
    topic: str, records: bytes, *, partition: int = 0, acks: int = -1
) -> dict[str, Any]:
    """A Produce request body (v3+) carrying ``records`` for one partition."""
    return {
        "acks": acks,
        "timeout": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def fetch_body(
    topic: str, *, partition: int = 0, offset: int = 0, leader_epoch: int = -1
) -> dict[str, Any]:
    """A Fetch v12 request body for one partition from ``offset`` (up to 1 MiB, no waiting),
    as a consumer sends it."""
    wanted = {
        "partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
        "current_leader_epoch": leader_epoch, "log_start_offset": -1, "last_fetched_epoch": -1,
    }
    return {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [wanted]}],
        "forgotten_topics_data": [], "rack_id": "",
    }
