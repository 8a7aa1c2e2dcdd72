"""A lean blocking Kafka client for the source's range reads: Fetch straight to the leader.

A range reader needs the record bytes of one partition from one offset on, as the broker
sends them; librdkafka hands them out one message object at a time. `PartitionClient`
speaks the protocol itself over plain sockets: Metadata (v9) for the partition's leader,
ListOffsets (v6) for the earliest and latest offsets, Fetch (v12, the lean codec of
`protocol.fetch_request` / `protocol.fetch_response`: records as a view of the answer) from
the leader. It keeps one connection per broker, for the next range the process reads
(`kept_client`). Used only for PLAINTEXT clusters and the client settings it honours
(`RAW_SETTINGS`); anything else is read through librdkafka.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from wherry.protocol.codec import ResponseDecodeError, decode_response, encode_request
from wherry.protocol.fetch_request import encode_fetch_v12
from wherry.protocol.fetch_response import PartitionAnswer, decode_fetch_v12_response

_SIZE: Final = struct.Struct(">i")
_API_VERSIONS, _METADATA, _LIST_OFFSETS, _FETCH = 18, 3, 2, 1
_VERSIONS: Final = {_METADATA: 9, _LIST_OFFSETS: 6, _FETCH: 12}
MAX_ANSWER_BYTES: Final = 256 << 20

NONE, OFFSET_OUT_OF_RANGE = 0, 1
LEADER_ERRORS: Final = frozenset({3, 5, 6, 9, 56, 74, 75})
"""Errors that a newer leader or a retry cures: UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH."""

RAW_SETTINGS: Final = frozenset(
    {
        # what this client honours
        "bootstrap.servers",
        "client.id",
        "isolation.level",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.wait.max.ms",
        "fetch.min.bytes",
        "security.protocol",  # PLAINTEXT only
        # librdkafka consumer settings with no bearing on a range read by offsets
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "fetch.queue.backoff.ms",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "socket.connection.setup.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "topic.metadata.refresh.interval.ms",
        "metadata.max.age.ms",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "log_level",
    }
)


def raw_fetch_possible(kafka: Mapping[str, str]) -> bool:
    """Whether the ``kafka.*`` settings let this client read (else librdkafka reads)."""
    if not set(kafka) <= RAW_SETTINGS:
        return False
    return kafka.get("security.protocol", "plaintext").strip().lower() == "plaintext"


class FetchUnavailable(ConnectionError):
    """The brokers could not be reached or answered in a way this client does not read."""


class PartitionError(RuntimeError):
    """The leader answered a request about a partition with an error code."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: Kafka error code {code}")
        self.code = code


class NoSuchPartition(PartitionError):
    """The cluster's metadata has no such topic or partition (not worth waiting for)."""


@dataclass(frozen=True, slots=True)
class Settings:
    servers: str
    client_id: str
    read_committed: bool
    max_bytes: int
    partition_max_bytes: int | None  # None: sized by the reader
    max_wait_ms: int
    min_bytes: int
    timeout_s: float

    @classmethod
    def of(cls, servers: str, kafka: Mapping[str, str], timeout_ms: int) -> Settings:
        level = kafka.get("isolation.level", "read_uncommitted").strip().lower()
        given = kafka.get("max.partition.fetch.bytes")
        return cls(
            servers,
            kafka.get("client.id", "wherry-spark"),
            level == "read_committed",
            int(kafka.get("fetch.max.bytes", 52428800)),
            int(given) if given is not None else None,
            int(kafka.get("fetch.wait.max.ms", 10)),
            int(kafka.get("fetch.min.bytes", 1)),
            timeout_ms / 1000,
        )


