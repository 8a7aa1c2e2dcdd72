"""The groups and offsets of the `__consumer_offsets` partitions this broker leads (Kafka's
GroupMetadataManager).

It owns the group registry, the committed offsets (inside each `GroupMetadata`) and the
loading state of the offsets partitions: a partition is marked loading when this broker
becomes its leader (`begin_loading`), rebuilt from its log (`load_partition`) and dropped
when leadership moves (`unload_partition`). It writes group metadata and offsets through
`OffsetsStorage` and expires offsets past retention, writing tombstones.

It knows nothing of rebalances: the coordinator passes `on_group_loaded` /
`on_group_unloaded` callbacks where a loaded or unloaded group needs its attention.
Pure and single-threaded; time comes in as `now_ms`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.group import CommitRecordMetadataAndOffset, GroupMetadata, OffsetAndMetadata
from wherry.group.loader import PartitionSnapshot, read_partition
from wherry.group.member import MemberMetadata
from wherry.group.offset_writes import OffsetWritesInFlight
from wherry.group.records import (
    OFFSETS_TOPIC,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_offset_commit_value,
    group_metadata_key,
    offset_commit_key,
    partition_for,
)
from wherry.group.state import GroupState
from wherry.group.storage import OffsetsStorage, ProducerIdAndEpoch, Record

log = logging.getLogger(__name__)

__all__ = [
    "INVALID_OFFSET",
    "CommitCallback",
    "GroupCallback",
    "GroupMetadataManager",
    "OffsetFetchPartition",
]

INVALID_OFFSET = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


_NO_OFFSET = OffsetFetchPartition(INVALID_OFFSET, -1, "", ErrorCode.none)

CommitCallback = Callable[[dict[TopicPartition, ErrorCode]], None]
GroupCallback = Callable[[GroupMetadata], None]

# How a failed append to the offsets topic is answered: errors of every write, then those
# that differ between group metadata (SyncGroup, JoinGroup) and offset commits.
_APPEND_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}
_TOO_LARGE = (
    ErrorCode.message_too_large,
    ErrorCode.record_list_too_large,
    ErrorCode.invalid_fetch_size,
)
_STORE_GROUP_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    **_APPEND_ERRORS,
    ErrorCode.request_timed_out: ErrorCode.rebalance_in_progress,
    **dict.fromkeys(_TOO_LARGE, ErrorCode.unknown_server_error),
}
_COMMIT_ERRORS: Mapping[ErrorCode, ErrorCode] = {
    **_APPEND_ERRORS,
    **dict.fromkeys(_TOO_LARGE, ErrorCode.invalid_commit_offset_size),
}


def _java_length(s: str) -> int:
    """Java's String.length(): UTF-16 code units (offset.metadata.max.bytes counts these)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class GroupMetadataManager:
    def __init__(
        self,
        config: GroupCoordinatorConfig,
        storage: OffsetsStorage,
        *,
        partition_count: int | None = None,
        log_prefix: str,
    ) -> None:
        self.config = config
        self._storage = storage
        self.partition_count = partition_count or config.offsets_topic_num_partitions
        self._groups: dict[str, GroupMetadata] = {}
        self._owned: set[int] = set()
        self._loading: dict[int, int | None] = {}  # partition -> epoch being loaded
        self._epochs: dict[int, int] = {}  # partition -> latest leader epoch seen
        # producer id -> groups with its transactional offsets (Kafka's openGroupsForProducer)
        self._producer_groups: dict[int, set[str]] = {}
        self._writes = OffsetWritesInFlight()  # offset commits not answered yet
        self._prefix = log_prefix

    # --- placement ------------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self._owned

    def is_partition_loading(self, partition: int) -> bool:
        return partition in self._loading

    def is_group_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self._owned

    def is_group_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self._loading

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    def owned_partitions(self) -> set[int]:
        return set(self._owned)

    # --- the group registry ---------------------------------------------------------------------
    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self._groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Register `group` unless its id is taken; return the registered one."""
        return self._groups.setdefault(group.group_id, group)

    def replace_group(self, group: GroupMetadata) -> None:
        """Register `group` in place of the one of its id (a group changing type)."""
        self._groups[group.group_id] = group

    def current_groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    # --- loading and unloading ------------------------------------------------------------------
    def begin_loading(self, partition: int, epoch: int) -> bool:
        """This broker became leader of `partition` at `epoch` (Kafka's onElection).

        Marks the partition loading (requests for its groups get COORDINATOR_LOAD_IN_PROGRESS)
        and returns True if the caller must read the log and call `load_partition`; False if
        it is already loaded or the epoch is stale.
        """
        current = self._epochs.get(partition)
        if current is not None and epoch < current:
            log.info(
                "%s Not loading %s-%d in epoch %d since current epoch is %d",
                self._prefix,
                OFFSETS_TOPIC,
                partition,
                epoch,
                current,
            )
            return False
        self._epochs[partition] = epoch
        if partition in self._owned:
            return False
        log.info(
            "%s Elected as the group coordinator for partition %d in epoch %d",
            self._prefix,
            partition,
            epoch,
        )
        self._loading[partition] = epoch
        return True

    def load_partition(
        self,
        partition: int,
        batches: Iterable[bytes | bytearray | memoryview],
        *,
        now_ms: int,
        epoch: int | None,
        on_group_loaded: GroupCallback,
        on_snapshot: Callable[[PartitionSnapshot], None] | None = None,
    ) -> bool:
        """Rebuild the partition's groups and offsets from its log and start serving them;
        `on_snapshot` gets the replayed partition first (the KIP-848 groups are in it);
        `on_group_loaded` is called for each group with metadata, once the partition is owned.

        With `epoch`, the load only applies if it is still the one `begin_loading` started
        (leadership may have moved meanwhile); returns whether it was applied.
        """
        if epoch is not None and (
            partition not in self._loading or self._loading[partition] != epoch
        ):
            log.info("%s Discarding superseded load of partition %d", self._prefix, partition)
            return False
        snap = read_partition(batches)
        loaded: list[GroupMetadata] = []
        for group_id, value in snap.groups.items():
            group = _group_from_value(group_id, value, now_ms)
            group.initialize_offsets(snap.offsets.pop(group_id, {}))
            if self._groups.setdefault(group_id, group) is group:
                loaded.append(group)
        for group_id, offsets in snap.offsets.items():
            group = GroupMetadata(group_id, GroupState.EMPTY, now_ms)
            group.initialize_offsets(offsets)
            self._groups.setdefault(group_id, group)
        for producer_id, by_group in snap.pending_txn_offsets.items():
            for group_id, pending in by_group.items():
                if not pending:
                    continue
                group = self._groups.setdefault(
                    group_id, GroupMetadata(group_id, GroupState.EMPTY, now_ms)
                )
                group.initialize_pending_txn_offsets({producer_id: pending})
                self._producer_groups.setdefault(producer_id, set()).add(group_id)
        for group_id in snap.removed_groups:
            existing = self._groups.get(group_id)
            if existing is not None and group_id not in snap.groups and existing.size:
                log.error(
                    "%s Unexpected unload of active group %s while loading partition %d",
                    self._prefix,
                    group_id,
                    partition,
                )
        if on_snapshot is not None:
            on_snapshot(snap)
        self._owned.add(partition)
        self._loading.pop(partition, None)
        for group in loaded:
            on_group_loaded(group)
        log.info(
            "%s Finished loading offsets and group metadata from %s-%d: %d groups, %d records "
            "(%d skipped)",
            self._prefix,
            OFFSETS_TOPIC,
            partition,
            len(snap.groups),
            snap.records,
            snap.skipped,
        )
        return True

    def unload_partition(
        self, partition: int, epoch: int | None, on_group_unloaded: GroupCallback
    ) -> None:
        """Stop serving the partition's groups (Kafka's onResignation); `on_group_unloaded` is
        called for each before it leaves the registry."""
        if epoch is not None:
            current = self._epochs.get(partition)
            if current is not None and epoch < current:
                return
            self._epochs[partition] = epoch
        was = partition in self._owned or partition in self._loading
        self._owned.discard(partition)
        self._loading.pop(partition, None)
        removed = 0
        for group_id, group in list(self._groups.items()):
            if self.partition_for(group_id) == partition:
                on_group_unloaded(group)
                del self._groups[group_id]
                removed += 1
        if was:
            log.info(
                "%s Resigned as the group coordinator for partition %d; unloaded %d groups",
                self._prefix,
                partition,
                removed,
            )

    def shutdown(self, on_group_unloaded: GroupCallback) -> None:
        """Unload every partition that is owned or loading."""
        for p in sorted(self._owned | set(self._loading)):
            self.unload_partition(p, None, on_group_unloaded)

    # --- storing group metadata and offsets -----------------------------------------------------
    def store_group(
        self,
        group: GroupMetadata,
        assignment: Mapping[str, bytes],
        callback: Callable[[ErrorCode], None],
    ) -> None:
        """Write the group's metadata with `assignment`; `callback` gets the (mapped) error."""
        p = self.partition_for(group.group_id)
        if p not in self._owned:
            callback(ErrorCode.not_coordinator)
            return
        protocol = group.protocol_name
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp_ms=(
                -1 if group.current_state_timestamp_ms is None else group.current_state_timestamp_ms
            ),
            members=tuple(
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(protocol) if protocol is not None else b"",
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in group.all_member_metadata()
            ),
        )
        generation = group.generation_id

        def done(error: ErrorCode, _base_offset: int) -> None:
            if error != ErrorCode.none:
                log.warning(
                    "%s Metadata from group %s with generation %d failed when appending to log "
                    "due to %s",
                    self._prefix,
                    group.group_id,
                    generation,
                    error.name,
                )
            callback(_STORE_GROUP_ERRORS.get(error, error))

        self._storage.append(
            p,
            [(group_metadata_key(group.group_id), encode_group_metadata_value(value))],
            done,
        )

    def _metadata_ok(self, metadata: str) -> bool:
        return _java_length(metadata) <= self.config.offset_metadata_max_bytes

    def store_offsets(
        self,
        group: GroupMetadata,
        member_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
    ) -> None:
        """Write committed offsets; `callback` gets an error per partition of `offsets`."""

        def appended(valid: Mapping[TopicPartition, OffsetAndMetadata], base: int) -> None:
            for tp, om in valid.items():
                group.on_offset_commit_append(tp, CommitRecordMetadataAndOffset(base, om))

        def failed(valid: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
            for tp, om in valid.items():
                group.fail_pending_offset_write(tp, om)

        self._write_offsets(
            group,
            offsets,
            callback,
            prepare=group.prepare_offset_commit,
            appended=appended,
            failed=failed,
            what=f"Offset commit from group {group.group_id}, member {member_id}",
        )

    def store_txn_offsets(
        self,
        group: GroupMetadata,
        txn: ProducerIdAndEpoch,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
    ) -> None:
        """TxnOffsetCommit: write the offsets as a transactional batch of the producer; they
        stay pending (invisible to OffsetFetch) until its marker (`handle_txn_completion`)."""

        def prepare(valid: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
            self._producer_groups.setdefault(txn.producer_id, set()).add(group.group_id)
            group.prepare_txn_offset_commit(txn.producer_id, valid)

        def appended(valid: Mapping[TopicPartition, OffsetAndMetadata], base: int) -> None:
            for tp, om in valid.items():
                group.on_txn_offset_commit_append(
                    txn.producer_id, tp, CommitRecordMetadataAndOffset(base, om)
                )

        def failed(valid: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
            for tp in valid:
                group.fail_pending_txn_offset_commit(txn.producer_id, tp)

        self._write_offsets(
            group,
            offsets,
            callback,
            prepare=prepare,
            appended=appended,
            failed=failed,
            what=(
                f"Transactional offset commit of producer {txn.producer_id} "
                f"for group {group.group_id}"
            ),
            txn=txn,
        )

    def _write_offsets(
        self,
        group: GroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        *,
        prepare: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None],
        appended: Callable[[Mapping[TopicPartition, OffsetAndMetadata], int], None],
        failed: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None],
        what: str,
        txn: ProducerIdAndEpoch | None = None,
    ) -> None:
        """The one write path of OffsetCommit and TxnOffsetCommit: partitions whose metadata
        is too large fail alone; the others are written as one batch (a transactional one of
        the producer `txn`), pending in the group until the append answers."""
        valid = {tp: om for tp, om in offsets.items() if self._metadata_ok(om.metadata)}
        if not valid:
            callback(dict.fromkeys(offsets, ErrorCode.offset_metadata_too_large))
            return
        p = self.partition_for(group.group_id)
        if p not in self._owned:
            callback(dict.fromkeys(offsets, ErrorCode.not_coordinator))
            return
        records: list[Record] = [
            (
                offset_commit_key(group.group_id, tp.topic, tp.partition),
                encode_offset_commit_value(
                    OffsetCommitValue(
                        om.committed_offset,
                        om.leader_epoch,
                        om.metadata,
                        om.commit_timestamp_ms,
                        -1 if om.expire_timestamp_ms is None else om.expire_timestamp_ms,
                    )
                ),
            )
            for tp, om in valid.items()
        ]
        prepare(valid)
        write = None if txn is not None else self._writes.begin(group.group_id)

        def done(error: ErrorCode, base_offset: int) -> None:
            if error == ErrorCode.none:
                if not group.is_(GroupState.DEAD):
                    appended(valid, base_offset)
                result = ErrorCode.none
            else:
                if not group.is_(GroupState.DEAD):
                    failed(valid)
                log.debug(
                    "%s %s failed when appending to log due to %s", self._prefix, what, error.name
                )
                result = _COMMIT_ERRORS.get(error, error)
            if write is not None:  # the group's offsets are updated: stable fetches may go on
                self._writes.end(group.group_id, write)
            callback(
                {
                    tp: result if tp in valid else ErrorCode.offset_metadata_too_large
                    for tp in offsets
                }
            )

        try:
            if txn is None:
                self._storage.append(p, records, done)
            else:
                self._storage.append_transactional(p, txn, records, done)
        except BaseException:
            if write is not None:  # never answered: no stable fetch may wait for it
                self._writes.end(group.group_id, write)
            raise

    def handle_txn_completion(
        self, producer_id: int, partitions: Iterable[int], is_commit: bool
    ) -> None:
        """A COMMIT/ABORT marker of the producer was written to the offsets `partitions`:
        complete its pending transactional offsets in their groups (Kafka's
        handleTxnCompletion)."""
        wanted = set(partitions)
        groups = self._producer_groups.get(producer_id)
        if not groups:
            return
        for group_id in [g for g in groups if self.partition_for(g) in wanted]:
            group = self._groups.get(group_id)
            if group is not None and not group.is_(GroupState.DEAD):
                group.complete_pending_txn_offset_commit(producer_id, is_commit)
            groups.discard(group_id)
        if not groups:
            del self._producer_groups[producer_id]

    # --- reading offsets ------------------------------------------------------------------------
    def after_offset_writes(self, group_id: str, then: Callable[[], None]) -> None:
        """Call `then` once the group's offset commits being written now have been answered
        (a `require_stable` fetch reads after them, as Kafka 4's coordinator does)."""
        self._writes.after(group_id, then)

    def get_offsets(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Sequence[TopicPartition] | None,
    ) -> dict[TopicPartition, OffsetFetchPartition]:
        """Committed offsets (all of the group's when `partitions` is None); with
        `require_stable`, UNSTABLE_OFFSET_COMMIT for those of a transaction not ended yet."""
        group = self._groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return dict.fromkeys(partitions or (), _NO_OFFSET)
        tps = list(group.all_offsets()) if partitions is None else list(partitions)
        out: dict[TopicPartition, OffsetFetchPartition] = {}
        for tp in tps:
            if require_stable and group.has_pending_txn_offset_commit(tp):
                out[tp] = OffsetFetchPartition(
                    INVALID_OFFSET, -1, "", ErrorCode.unstable_offset_commit
                )
                continue
            om = group.offset(tp)
            out[tp] = (
                _NO_OFFSET
                if om is None
                else OffsetFetchPartition(
                    om.committed_offset, om.leader_epoch, om.metadata, ErrorCode.none
                )
            )
        return out

    # --- removing offsets and groups ------------------------------------------------------------
    def cleanup_expired_offsets(self, now_ms: int, keep: Collection[str] = ()) -> int:
        """The periodic retention task: expire offsets, drop dead groups, write tombstones;
        the groups in `keep` (KIP-848 groups with members) keep their offsets."""
        retention = self.config.offsets_retention_ms
        removed = self.cleanup_group_metadata(
            [g for g in self.current_groups() if g.group_id not in keep],
            lambda g: g.remove_expired_offsets(now_ms, retention),
            now_ms,
        )
        if removed:
            log.info("%s Removed %d expired offsets.", self._prefix, removed)
        return removed

    def remove_partition_offsets(self, partitions: Sequence[TopicPartition], now_ms: int) -> int:
        """Forget every group's offsets of `partitions` (their topics were deleted)."""
        return self.cleanup_group_metadata(
            self.current_groups(), lambda g: g.remove_offsets(partitions), now_ms
        )

    def cleanup_group_metadata(
        self,
        groups: Iterable[GroupMetadata],
        selector: Callable[[GroupMetadata], Mapping[TopicPartition, OffsetAndMetadata]],
        now_ms: int,
    ) -> int:
        """Remove the offsets `selector` picks from each group; an Empty group left without
        offsets dies and leaves the registry. Writes the tombstones; returns how many offsets
        were removed."""
        total = 0
        for group in groups:
            group_id = group.group_id
            removed = selector(group)
            if group.is_(GroupState.EMPTY) and not group.has_offsets:
                log.info(
                    "%s Group %s transitioned to Dead in generation %d",
                    self._prefix,
                    group_id,
                    group.generation_id,
                )
                group.transition_to(GroupState.DEAD, now_ms)
            p = self.partition_for(group_id)
            if p not in self._owned:
                continue
            tombstones: list[Record] = [
                (offset_commit_key(group_id, tp.topic, tp.partition), None) for tp in removed
            ]
            if group.is_(GroupState.DEAD) and self._groups.get(group_id) is group:
                del self._groups[group_id]
                # Generation 0 groups only stored offsets: there is no metadata to delete.
                if group.generation_id > 0:
                    tombstones.append((group_metadata_key(group_id), None))
            if tombstones:

                def done(error: ErrorCode, _offset: int, gid: str = group_id) -> None:
                    if error != ErrorCode.none:
                        # A lost tombstone is written again by the next cleanup.
                        log.warning(
                            "%s Failed to write tombstones for group %s: %s",
                            self._prefix,
                            gid,
                            error.name,
                        )

                self._storage.append(p, tombstones, done)
            total += len(removed)
        return total


def _group_from_value(group_id: str, value: GroupMetadataValue, now_ms: int) -> GroupMetadata:
    """A group as its latest metadata record describes it (Stable with members, else Empty)."""
    protocol = value.protocol or ""
    members = [
        MemberMetadata(
            member_id=m.member_id,
            group_id=group_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            protocol_type=value.protocol_type,
            supported_protocols=[(protocol, m.subscription)],
            assignment=m.assignment,
        )
        for m in value.members
    ]
    group = GroupMetadata(group_id, GroupState.STABLE if members else GroupState.EMPTY, now_ms)
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.current_state_timestamp_ms = (
        None if value.current_state_timestamp_ms == -1 else value.current_state_timestamp_ms
    )
    group.load_leader(value.leader)
    for m in members:
        group.add(m)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group
