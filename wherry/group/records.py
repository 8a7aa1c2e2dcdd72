"""The `__consumer_offsets` record formats, byte for byte as Apache Kafka stores them.

Every key and value is a 2-byte big-endian version followed by the message at that version
(Kafka's `MessageUtil.toVersionPrefixedBytes`), from the schemas in Kafka's
`group-coordinator/src/main/resources/common/message/`:

* OffsetCommitKey, key versions 0 and 1 (same layout; Kafka 3.9 writes 1):
  group (string), topic (string), partition (int32).
* GroupMetadataKey, key version 2: group (string).
* OffsetCommitValue v0-v4: offset (int64), leaderEpoch (int32, v3+), metadata (string),
  commitTimestamp (int64), expireTimestamp (int64, v1 only); v4 is flexible (compact strings,
  tagged fields). Kafka 3.9 writes v1 when the commit carries an expire timestamp (OffsetCommit
  v2-v4 retention time), else v3.
* GroupMetadataValue v0-v4: protocolType (string), generation (int32), protocol (nullable
  string), leader (nullable string), currentStateTimestamp (int64, v2+), members (array of:
  memberId, groupInstanceId (nullable, v3+), clientId, clientHost, rebalanceTimeout (int32,
  v1+), sessionTimeout (int32), subscription (bytes), assignment (bytes)); v4 is flexible.
  Kafka 3.9 writes v3.

A null value is a tombstone: the offset or group was deleted. `partition_for` places a group
exactly where Kafka does: `Utils.abs(groupId.hashCode()) % partitions` with Java's String hash.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSETS_TOPIC",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_value",
    "encode_offset_commit_value",
    "group_metadata_key",
    "java_string_hash",
    "offset_commit_key",
    "parse_subscription_topics",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE = 1
MAX_OFFSET_COMMIT_VALUE_VERSION = 4
MAX_GROUP_METADATA_VALUE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes that are not a valid record of the expected type and version."""


# --- hashing -----------------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, 32-bit signed overflow."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's Utils.abs(hash) % partitions."""
    h = java_string_hash(group_id)
    return (0 if h == -0x8000_0000 else abs(h)) % partitions


# --- primitive reading / writing ---------------------------------------------------------------


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def string(self, v: str | None) -> None:
        if v is None:
            self.i16(-1)
            return
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise RecordFormatError(f"string of {len(b)} bytes is too long")
        self.i16(len(b))
        self.buf += b

    def bytes_(self, v: bytes | None) -> None:
        if v is None:
            self.i32(-1)
            return
        self.i32(len(v))
        self.buf += v


class _Reader:
    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, pos: int = 0, *, flexible: bool = False) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(
                f"need {n} bytes at position {self.pos}, have {len(self.data) - self.pos}"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            if shift > 28:
                raise RecordFormatError("unsigned varint is too long")
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.i32() if wide else self.i16()

    def nullable_string(self) -> str | None:
        n = self._length(False)
        if n < 0:
            if n == -1:
                return None
            raise RecordFormatError(f"invalid string length {n}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from e

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null value for a non-nullable string")
        return s

    def bytes_(self) -> bytes:
        n = self._length(True)
        if n < 0:
            if n == -1:
                return b""
            raise RecordFormatError(f"invalid bytes length {n}")
        return bytes(self._take(n))

    def array_length(self) -> int:
        n = self._length(True)
        if n < -1:
            raise RecordFormatError(f"invalid array length {n}")
        if n > len(self.data) - self.pos:  # every item takes a byte at least
            raise RecordFormatError(
                f"array of {n} items but only {len(self.data) - self.pos} bytes left"
            )
        return max(n, 0)

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        count = self.uvarint()
        if 2 * count > len(self.data) - self.pos:  # a tag and a size byte each at least
            raise RecordFormatError(f"{count} tagged fields in {len(self.data) - self.pos} bytes")
        for _ in range(count):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} trailing bytes")


# --- keys --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key version this coordinator does not know (e.g. the KIP-848 consumer-group records)."""

    version: int


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return bytes(w.buf)


def group_metadata_key(group: str) -> bytes:
    w = _Writer()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.buf)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = _Reader(bytes(data))
    version = r.i16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        return UnknownKey(version)
    r.done()
    return key


# --- offset commit values ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Kafka 3.9's choice unless `version` is given: v1 with an expire timestamp, else v3."""
    if version is None:
        version = (
            OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE
            if value.expire_timestamp_ms >= 0
            else OFFSET_COMMIT_VALUE_VERSION
        )
    if not 0 <= version <= 3:
        raise RecordFormatError(f"cannot write OffsetCommitValue version {version}")
    w = _Writer()
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp_ms)
    if version == 1:
        w.i64(value.expire_timestamp_ms)
    return bytes(w.buf)


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    raw = bytes(data)
    r = _Reader(raw)
    version = r.i16()
    if not 0 <= version <= MAX_OFFSET_COMMIT_VALUE_VERSION:
        raise RecordFormatError(f"Unknown offset message version: {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.nullable_string() or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.tagged_fields()
    r.done()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


# --- group metadata values ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: tuple[MemberMetadataValue, ...] = ()


def encode_group_metadata_value(value: GroupMetadataValue, version: int | None = None) -> bytes:
    """GroupMetadataValue at `version` (default 3, what Kafka 3.9 writes; 0-3 supported)."""
    v = GROUP_METADATA_VALUE_VERSION if version is None else version
    if not 0 <= v <= 3:
        raise RecordFormatError(f"cannot write GroupMetadataValue version {v}")
    w = _Writer()
    w.i16(v)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if v >= 2:
        w.i64(value.current_state_timestamp_ms)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if v >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if v >= 1:
            w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.buf)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(bytes(data))
    version = r.i16()
    if not 0 <= version <= MAX_GROUP_METADATA_VALUE_VERSION:
        raise RecordFormatError(f"Unknown group metadata message version: {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members: list[MemberMetadataValue] = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if version == 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# --- the consumer protocol ---------------------------------------------------------------------


def parse_subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (any version: v0 is the prefix of all).

    Raises RecordFormatError (a ValueError) when the bytes do not parse.
    """
    r = _Reader(bytes(metadata))
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"invalid consumer protocol version {version}")
    n = r.i32()
    if n < 0 or 2 * n > len(r.data) - r.pos:  # a topic name takes 2 bytes at least
        raise RecordFormatError(f"invalid topic count {n}")
    return [r.string() for _ in range(n)]


def encode_subscription(topics: Sequence[str], user_data: bytes | None = None) -> bytes:
    """A ConsumerProtocolSubscription v0 (for tests and tools)."""
    w = _Writer()
    w.i16(0)
    w.i32(len(topics))
    for t in topics:
        w.string(t)
    w.bytes_(user_data)
    return bytes(w.buf)
