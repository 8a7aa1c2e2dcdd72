"""Ask one broker for its metadata over the wire (a blocking Metadata request).

Tests and cluster helpers use it to see what a particular broker answers — its metadata
cache — rather than what a client library merges from several brokers. `fetch_metadata`
sends Metadata v12 (all topics, or the named ones, never auto-creating) and returns a
`ClusterView`.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader

from wherry.protocol.codec import encode_request
from wherry.testing.sockets import recv_exact

__all__ = ["ClusterView", "PartitionView", "fetch_metadata", "parse_address"]

METADATA_KEY = 3
METADATA_VERSION = 12
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class PartitionView:
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One broker's answer: live brokers, controller, and per topic its partitions."""

    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, tuple[str, int]]
    topics: Mapping[str, Mapping[int, PartitionView]]
    topic_errors: Mapping[str, int]

    def partitions(self, topic: str) -> Mapping[int, PartitionView]:
        return self.topics.get(topic, {})

    def leaders(self, topic: str) -> dict[int, int]:
        return {p: v.leader for p, v in self.partitions(topic).items()}


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    return recv_exact(sock, n, closed="connection closed by the broker")


def fetch_metadata(
    address: str, topics: Iterable[str] | None = None, *, timeout_s: float = 5.0
) -> ClusterView:
    """Send one Metadata request to the broker at ``host:port`` and return its answer.

    Raises `OSError` (connection refused, timeout) when the broker does not answer.
    """
    body: dict[str, Any] = {
        "topics": None if topics is None else [{"name": t, "topic_id": _ZERO_UUID} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    frame = encode_request(METADATA_KEY, METADATA_VERSION, 1, body, client_id="wherry-probe")
    with socket.create_connection(parse_address(address), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(frame)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        raw = _recv_exact(sock, size)
    cls = load_response_schema(METADATA_KEY, METADATA_VERSION)
    # Response header v1: correlation id, then an empty tagged-field section.
    resp: Any = entity_reader(cls)(raw, 5)[0]
    views: dict[str, dict[int, PartitionView]] = {}
    errors: dict[str, int] = {}
    for t in resp.topics:
        name = str(t.name)
        if t.error_code:
            errors[name] = int(t.error_code)
            continue
        views[name] = {
            int(p.partition_index): PartitionView(
                int(p.error_code),
                int(p.leader_id),
                int(p.leader_epoch),
                tuple(int(r) for r in p.replica_nodes),
                tuple(int(r) for r in p.isr_nodes),
                tuple(int(r) for r in p.offline_replicas),
            )
            for p in t.partitions
        }
    return ClusterView(
        cluster_id=resp.cluster_id,
        controller_id=int(resp.controller_id),
        brokers={int(b.node_id): (str(b.host), int(b.port)) for b in resp.brokers},
        topics=views,
        topic_errors=errors,
    )
