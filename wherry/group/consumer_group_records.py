"""The KIP-848 consumer-group records of `__consumer_offsets`, byte for byte as Kafka 4.0 writes
them (the schemas of Kafka's `group-coordinator/src/main/resources/common/message/`).

A key is a 2-byte record type followed by its fields, not flexible (strings with an int16
length); a value is a 2-byte version (0) followed by a flexible message (compact strings and
arrays, tagged fields):

* 3 ConsumerGroupMetadata: key (groupId); value Epoch int32 (tagged fields skipped on read).
* 4 ConsumerGroupPartitionMetadata: key (groupId); value Epoch int32, Topics [TopicId uuid,
  TopicName string, NumPartitions int32, PartitionRacks [Partition int32, Racks [string]]].
* 5 ConsumerGroupMemberMetadata: key (groupId, memberId); value InstanceId?, RackId?, ClientId,
  ClientHost, SubscribedTopicNames [string], SubscribedTopicRegex?, RebalanceTimeoutMs int32,
  ServerAssignor? (tag 0, the classic member metadata, is skipped: no online migration).
* 6 ConsumerGroupTargetAssignmentMetadata: key (groupId); value AssignmentEpoch int32.
* 7 ConsumerGroupTargetAssignmentMember: key (groupId, memberId); value TopicPartitions
  [TopicId uuid, Partitions [int32]].
* 8 ConsumerGroupCurrentMemberAssignment: key (groupId, memberId); value MemberEpoch int32,
  PreviousMemberEpoch int32, State int8, AssignedPartitions and PartitionsPendingRevocation
  [TopicId uuid, Partitions [int32]].

A null value is a tombstone. `ConsumerGroupReplay` replays these records in log order (last
value per key wins) into per-group data the coordinator rebuilds its groups from.
Pure: no I/O.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from wherry.group.records import RecordFormatError

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "Assignment",
    "ConsumerGroupReplay",
    "CurrentAssignmentValue",
    "MemberMetadataValue",
    "ReplayedGroup",
    "TopicMetadataValue",
    "current_assignment_key",
    "decode_consumer_group_key",
    "encode_current_assignment",
    "encode_epoch_value",
    "encode_member_metadata",
    "encode_partition_metadata",
    "encode_target_member",
    "group_metadata_key",
    "member_metadata_key",
    "partition_metadata_key",
    "record_diff",
    "record_type",
    "target_member_key",
    "target_metadata_key",
]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(3, 9))

# topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I8 = struct.Struct(">b")


# --- primitives ----------------------------------------------------------------------------------


class _W:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def string(self, v: str) -> None:  # non-flexible (keys)
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise RecordFormatError(f"string of {len(b)} bytes is too long")
        self.i16(len(b))
        self.buf += b

    def cstring(self, v: str | None) -> None:  # compact, nullable
        if v is None:
            self.uvarint(0)
            return
        b = v.encode("utf-8")
        self.uvarint(len(b) + 1)
        self.buf += b

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def array_len(self, n: int) -> None:
        self.uvarint(n + 1)

    def no_tags(self) -> None:
        self.uvarint(0)


class _R:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(
                f"need {n} bytes at {self.pos}, have {len(self.data) - self.pos}"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return int(_I8.unpack(self.take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if shift > 28:
                raise RecordFormatError("unsigned varint is too long")
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise RecordFormatError("null key string")
        return self._utf8(self.take(n))

    def cstring(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        return self._utf8(self.take(n))

    def cstring_nn(self) -> str:
        s = self.cstring()
        if s is None:
            raise RecordFormatError("null value for a non-nullable string")
        return s

    @staticmethod
    def _utf8(b: bytes) -> str:
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from e

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def array_len(self) -> int:
        n = self.uvarint() - 1
        if n < -1:
            raise RecordFormatError(f"invalid array length {n}")
        if n > len(self.data) - self.pos:  # every item takes a byte at least
            raise RecordFormatError(
                f"array of {n} items but only {len(self.data) - self.pos} bytes left"
            )
        return max(n, 0)

    def skip_tags(self) -> None:
        count = self.uvarint()
        if 2 * count > len(self.data) - self.pos:  # a tag and a size byte each at least
            raise RecordFormatError(f"{count} tagged fields in {len(self.data) - self.pos} bytes")
        for _ in range(count):
            self.uvarint()
            self.take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} trailing bytes")


# --- keys ----------------------------------------------------------------------------------------


def _key(record_type: int, *fields: str) -> bytes:
    w = _W()
    w.i16(record_type)
    for f in fields:
        w.string(f)
    return bytes(w.buf)


def group_metadata_key(group_id: str) -> bytes:
    return _key(GROUP_METADATA, group_id)


def partition_metadata_key(group_id: str) -> bytes:
    return _key(PARTITION_METADATA, group_id)


def member_metadata_key(group_id: str, member_id: str) -> bytes:
    return _key(MEMBER_METADATA, group_id, member_id)


def target_metadata_key(group_id: str) -> bytes:
    return _key(TARGET_METADATA, group_id)


def target_member_key(group_id: str, member_id: str) -> bytes:
    return _key(TARGET_MEMBER, group_id, member_id)


def current_assignment_key(group_id: str, member_id: str) -> bytes:
    return _key(CURRENT_ASSIGNMENT, group_id, member_id)


def record_type(key: bytes) -> int:
    """The record type of a `__consumer_offsets` key (its version prefix)."""
    if len(key) < 2:
        raise RecordFormatError("key shorter than its type")
    return int(_I16.unpack_from(key)[0])


def decode_consumer_group_key(key: bytes) -> tuple[int, str, str | None]:
    """(record type, group id, member id or None) of a key of types 3-8."""
    r = _R(bytes(key))
    t = r.i16()
    if t not in CONSUMER_GROUP_RECORD_TYPES:
        raise RecordFormatError(f"not a consumer-group record type: {t}")
    group_id = r.string()
    member_id = r.string() if t in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT) else None
    r.done()
    return t, group_id, member_id


# --- values --------------------------------------------------------------------------------------


def _value(w: _W) -> bytes:
    return bytes(w.buf)


def _start() -> _W:
    w = _W()
    w.i16(0)
    return w


def encode_epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue / ConsumerGroupTargetAssignmentMetadataValue."""
    w = _start()
    w.i32(epoch)
    w.no_tags()
    return _value(w)


