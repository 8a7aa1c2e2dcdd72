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
  ServerAssignor?; tagged field 0, ClassicMemberMetadata (a member using the classic protocol
  inside a consumer group): SessionTimeoutMs int32, SupportedProtocols [Name, Metadata bytes].
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
from typing import Any, ClassVar, Generic, TypeVar, cast

from wherry.group.records import RecordFormatError, open_versioned, record_key
from wherry.protocol.primitives import INT16
from wherry.protocol.wire import Reader, Writer

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerGroupReplay",
    "CurrentAssignmentValue",
    "GroupReplay",
    "MemberAssignment",
    "MemberMetadataValue",
    "RecordKind",
    "ReplayedGroup",
    "ReplayedMembers",
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
_MEMBER_TYPES = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)

# topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]



# --- keys ----------------------------------------------------------------------------------------


def group_key(record_type: int) -> Callable[[str], bytes]:
    """The key builder of a group's record type: (group id) -> key."""
    return lambda group_id: record_key(record_type, group_id)


def member_key(record_type: int) -> Callable[[str, str], bytes]:
    """The key builder of a member's record type: (group id, member id) -> key."""
    return lambda group_id, member_id: record_key(record_type, group_id, member_id)


def decode_record_key(
    key: bytes, types: frozenset[int], member_types: tuple[int, ...], kind: str
) -> tuple[int, str, str | None]:
    """(record type, group id, member id or None) of a key of one of `types`; the types of
    `member_types` carry a member id."""
    r = Reader(key)
    t = r.int16()
    if t not in types:
        raise RecordFormatError(f"not a {kind} record type: {t}")
    group_id = r.string()
    member_id = r.string() if t in member_types else None
    r.expect_end()
    return t, group_id, member_id


group_metadata_key = group_key(GROUP_METADATA)
partition_metadata_key = group_key(PARTITION_METADATA)
member_metadata_key = member_key(MEMBER_METADATA)
target_metadata_key = group_key(TARGET_METADATA)
target_member_key = member_key(TARGET_MEMBER)
current_assignment_key = member_key(CURRENT_ASSIGNMENT)


def record_type(key: bytes) -> int:
    """The record type of a `__consumer_offsets` key (its version prefix)."""
    if len(key) < 2:
        raise RecordFormatError("key shorter than its type")
    return int(INT16.unpack_from(key)[0])


def decode_consumer_group_key(key: bytes) -> tuple[int, str, str | None]:
    """(record type, group id, member id or None) of a key of types 3-8."""
    return decode_record_key(key, CONSUMER_GROUP_RECORD_TYPES, _MEMBER_TYPES, "consumer-group")


# --- values --------------------------------------------------------------------------------------


def start_value() -> Writer:
    """A writer holding a value's version (0); the flexible message follows."""
    w = Writer()
    w.int16(0)
    return w


def end_value(w: Writer) -> bytes:
    """The value's bytes, once its top-level (empty) tagged fields are written."""
    w.no_tagged_fields()
    return bytes(w.out)


def open_value(data: bytes) -> Reader:
    """A reader past a value's version, which must be 0."""
    return open_versioned(data, 0, "unknown value version")[0]


def close_value(r: Reader) -> None:
    """A value's top-level tagged fields (skipped), then its end."""
    r.tagged_fields()
    r.expect_end()


