"""The share coordinator's state (KIP-932's ShareCoordinatorShard), pure: the persisted state
of every share-partition whose key `groupId:topicId:partition` maps to one partition of the
internal `__share_group_state` topic, and that topic's record format.

Each write is the share-partition leader's whole in-flight state (start offset and state
batches), appended as one snapshot record and answered only once replicated (acks=all), so
the latest record of a key is its state; a deletion writes a tombstone. Writes and reads
carry the leader epoch of the share-partition's leader: a write from an older leader than
one already seen is refused with FENCED_LEADER_EPOCH, so a deposed leader cannot overwrite
what its successor wrote. The state epoch grows with each InitializeShareGroupState (a reset
of the share-partition); a write for an older one gets FENCED_STATE_EPOCH.

Record (ours, not Kafka's generated schema): key = int16 version 0, string group id, 16-byte
topic id, int32 partition; value = int16 version 0, int32 state epoch, int32 leader epoch,
int64 start offset, int32 count, then per batch int64 first, int64 last, int8 delivery state,
int16 delivery count.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.group.records import partition_for
from wherry.protocol.wire import DecodeError, Reader, Writer
from wherry.share.partition import StateBatch

log = logging.getLogger(__name__)

__all__ = [
    "SHARE_STATE_TOPIC",
    "ShareKey",
    "ShareState",
    "ShareStateStore",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "is_deleted",
    "state_partition_for",
]

SHARE_STATE_TOPIC = "__share_group_state"

_HEAD = struct.Struct(">hiiq")  # version, state epoch, leader epoch, start offset
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's SharePartitionKey string, what FindCoordinator (key type 2) is given."""
        return f"{self.group_id}:{self.topic_id}:{self.partition}"


@dataclass(frozen=True, slots=True)
class ShareState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()


def state_partition_for(key: ShareKey | str, partitions: int) -> int:
    s = key.coordinator_key() if isinstance(key, ShareKey) else key
    return partition_for(s, partitions)


def encode_key(key: ShareKey) -> bytes:
    w = Writer()
    w.int16(0)
    w.string(key.group_id)
    w.uuid(key.topic_id)
    w.int32(key.partition)
    return bytes(w.out)


def decode_key(data: bytes) -> ShareKey:
    """Raises `DecodeError` (a ValueError) on bytes that are not a key."""
    r = Reader(data)
    if r.int16() != 0:
        raise DecodeError("not a share state key")
    key = ShareKey(r.string(), r.uuid(), r.int32())
    r.expect_end("a share state key")
    return key


def encode_value(state: ShareState) -> bytes:
    w = Writer()
    w.pack(_HEAD, 0, state.state_epoch, state.leader_epoch, state.start_offset)
    w.array_length(len(state.batches))
    for b in state.batches:
        w.pack(_BATCH, b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
    return bytes(w.out)


def decode_value(data: bytes) -> ShareState:
    """Raises `DecodeError` (a ValueError) on bytes that are not a value."""
    r = Reader(data)
    version, se, le, start = r.unpack(_HEAD)
    if version != 0:
        raise DecodeError("not a share state value")
    n = r.array_length(False, _BATCH.size)
    batches = tuple(StateBatch(*r.unpack(_BATCH)) for _ in range(n))
    r.expect_end("a share state value")
    return ShareState(se, le, start, batches)


MAX_STATE_OFFSETS = 100_000
"""The most offsets a written state may cover (the broker's record-lock maximum is 10,000)."""


def is_deleted(state: ShareState) -> bool:
    """A deletion marker: no state, only the state epoch the next one must carry."""
    return state.start_offset < 0


def valid_state(state: ShareState) -> bool:
    """A state a share-partition leader could have written: a start offset, then batches in
    order, not overlapping, at or after it, of persisted states (AVAILABLE, ACKNOWLEDGED,
    ARCHIVED) and non-negative counts, covering a bounded range."""
    if state.start_offset < 0 or state.state_epoch < 0:
        return False
    prev = state.start_offset - 1
    for b in state.batches:
        if b.first_offset <= prev or b.last_offset < b.first_offset:
            return False
        if b.delivery_state not in (0, 2, 4) or b.delivery_count < 0:
            return False
        prev = b.last_offset
    return prev - state.start_offset < MAX_STATE_OFFSETS


class ShareStateStore:
    """The states one share coordinator holds, per `__share_group_state` partition."""

    def __init__(self) -> None:
        self.states: dict[ShareKey, ShareState] = {}
        self.partition_of: dict[ShareKey, int] = {}

    def load(self, partition: int, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Replay a partition's (key, value) records; the number of keys it holds."""
        self.unload(partition)
        for k, v in records:
            if k is None:
                continue
            try:
                key = decode_key(k)
            except ValueError as e:
                log.error("Skipping unreadable share state key in partition %d: %s", partition, e)
                continue
            if v is None:
                self.states.pop(key, None)
                self.partition_of.pop(key, None)
                continue
            try:
                self.states[key] = decode_value(v)
            except ValueError as e:
                log.error("Skipping unreadable share state of %s: %s", key, e)
                continue
            self.partition_of[key] = partition
        return sum(1 for p in self.partition_of.values() if p == partition)

    def unload(self, partition: int) -> None:
        for key in [k for k, p in self.partition_of.items() if p == partition]:
            del self.partition_of[key]
            self.states.pop(key, None)

    def read(self, key: ShareKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        st = self.states.get(key)
        if st is None:
            return ErrorCode.none, None
        if leader_epoch >= 0 and leader_epoch < st.leader_epoch:
            return ErrorCode.fenced_leader_epoch, None
        return ErrorCode.none, st

    def fence_read(self, key: ShareKey, leader_epoch: int) -> ShareState | None:
        """The state a read with a newer leader epoch must write first (the same state with
        that epoch: from then on an older leader's writes are fenced), else None."""
        st = self.states.get(key)
        if st is None or leader_epoch <= st.leader_epoch:
            return None
        return ShareState(st.state_epoch, leader_epoch, st.start_offset, st.batches)

    def deletion_marker(self, key: ShareKey) -> ShareState | None:
        """What DeleteShareGroupState writes for a key (None: nothing to delete): no state
        (start offset -1) at the next state epoch, so that a leader still holding the deleted
        share-partition is fenced (FENCED_STATE_EPOCH) and the group's next incarnation
        starts afresh at that epoch."""
        st = self.states.get(key)
        if st is None or is_deleted(st):
            return None
        return ShareState(st.state_epoch + 1, st.leader_epoch, -1, ())

    def check_write(self, key: ShareKey, state: ShareState) -> ErrorCode:
        if not valid_state(state):
            return ErrorCode.invalid_request
        st = self.states.get(key)
        if st is None:
            return ErrorCode.none
        if state.leader_epoch >= 0 and state.leader_epoch < st.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if state.state_epoch < st.state_epoch:
            return ErrorCode.fenced_state_epoch
        return ErrorCode.none

    def apply(self, key: ShareKey, partition: int, state: ShareState | None) -> None:
        """A write (or a deletion, `state` None) once it is replicated."""
        if state is None:
            self.states.pop(key, None)
            self.partition_of.pop(key, None)
        else:
            self.states[key] = state
            self.partition_of[key] = partition

    def keys_of(self, group_id: str) -> Sequence[ShareKey]:
        return [k for k in self.states if k.group_id == group_id]