def decode_epoch_value(data: bytes) -> int:
    r = _R(bytes(data))
    _version(r)
    epoch = r.i32()
    r.skip_tags()
    r.done()
    return epoch


def _version(r: _R) -> None:
    v = r.i16()
    if v != 0:
        raise RecordFormatError(f"unknown value version {v}")


@dataclass(frozen=True, slots=True)
class TopicMetadataValue:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


def encode_partition_metadata(epoch: int, topics: Sequence[TopicMetadataValue]) -> bytes:
    w = _start()
    w.i32(epoch)
    w.array_len(len(topics))
    for t in topics:
        w.uuid(t.topic_id)
        w.cstring(t.name)
        w.i32(t.num_partitions)
        w.array_len(0)  # PartitionRacks: no rack-aware assignment
        w.no_tags()
    w.no_tags()
    return _value(w)


def decode_partition_metadata(data: bytes) -> tuple[int, tuple[TopicMetadataValue, ...]]:
    r = _R(bytes(data))
    _version(r)
    epoch = r.i32()
    topics = []
    for _ in range(r.array_len()):
        tid = r.uuid()
        name = r.cstring_nn()
        n = r.i32()
        for _ in range(r.array_len()):
            r.i32()
            for _ in range(r.array_len()):
                r.cstring()
            r.skip_tags()
        r.skip_tags()
        topics.append(TopicMetadataValue(tid, name, n))
    r.skip_tags()
    r.done()
    return epoch, tuple(topics)


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


def encode_member_metadata(v: MemberMetadataValue) -> bytes:
    w = _start()
    w.cstring(v.instance_id)
    w.cstring(v.rack_id)
    w.cstring(v.client_id)
    w.cstring(v.client_host)
    w.array_len(len(v.subscribed_topic_names))
    for name in v.subscribed_topic_names:
        w.cstring(name)
    w.cstring(v.subscribed_topic_regex)
    w.i32(v.rebalance_timeout_ms)
    w.cstring(v.server_assignor)
    w.no_tags()
    return _value(w)


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = _R(bytes(data))
    _version(r)
    instance_id = r.cstring()
    rack_id = r.cstring()
    client_id = r.cstring_nn()
    client_host = r.cstring_nn()
    names = tuple(r.cstring_nn() for _ in range(r.array_len()))
    regex = r.cstring()
    rebalance_timeout = r.i32()
    assignor = r.cstring()
    r.skip_tags()
    r.done()
    return MemberMetadataValue(
        instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout, assignor
    )