class _Connection:
    """One blocking socket to a broker; size-prefixed frames, answers read whole."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def receive(self) -> bytearray:
        head = self._exactly(4)
        (size,) = _SIZE.unpack(head)
        if not 4 <= size <= MAX_ANSWER_BYTES:
            raise OSError(f"answer of {size} bytes")
        return self._exactly(size)

    def _exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise OSError("connection closed by the broker")
            got += k
        return buf

    def close(self) -> None:
        self.sock.close()


def _addresses(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        item = item.strip().split("://")[-1]
        host, _, port = item.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


class PartitionClient:
    """Requests about partitions to their leaders, over connections kept between calls."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._conns: dict[tuple[str, int], _Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._correlation = 0
        self._checked: set[tuple[str, int]] = set()
        self.bytes_per_record = 0.0
        """Record bytes per offset in the last answer read (0: none yet): how much the next
        range's first Fetch asks for."""

    # --- connections ---------------------------------------------------------------------

    def _next_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def _connection(self, address: tuple[str, int]) -> _Connection:
        conn = self._conns.get(address)
        if conn is None:
            try:
                conn = _Connection(*address, self.settings.timeout_s)
            except OSError as e:
                raise FetchUnavailable(f"cannot connect to {address[0]}:{address[1]}: {e}") from e
            self._conns[address] = conn
            if address not in self._checked:
                self._check_versions(address, conn)
        return conn

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for address in list(self._conns):
            self._drop(address)

    def _call(self, address: tuple[str, int], api_key: int, version: int, body: Any) -> Any:
        cid = self._next_id()
        frame = encode_request(api_key, version, cid, body, client_id=self.settings.client_id)
        conn = self._connection(address)
        try:
            conn.send(frame)
            answer = conn.receive()
            return decode_response(api_key, version, bytes(answer), expect_correlation_id=cid)[1]
        except (OSError, ResponseDecodeError) as e:
            self._drop(address)
            raise FetchUnavailable(f"request to {address[0]}:{address[1]} failed: {e}") from e

    def _check_versions(self, address: tuple[str, int], conn: _Connection) -> None:
        cid = self._next_id()
        try:
            conn.send(encode_request(_API_VERSIONS, 0, cid, {}, client_id=self.settings.client_id))
            answer = decode_response(
                _API_VERSIONS, 0, bytes(conn.receive()), expect_correlation_id=cid
            )
        except (OSError, ResponseDecodeError) as e:
            self._drop(address)
            raise FetchUnavailable(f"ApiVersions to {address[0]}:{address[1]}: {e}") from e
        ranges = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer[1].api_keys
        }
        for key, version in _VERSIONS.items():
            low, high = ranges.get(key, (1, 0))
            if not low <= version <= high:
                self._drop(address)
                raise FetchUnavailable(f"the broker does not serve API {key} v{version}")
        self._checked.add(address)

    # --- metadata ----------------------------------------------------------------------------

    def refresh(self, topic: str) -> None:
        """Learn the brokers and the leaders of ``topic``'s partitions (from the first
        bootstrap server or known broker that answers)."""
        body = {
            "topics": [{"name": topic}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        errors = []
        for address in [*_addresses(self.settings.servers), *self._brokers.values()]:
            try:
                answer = self._call(address, _METADATA, _VERSIONS[_METADATA], body)
            except FetchUnavailable as e:
                errors.append(str(e))
                continue
            self._brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in answer.brokers}
            for t in answer.topics:
                for p in t.partitions:
                    self._leaders[(str(t.name), int(p.partition_index))] = int(p.leader_id)
            return
        raise FetchUnavailable("no broker answered a Metadata request: " + "; ".join(errors))

    def leader(self, topic: str, partition: int) -> tuple[str, int]:
        node = self._leaders.get((topic, partition))
        if node is None or node not in self._brokers:
            self.refresh(topic)
            node = self._leaders.get((topic, partition))
        if node is None:
            raise NoSuchPartition(3, f"the cluster knows no partition {topic}-{partition}")
        if node < 0 or node not in self._brokers:
            raise PartitionError(5, f"no leader known for {topic}-{partition}")
        return self._brokers[node]

    def forget(self, topic: str, partition: int) -> None:
        """After a leader error: ask the cluster again next time."""
        node = self._leaders.pop((topic, partition), None)
        if node is not None and node in self._brokers:
            self._drop(self._brokers[node])

    # --- requests ----------------------------------------------------------------------------

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> int:
        """The offset ListOffsets gives for ``timestamp`` (-2 earliest, -1 latest), at the
        client's isolation level."""
        body = {
            "replica_id": -1,
            "isolation_level": 1 if self.settings.read_committed else 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "current_leader_epoch": -1,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        }
        answer = self._call(self.leader(topic, partition), _LIST_OFFSETS, 6, body)
        part = answer.topics[0].partitions[0]
        if int(part.error_code) != NONE:
            raise PartitionError(int(part.error_code), f"ListOffsets of {topic}-{partition}")
        return int(part.offset)

    def send_fetch(self, topic: str, partition: int, offset: int, partition_bytes: int) -> int:
        """Send a Fetch for ``offset`` to the leader; returns the correlation id to
        `receive_fetch` its answer with (one answer may be awaited per leader at a time)."""
        s = self.settings
        address = self.leader(topic, partition)
        cid = self._next_id()
        frame = encode_fetch_v12(
            cid,
            s.client_id,
            replica_id=-1,
            max_wait_ms=s.max_wait_ms,
            min_bytes=s.min_bytes,
            max_bytes=s.max_bytes,
            isolation_level=1 if s.read_committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=[(topic, [(partition, -1, offset, -1, -1, partition_bytes)])],
            forgotten=[],
        )
        try:
            self._connection(address).send(frame)
        except OSError as e:
            self._drop(address)
            raise FetchUnavailable(f"Fetch to {address[0]}:{address[1]}: {e}") from e
        return cid

    def receive_fetch(self, topic: str, partition: int, cid: int) -> PartitionAnswer:
        address = self.leader(topic, partition)
        conn = self._conns.get(address)
        try:
            if conn is None:
                raise OSError("the connection was dropped")
            _, answer = decode_fetch_v12_response(conn.receive(), expect_correlation_id=cid)
        except (OSError, ResponseDecodeError) as e:
            self._drop(address)
            raise FetchUnavailable(f"Fetch answer from {address[0]}:{address[1]}: {e}") from e
        if answer.error_code != NONE:
            raise PartitionError(answer.error_code, f"Fetch of {topic}-{partition}")
        for name, parts in answer.responses:
            for part in parts:
                if name == topic and part.partition_index == partition:
                    return part
        raise PartitionError(3, f"the Fetch answer has no {topic}-{partition}")
