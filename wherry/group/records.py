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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from wherry.protocol.wire import DecodeError, Reader, Writer

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
    "record_key",
]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE = 1
MAX_OFFSET_COMMIT_VALUE_VERSION = 4
MAX_GROUP_METADATA_VALUE_VERSION = 4

RecordFormatError = DecodeError
"""Bytes that are not a valid record of the expected type and version: the wire reader's one
error, a ValueError (the loaders skip such a record with a log line)."""


# --- hashing -----------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, 32-bit signed overflow. Kept for
    the ids seen last: a coordinator places the same few group and transactional ids on
    every request, and the loop below costs a few microseconds an id."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's Utils.abs(hash) % partitions."""
    h = java_string_hash(group_id)
    return (0 if h == -0x8000_0000 else abs(h)) % partitions


def open_versioned(data: bytes, max_version: int, unknown: str) -> tuple[Reader, int]:
    """A reader past a record's 2-byte version, and that version, which must be 0 to
    `max_version` (else RecordFormatError "`unknown`: version")."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= max_version:
        raise RecordFormatError(f"{unknown}: {version}")
    return r, version


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
    w = Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return bytes(w.out)


def record_key(version: int, *fields: str) -> bytes:
    """A key of strings: its 2-byte version (the record type), then the strings (not
    flexible)."""
    w = Writer()
    w.int16(version)
    for f in fields:
        w.string(f)
    return bytes(w.out)


def group_metadata_key(group: str) -> bytes:
    return record_key(GROUP_METADATA_KEY_VERSION, group)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(
            r.string(), r.string(), r.int32()
        )
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        return UnknownKey(version)
    r.expect_end()
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
    w = Writer()
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp_ms)
    if version == 1:
        w.int64(value.expire_timestamp_ms)
    return bytes(w.out)


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r, version = open_versioned(
        data, MAX_OFFSET_COMMIT_VALUE_VERSION, "Unknown offset message version"
    )
    flex = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.nullable_string(flex) or ""
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    r.end_struct(flex)
    r.expect_end()
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
    w = Writer()
    w.int16(v)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.nullable_string(value.protocol)
    w.nullable_string(value.leader)
    if v >= 2:
        w.int64(value.current_state_timestamp_ms)
    w.array_length(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if v >= 3:
            w.nullable_string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if v >= 1:
            w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.out)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r, version = open_versioned(
        data, MAX_GROUP_METADATA_VALUE_VERSION, "Unknown group metadata message version"
    )
    flex = version >= 4
    protocol_type = r.string(flex)
    generation = r.int32()
    protocol = r.nullable_string(flex)
    leader = r.nullable_string(flex)
    state_ts = r.int64() if version >= 2 else -1
    members: list[MemberMetadataValue] = []
    for _ in range(max(r.nullable_array_length(flex), 0)):
        member_id = r.string(flex)
        instance_id = r.nullable_string(flex) if version >= 3 else None
        client_id = r.string(flex)
        client_host = r.string(flex)
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if version == 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both
        subscription = r.nullable_bytes(flex) or b""
        assignment = r.nullable_bytes(flex) or b""
        r.end_struct(flex)
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
    r.end_struct(flex)
    r.expect_end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# --- the consumer protocol ---------------------------------------------------------------------


def parse_subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (any version: v0 is the prefix of all).

    Raises RecordFormatError (a ValueError) when the bytes do not parse.
    """
    r = Reader(metadata)
    version = r.int16()
    if version < 0:
        raise RecordFormatError(f"invalid consumer protocol version {version}")
    n = r.array_length(False, 2)  # a topic name takes 2 bytes at least
    return [r.string() for _ in range(n)]


def encode_subscription(
    topics: Sequence[str],
    user_data: bytes | None = None,
    owned: Mapping[str, Sequence[int]] | None = None,
) -> bytes:
    """A ConsumerProtocolSubscription v0, or v1 with `owned` partitions (for tests and
    tools)."""
    w = Writer()
    w.int16(0 if owned is None else 1)
    w.array_length(len(topics))
    for t in topics:
        w.string(t)
    w.nullable_bytes(user_data)
    if owned is not None:
        w.array_length(len(owned))
        for t, ps in owned.items():
            w.string(t)
            w.int32_array(list(ps))
    return bytes(w.out)