def _write_partitions(w: _W, a: Assignment) -> None:
    items = sorted((t, p) for t, p in a.items() if p)
    w.array_len(len(items))
    for tid, parts in items:
        w.uuid(tid)
        w.array_len(len(parts))
        for p in sorted(parts):
            w.i32(p)
        w.no_tags()


def _read_partitions(r: _R) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.array_len()):
        tid = r.uuid()
        parts = frozenset(r.i32() for _ in range(r.array_len()))
        r.skip_tags()
        if parts:
            out[tid] = out.get(tid, frozenset()) | parts
    return out


def encode_target_member(a: Assignment) -> bytes:
    w = _start()
    _write_partitions(w, a)
    w.no_tags()
    return _value(w)


def decode_target_member(data: bytes) -> dict[uuid.UUID, frozenset[int]]:
    r = _R(bytes(data))
    _version(r)
    out = _read_partitions(r)
    r.skip_tags()
    r.done()
    return out


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Mapping[uuid.UUID, frozenset[int]]
    pending_revocation: Mapping[uuid.UUID, frozenset[int]]


def encode_current_assignment(v: CurrentAssignmentValue) -> bytes:
    w = _start()
    w.i32(v.member_epoch)
    w.i32(v.previous_member_epoch)
    w.i8(v.state)
    _write_partitions(w, v.assigned)
    _write_partitions(w, v.pending_revocation)
    w.no_tags()
    return _value(w)


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    r = _R(bytes(data))
    _version(r)
    epoch = r.i32()
    previous = r.i32()
    state = r.i8()
    assigned = _read_partitions(r)
    pending = _read_partitions(r)
    r.skip_tags()
    r.done()
    return CurrentAssignmentValue(epoch, previous, state, assigned, pending)


def record_diff(
    old: Mapping[bytes, bytes],
    new: Mapping[bytes, bytes],
    tombstone_order: Callable[[bytes], int],
    upsert_order: Callable[[bytes], int],
) -> list[tuple[bytes, bytes | None]]:
    """The records that take a group's record set from `old` to `new`: tombstones of the keys
    gone, then the keys new or changed, each in its record type's order."""
    tombstones = sorted((k for k in old if k not in new), key=lambda k: (tombstone_order(k), k))
    upserts = sorted(
        (k for k, v in new.items() if old.get(k) != v), key=lambda k: (upsert_order(k), k)
    )
    return [(k, None) for k in tombstones] + [(k, new[k]) for k in upserts]


# --- replay --------------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayedGroup:
    """What the log says of one consumer group (each part absent until its record is seen)."""

    group_epoch: int | None = None
    assignment_epoch: int | None = None
    topics: tuple[TopicMetadataValue, ...] | None = None
    members: dict[str, MemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    current: dict[str, CurrentAssignmentValue] = field(default_factory=dict)

    @property
    def is_empty_record_set(self) -> bool:
        return (
            self.group_epoch is None
            and self.assignment_epoch is None
            and self.topics is None
            and not self.members
            and not self.targets
            and not self.current
        )


@dataclass(slots=True)
class ConsumerGroupReplay:
    """The consumer groups of one offsets partition, replayed from its records in log order."""

    groups: dict[str, ReplayedGroup] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Replay one record (raises RecordFormatError on bytes that do not parse)."""
        t, group_id, member_id = decode_consumer_group_key(key)
        g = self.groups.get(group_id)
        if g is None:
            if value is None:
                return
            g = self.groups[group_id] = ReplayedGroup()
        if t == GROUP_METADATA:
            g.group_epoch = None if value is None else decode_epoch_value(value)
        elif t == PARTITION_METADATA:
            g.topics = None if value is None else decode_partition_metadata(value)[1]
        elif t == TARGET_METADATA:
            g.assignment_epoch = None if value is None else decode_epoch_value(value)
        else:
            assert member_id is not None
            table: dict[str, object]
            if t == MEMBER_METADATA:
                table = g.members  # type: ignore[assignment]
                decoded: object = None if value is None else decode_member_metadata(value)
            elif t == TARGET_MEMBER:
                table = g.targets  # type: ignore[assignment]
                decoded = None if value is None else decode_target_member(value)
            else:
                table = g.current  # type: ignore[assignment]
                decoded = None if value is None else decode_current_assignment(value)
            if decoded is None:
                table.pop(member_id, None)
            else:
                table[member_id] = decoded
        if g.is_empty_record_set:
            del self.groups[group_id]

    def apply_all(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        for k, v in records:
            self.apply(k, v)
