"""The share-group records of `__consumer_offsets` (KIP-932), as Kafka 4.1's group coordinator
writes them (`group-coordinator/src/main/resources/common/message/ShareGroup*.json`). Keys and
values are laid out as the consumer-group records are (consumer_group_records.py: a 2-byte type
then non-flexible key strings; a value is version 0 then a flexible message):

* 9 ShareGroupPartitionMetadata: key (groupId); value Topics [TopicId, TopicName,
  NumPartitions, PartitionMetadata]. Kafka 4.1 no longer writes it (the group's MetadataHash
  replaced it); read and dropped, and tombstoned when its group is deleted.
* 10 ShareGroupMemberMetadata: key (groupId, memberId); value RackId?, ClientId, ClientHost,
  SubscribedTopicNames [string].
* 11 ShareGroupMetadata: key (groupId); value Epoch int32, MetadataHash int64.
* 12 ShareGroupTargetAssignmentMetadata: key (groupId); value AssignmentEpoch int32.
* 13 ShareGroupTargetAssignmentMember: key (groupId, memberId); value TopicPartitions
  [TopicId, Partitions [int32]].
* 14 ShareGroupCurrentMemberAssignment: key (groupId, memberId); value MemberEpoch,
  PreviousMemberEpoch, State int8, AssignedPartitions [TopicId, Partitions].
* 15 ShareGroupStatePartitionMetadata: key (groupId); value InitializingTopics and
  InitializedTopics [TopicId, TopicName, Partitions [int32], CreateTimestamp int64],
  DeletingTopics [TopicId, TopicName]: the share-partitions whose state the share
  coordinator holds (DeleteGroups deletes them).

A null value is a tombstone. `ShareGroupReplay` replays them in log order. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from wherry.group import consumer_group_records as cgr
from wherry.group.consumer_group_records import (
    GroupReplay,
    MemberAssignment,
    RecordKind,
    ReplayedMembers,
    close_value,
    decode_member_assignment,
    decode_record_key,
    encode_member_assignment,
    end_value,
    group_key,
    member_key,
    open_value,
    read_member_client,
    read_topics_metadata,
    start_value,
    write_member_client,
)
from wherry.protocol.wire import Reader, Writer

__all__ = [
    "SHARE_GROUP_RECORD_TYPES",
    "ReplayedShareGroup",
    "ShareCurrentAssignment",
    "ShareGroupReplay",
    "ShareMemberValue",
    "StateTopic",
    "current_assignment_key",
    "decode_share_group_key",
    "encode_current_assignment",
    "encode_group_metadata",
    "encode_member_metadata",
    "encode_state_metadata",
    "group_metadata_key",
    "member_metadata_key",
    "partition_metadata_key",
    "state_metadata_key",
    "target_member_key",
    "target_metadata_key",
    "tombstone_order",
    "upsert_order",
]

PARTITION_METADATA = 9
MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_METADATA = 12
TARGET_MEMBER = 13
CURRENT_ASSIGNMENT = 14
STATE_METADATA = 15
SHARE_GROUP_RECORD_TYPES = frozenset(range(9, 16))
_MEMBER_TYPES = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)

# The order a write puts its records in (Kafka's): a member's records before the group's on
# the way in, the reverse on the way out, so a replay never sees a member without its group.
_TOMBSTONE = {CURRENT_ASSIGNMENT: 0, TARGET_MEMBER: 1, MEMBER_METADATA: 2, TARGET_METADATA: 3,
              PARTITION_METADATA: 4, STATE_METADATA: 5, GROUP_METADATA: 6}
_UPSERT = {MEMBER_METADATA: 0, GROUP_METADATA: 1, STATE_METADATA: 2, TARGET_MEMBER: 3,
           TARGET_METADATA: 4, CURRENT_ASSIGNMENT: 5, PARTITION_METADATA: 6}


def tombstone_order(key: bytes) -> int:
    return _TOMBSTONE[cgr.record_type(key)]


def upsert_order(key: bytes) -> int:
    return _UPSERT[cgr.record_type(key)]


# --- keys ----------------------------------------------------------------------------------------


partition_metadata_key = group_key(PARTITION_METADATA)
member_metadata_key = member_key(MEMBER_METADATA)
group_metadata_key = group_key(GROUP_METADATA)
target_metadata_key = group_key(TARGET_METADATA)
target_member_key = member_key(TARGET_MEMBER)
current_assignment_key = member_key(CURRENT_ASSIGNMENT)
state_metadata_key = group_key(STATE_METADATA)


def decode_share_group_key(key: bytes) -> tuple[int, str, str | None]:
    """(record type, group id, member id or None) of a key of types 9-15."""
    return decode_record_key(key, SHARE_GROUP_RECORD_TYPES, _MEMBER_TYPES, "share-group")


# --- values --------------------------------------------------------------------------------------


def encode_group_metadata(epoch: int, metadata_hash: int) -> bytes:
    w = start_value()
    w.int32(epoch)
    w.int64(metadata_hash)
    return end_value(w)


def decode_group_metadata(data: bytes) -> tuple[int, int]:
    r = open_value(data)
    epoch = r.int32()
    h = r.int64()
    close_value(r)
    return epoch, h


@dataclass(frozen=True, slots=True)
class ShareMemberValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


def encode_member_metadata(v: ShareMemberValue) -> bytes:
    w = start_value()
    write_member_client(w, (v.rack_id, v.client_id, v.client_host, v.subscribed_topic_names))
    return end_value(w)


def decode_member_metadata(data: bytes) -> ShareMemberValue:
    r = open_value(data)
    value = ShareMemberValue(*read_member_client(r))
    close_value(r)
    return value


ShareCurrentAssignment = MemberAssignment


def encode_current_assignment(v: ShareCurrentAssignment) -> bytes:
    return encode_member_assignment(v.member_epoch, v.previous_member_epoch, v.state, v.assigned)


def decode_current_assignment(data: bytes) -> ShareCurrentAssignment:
    epoch, previous, state, (assigned,) = decode_member_assignment(data, 1)
    return ShareCurrentAssignment(epoch, previous, state, assigned)


@dataclass(frozen=True, slots=True)
class StateTopic:
    """A topic of ShareGroupStatePartitionMetadataValue: its partitions whose share state
    the share coordinator holds."""

    topic_id: uuid.UUID
    name: str
    partitions: frozenset[int]
    create_timestamp_ms: int = -1


def _write_state_topics(w: Writer, topics: Iterable[StateTopic]) -> None:
    items = sorted(topics, key=lambda t: str(t.topic_id))
    w.array_length(len(items), True)
    for t in items:
        w.uuid(t.topic_id)
        w.nullable_string(t.name, True)
        w.int32_array(sorted(t.partitions), True)
        w.int64(t.create_timestamp_ms)
        w.no_tagged_fields()


def _read_state_topics(r: Reader) -> tuple[StateTopic, ...]:
    out = []
    for _ in range(r.array_length(True)):
        tid = r.uuid()
        name = r.string(True)
        parts = frozenset(r.int32_array(True))
        ts = r.int64()
        r.tagged_fields()
        out.append(StateTopic(tid, name, parts, ts))
    return tuple(out)


def encode_state_metadata(
    initialized: Iterable[StateTopic],
    initializing: Iterable[StateTopic] = (),
    deleting: Iterable[tuple[uuid.UUID, str]] = (),
) -> bytes:
    w = start_value()
    _write_state_topics(w, initializing)
    _write_state_topics(w, initialized)
    items = sorted(deleting, key=lambda t: str(t[0]))
    w.array_length(len(items), True)
    for tid, name in items:
        w.uuid(tid)
        w.string(name, True)
        w.no_tagged_fields()
    return end_value(w)


def decode_state_metadata(data: bytes) -> tuple[StateTopic, ...]:
    """The initialized (and initializing) topics: those whose state may exist."""
    r = open_value(data)
    initializing = _read_state_topics(r)
    initialized = _read_state_topics(r)
    for _ in range(r.array_length(True)):
        r.uuid()
        r.string(True)
        r.tagged_fields()
    close_value(r)
    return initializing + initialized


def _check_partition_metadata(data: bytes) -> bool:
    """Read (and drop) a partition metadata value: True once it parses."""
    r = open_value(data)
    read_topics_metadata(r)
    close_value(r)
    return True


# --- replay --------------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayedShareGroup(ReplayedMembers[ShareMemberValue, ShareCurrentAssignment]):
    """What the log says of one share group (each part absent until its record is seen)."""

    metadata_hash: int = 0
    state_topics: tuple[StateTopic, ...] = ()
    has_partition_metadata: bool = False

    def _kind_records_gone(self) -> bool:
        return not self.state_topics and not self.has_partition_metadata


class ShareGroupReplay(GroupReplay[ReplayedShareGroup]):
    """The share groups of one offsets partition, replayed from its records in log order."""

    __slots__ = ()
    _kind = RecordKind(
        decode_share_group_key,
        {
            PARTITION_METADATA: _check_partition_metadata,
            MEMBER_METADATA: decode_member_metadata,
            GROUP_METADATA: decode_group_metadata,
            TARGET_METADATA: cgr.decode_epoch_value,
            TARGET_MEMBER: cgr.decode_target_member,
            CURRENT_ASSIGNMENT: decode_current_assignment,
            STATE_METADATA: decode_state_metadata,
        },
        (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT),
        ReplayedShareGroup,
    )

    def _replay_group(
        self, g: ReplayedShareGroup, t: int, decoded: Any, tombstone: bool
    ) -> None:
        if t == GROUP_METADATA:
            g.group_epoch, g.metadata_hash = (None, 0) if tombstone else decoded
        elif t == TARGET_METADATA:
            g.assignment_epoch = decoded
        elif t == STATE_METADATA:
            g.state_topics = () if tombstone else decoded
        else:
            g.has_partition_metadata = not tombstone