def encode_epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue / ConsumerGroupTargetAssignmentMetadataValue."""
    w = start_value()
    w.int32(epoch)
    return end_value(w)


def decode_epoch_value(data: bytes) -> int:
    r = open_value(data)
    epoch = r.int32()
    close_value(r)
    return epoch


@dataclass(frozen=True, slots=True)
class TopicMetadataValue:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


def encode_partition_metadata(epoch: int, topics: Sequence[TopicMetadataValue]) -> bytes:
    w = start_value()
    w.int32(epoch)
    w.array_length(len(topics), True)
    for t in topics:
        w.uuid(t.topic_id)
        w.nullable_string(t.name, True)
        w.int32(t.num_partitions)
        w.array_length(0, True)  # PartitionRacks: no rack-aware assignment
        w.no_tagged_fields()
    return end_value(w)


def read_topics_metadata(r: Reader) -> tuple[TopicMetadataValue, ...]:
    """Topics [TopicId, TopicName, NumPartitions, PartitionRacks (skipped)] (consumer and
    share groups' partition metadata)."""
    topics = []
    for _ in range(r.array_length(True)):
        tid = r.uuid()
        name = r.string(True)
        n = r.int32()
        for _ in range(r.array_length(True)):
            r.int32()
            for _ in range(r.array_length(True)):
                r.nullable_string(True)
            r.tagged_fields()
        r.tagged_fields()
        topics.append(TopicMetadataValue(tid, name, n))
    return tuple(topics)


def decode_partition_metadata(data: bytes) -> tuple[int, tuple[TopicMetadataValue, ...]]:
    r = open_value(data)
    epoch = r.int32()
    topics = read_topics_metadata(r)
    close_value(r)
    return epoch, topics


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member using the classic protocol inside a consumer group joined with."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


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
    classic: ClassicMemberMetadata | None = None


MemberClient = tuple[str | None, str, str, tuple[str, ...]]
"""RackId, ClientId, ClientHost, SubscribedTopicNames: what a consumer- and a share-group
member's metadata value both hold, in that order."""


def write_member_client(w: Writer, client: MemberClient) -> None:
    rack_id, client_id, client_host, names = client
    w.nullable_string(rack_id, True)
    w.string(client_id, True)
    w.string(client_host, True)
    w.array_length(len(names), True)
    for name in names:
        w.string(name, True)


def read_member_client(r: Reader) -> MemberClient:
    rack_id = r.nullable_string(True)
    client_id = r.string(True)
    client_host = r.string(True)
    names = tuple(r.string(True) for _ in range(r.array_length(True)))
    return rack_id, client_id, client_host, names


def encode_member_metadata(v: MemberMetadataValue) -> bytes:
    w = start_value()
    w.nullable_string(v.instance_id, True)
    write_member_client(w, (v.rack_id, v.client_id, v.client_host, v.subscribed_topic_names))
    w.nullable_string(v.subscribed_topic_regex, True)
    w.int32(v.rebalance_timeout_ms)
    w.nullable_string(v.server_assignor, True)
    if v.classic is None:
        return end_value(w)
    tag = Writer()
    tag.int32(v.classic.session_timeout_ms)
    tag.array_length(len(v.classic.supported_protocols), True)
    for name, metadata in v.classic.supported_protocols:
        tag.string(name, True)
        tag.nullable_bytes(metadata, True)
        tag.no_tagged_fields()
    tag.no_tagged_fields()
    w.tagged_fields([(0, tag.out)])  # tag 0: the classic member metadata
    return bytes(w.out)


def _read_classic(r: Reader) -> ClassicMemberMetadata:
    session = r.int32()
    protocols = []
    for _ in range(r.array_length(True, 3)):
        name = r.string(True)
        metadata = r.bytes_(True)
        r.tagged_fields()
        protocols.append((name, metadata))
    r.tagged_fields()
    return ClassicMemberMetadata(session, tuple(protocols))


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = open_value(data)
    instance_id = r.nullable_string(True)
    rack_id, client_id, client_host, names = read_member_client(r)
    regex = r.nullable_string(True)
    rebalance_timeout = r.int32()
    assignor = r.nullable_string(True)
    classic: list[ClassicMemberMetadata] = []
    r.tagged_fields({0: lambda sub: classic.append(_read_classic(sub))})
    r.expect_end()
    return MemberMetadataValue(
        instance_id,
        rack_id,
        client_id,
        client_host,
        names,
        regex,
        rebalance_timeout,
        assignor,
        classic[-1] if classic else None,
    )


def write_partitions(w: Writer, a: Assignment) -> None:
    """An assignment: [TopicId, Partitions [int32]], topics and partitions in order."""
    items = sorted((t, p) for t, p in a.items() if p)
    w.array_length(len(items), True)
    for tid, parts in items:
        w.uuid(tid)
        w.int32_array(sorted(parts), True)
        w.no_tagged_fields()


def read_partitions(r: Reader) -> dict[uuid.UUID, frozenset[int]]:
    """What `write_partitions` writes (a topic's partitions without any: left out)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.array_length(True)):
        tid = r.uuid()
        parts = frozenset(r.int32_array(True))
        r.tagged_fields()
        if parts:
            out[tid] = out.get(tid, frozenset()) | parts
    return out


def encode_target_member(a: Assignment) -> bytes:
    w = start_value()
    write_partitions(w, a)
    return end_value(w)


def decode_target_member(data: bytes) -> dict[uuid.UUID, frozenset[int]]:
    r = open_value(data)
    out = read_partitions(r)
    close_value(r)
    return out


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """A member's current assignment: a share-group member's value, and the start of a
    consumer-group member's."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue(MemberAssignment):
    pending_revocation: Mapping[uuid.UUID, frozenset[int]]


_EPOCHS_AND_STATE = struct.Struct(">iib")


def encode_member_assignment(
    member_epoch: int, previous_member_epoch: int, state: int, *assignments: Assignment
) -> bytes:
    """A current member assignment value (consumer and share groups): MemberEpoch,
    PreviousMemberEpoch, State, then the assignments (assigned; pending revocation)."""
    w = start_value()
    w.pack(_EPOCHS_AND_STATE, member_epoch, previous_member_epoch, state)
    for a in assignments:
        write_partitions(w, a)
    return end_value(w)


def decode_member_assignment(
    data: bytes, assignments: int
) -> tuple[int, int, int, list[dict[uuid.UUID, frozenset[int]]]]:
    """What `encode_member_assignment` writes with `assignments` assignments."""
    r = open_value(data)
    member_epoch, previous_member_epoch, state = r.unpack(_EPOCHS_AND_STATE)
    parts = [read_partitions(r) for _ in range(assignments)]
    close_value(r)
    return member_epoch, previous_member_epoch, state, parts


def encode_current_assignment(v: CurrentAssignmentValue) -> bytes:
    return encode_member_assignment(
        v.member_epoch, v.previous_member_epoch, v.state, v.assigned, v.pending_revocation
    )


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    epoch, previous, state, (assigned, pending) = decode_member_assignment(data, 2)
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

V = TypeVar("V")


M = TypeVar("M")
C = TypeVar("C")


@dataclass(slots=True)
class ReplayedMembers(Generic[M, C]):
    """What the log says of one group that consumer and share groups both have: its epochs and
    its members' three tables by member id (each part absent until its record is seen)."""

    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: dict[str, M] = field(default_factory=dict)
    targets: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    current: dict[str, C] = field(default_factory=dict)

    @property
    def is_empty_record_set(self) -> bool:
        """No record of the group is left (each was tombstoned or never written)."""
        return (
            self.group_epoch is None
            and self.assignment_epoch is None
            and not self.members
            and not self.targets
            and not self.current
            and self._kind_records_gone()
        )

    def _kind_records_gone(self) -> bool:
        """The records only this kind of group has are gone too."""
        return True


RS = TypeVar("RS", bound="ReplayedMembers[Any, Any]")


@dataclass(frozen=True, slots=True)
class RecordKind:
    """How one kind of group's records (consumer or share) decode and replay."""

    decode_key: Callable[[bytes], tuple[int, str, str | None]]
    decoders: Mapping[int, Callable[[bytes], Any]]  # record type -> value decoder
    member_types: tuple[int, int, int]  # member metadata, target member, current assignment
    new_group: Callable[[], ReplayedMembers[Any, Any]]


class GroupReplay(Generic[RS]):
    """The groups of one kind of one offsets partition, replayed from their records in log
    order: a group is made on its first record and goes once its records are all tombstoned.
    A kind's subclass says how its records decode (its `RecordKind`, ``_kind``) and replays
    the records of the group itself (`_replay_group`)."""

    __slots__ = ("groups",)
    _kind: ClassVar[RecordKind]

    def __init__(self) -> None:
        self.groups: dict[str, RS] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(groups={self.groups!r})"

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Replay one record (raises RecordFormatError on bytes that do not parse, before
        anything changes)."""
        kind = self._kind
        t, group_id, member_id = kind.decode_key(key)
        decoded = None if value is None else kind.decoders[t](value)
        g = self.groups.get(group_id)
        if g is None:
            if value is None:
                return  # the tombstone of a group never seen
            g = self.groups[group_id] = cast(RS, kind.new_group())
        member, target, current = kind.member_types
        if t == member:
            replay_member(g.members, member_id, decoded)
        elif t == target:
            replay_member(g.targets, member_id, decoded)
        elif t == current:
            replay_member(g.current, member_id, decoded)
        else:
            self._replay_group(g, t, decoded, value is None)
        if g.is_empty_record_set:
            del self.groups[group_id]

    def apply_all(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        for k, v in records:
            self.apply(k, v)

    def _replay_group(self, g: RS, t: int, decoded: Any, tombstone: bool) -> None:
        """A record of the group itself (its value decoded, None for a tombstone)."""
        raise NotImplementedError


def replay_member(table: dict[str, V], member_id: str | None, decoded: V | None) -> None:
    """A member's record replayed into its table: set, or (a tombstone, None) removed."""
    assert member_id is not None
    if decoded is None:
        table.pop(member_id, None)
    else:
        table[member_id] = decoded


@dataclass(slots=True)
class ReplayedGroup(ReplayedMembers[MemberMetadataValue, CurrentAssignmentValue]):
    """What the log says of one consumer group (each part absent until its record is seen)."""

    topics: tuple[TopicMetadataValue, ...] | None = None

    def _kind_records_gone(self) -> bool:
        return self.topics is None


class ConsumerGroupReplay(GroupReplay[ReplayedGroup]):
    """The consumer groups of one offsets partition, replayed from its records in log order."""

    __slots__ = ()
    _kind = RecordKind(
        decode_consumer_group_key,
        {
            GROUP_METADATA: decode_epoch_value,
            PARTITION_METADATA: lambda value: decode_partition_metadata(value)[1],
            TARGET_METADATA: decode_epoch_value,
            MEMBER_METADATA: decode_member_metadata,
            TARGET_MEMBER: decode_target_member,
            CURRENT_ASSIGNMENT: decode_current_assignment,
        },
        (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT),
        ReplayedGroup,
    )

    def _replay_group(self, g: ReplayedGroup, t: int, decoded: Any, tombstone: bool) -> None:
        if t == GROUP_METADATA:
            g.group_epoch = decoded
        elif t == PARTITION_METADATA:
            g.topics = decoded
        else:
            g.assignment_epoch = decoded
