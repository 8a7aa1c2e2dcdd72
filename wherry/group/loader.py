"""Rebuild the groups and offsets of one `__consumer_offsets` partition from its log.

The log is read in order; for each key the last value wins and a tombstone (null value)
deletes (Kafka's GroupMetadataManager.doLoadGroupsAndOffsets). Offsets remember the base
offset of the batch that stored them. Offsets of transactional batches (TxnOffsetCommit) stay
pending per producer until that producer's marker: a COMMIT makes them committed (unless a
newer commit is there already), an ABORT drops them; those with no marker yet stay pending.
Records that do not parse are logged and skipped instead of failing the whole partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from wherry.common.topic_partition import TopicPartition
from wherry.group.consumer_group_records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ConsumerGroupReplay,
    record_type,
)
from wherry.group.group import CommitRecordMetadataAndOffset, OffsetAndMetadata
from wherry.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    RecordFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from wherry.group.share_group_records import SHARE_GROUP_RECORD_TYPES, ShareGroupReplay
from wherry.protocol.records import (
    CONTROL_COMMIT,
    RecordError,
    iter_batches,
    iter_records,
    parse_control_record,
)

log = logging.getLogger(__name__)

__all__ = ["PartitionSnapshot", "read_partition"]


_Offsets = dict[TopicPartition, CommitRecordMetadataAndOffset]


@dataclass(slots=True)
class PartitionSnapshot:
    """What one offsets partition holds after replaying its log."""

    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed_groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]] = field(
        default_factory=dict
    )
    # producer id -> group -> transactional offsets with no marker (yet)
    pending_txn_offsets: dict[int, dict[str, _Offsets]] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0
    # KIP-848 consumer groups (record types 3-8)
    consumer_groups: ConsumerGroupReplay = field(default_factory=ConsumerGroupReplay)
    # KIP-932 share groups (record types 9-15)
    share_groups: ShareGroupReplay = field(default_factory=ShareGroupReplay)

    def _complete_txn(self, producer_id: int, is_commit: bool) -> None:
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not is_commit or pending is None:
            return
        for group, offsets in pending.items():
            loaded = self.offsets.setdefault(group, {})
            for tp, committed in offsets.items():
                current = loaded.get(tp)
                if current is None or current.older_than(committed):
                    loaded[tp] = committed


def read_partition(batches: Iterable[bytes | bytearray | memoryview]) -> PartitionSnapshot:
    """Replay record batches (each item: one or more whole v2 batches, in log order)."""
    snap = PartitionSnapshot()
    for chunk in batches:
        buf = bytes(chunk)
        for pos, header in iter_batches(buf):
            if header.is_control:
                try:
                    control = next(iter(iter_records(buf, pos)), None)
                    if control is not None:
                        control_type, _ = parse_control_record(control)
                        snap._complete_txn(header.producer_id, control_type == CONTROL_COMMIT)
                except RecordError as e:
                    log.error("Skipping unreadable marker at offset %d: %s", header.base_offset, e)
                continue
            txn_producer = header.producer_id if header.is_transactional else None
            try:
                records = list(iter_records(buf, pos))
            except RecordError as e:
                log.error("Skipping unreadable batch at offset %d: %s", header.base_offset, e)
                snap.skipped += header.record_count
                continue
            for rec in records:
                snap.records += 1
                if rec.key is None:
                    log.error("Skipping record at offset %d with a null key", rec.offset)
                    snap.skipped += 1
                    continue
                try:
                    rt = record_type(rec.key)
                    if rt in CONSUMER_GROUP_RECORD_TYPES:
                        snap.consumer_groups.apply(rec.key, rec.value)
                        continue
                    if rt in SHARE_GROUP_RECORD_TYPES:
                        snap.share_groups.apply(rec.key, rec.value)
                        continue
                    _apply(snap, decode_key(rec.key), rec.value, header.base_offset, txn_producer)
                except RecordFormatError as e:
                    log.error("Skipping unreadable record at offset %d: %s", rec.offset, e)
                    snap.skipped += 1
    return snap


def _apply(
    snap: PartitionSnapshot,
    key: OffsetCommitKey | GroupMetadataKey | UnknownKey,
    value: bytes | None,
    batch_base_offset: int,
    txn_producer: int | None = None,
) -> None:
    match key:
        case OffsetCommitKey(group=group, topic=topic, partition=partition):
            tp = TopicPartition(topic, partition)
            if txn_producer is not None:
                pending = snap.pending_txn_offsets.setdefault(txn_producer, {}).setdefault(
                    group, {}
                )
                if value is None:
                    pending.pop(tp, None)
                else:
                    pending[tp] = CommitRecordMetadataAndOffset(
                        batch_base_offset, _offset_value(value)
                    )
                return
            if value is None:
                offsets = snap.offsets.get(group)
                if offsets is not None:
                    offsets.pop(tp, None)
                    if not offsets:
                        del snap.offsets[group]
                return
            snap.offsets.setdefault(group, {})[tp] = CommitRecordMetadataAndOffset(
                batch_base_offset, _offset_value(value)
            )
        case GroupMetadataKey(group=group):
            if value is None:
                snap.groups.pop(group, None)
                snap.removed_groups.add(group)
            else:
                snap.groups[group] = decode_group_metadata_value(value)
                snap.removed_groups.discard(group)
        case UnknownKey(version=version):
            log.warning("Ignoring record with unknown key version %d", version)


def _offset_value(value: bytes) -> OffsetAndMetadata:
    v = decode_offset_commit_value(value)
    return OffsetAndMetadata(
        v.offset,
        v.leader_epoch,
        v.metadata,
        v.commit_timestamp_ms,
        None if v.expire_timestamp_ms == -1 else v.expire_timestamp_ms,
    )
