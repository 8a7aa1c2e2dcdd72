"""The classic group coordinator (Kafka 3.9's GroupCoordinator + GroupMetadataManager).

Pure and single-threaded: no sockets, no asyncio. Requests come in as method calls with the
current wall-clock time `now_ms`; answers go to callbacks (JoinGroup, SyncGroup, OffsetCommit
may wait) or are returned. Rebalance and session timeouts live in the coordinator's two
purgatories, which the owner advances with `advance_clock(now_ms)` (the same clock).

Groups live on the partition `partition_for(group_id)` of `__consumer_offsets`; this
coordinator serves a group only while it leads that partition and has loaded it
(`begin_loading` → `load_partition`; `unload_partition` when leadership is lost).
Group assignments and offsets are written through `OffsetsStorage` before they are answered.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.delayed import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
    join_key,
    member_key,
    sync_key,
)
from wherry.group.group import (
    CommitRecordMetadataAndOffset,
    GroupMetadata,
    GroupOverview,
    GroupSummary,
    OffsetAndMetadata,
)
from wherry.group.loader import read_partition
from wherry.group.member import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
    MemberMetadata,
    SyncCallback,
    SyncGroupResult,
)
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
from wherry.group.storage import OffsetsStorage, Record
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.purgatory.timing_wheel import Timer

log = logging.getLogger(__name__)

__all__ = [
    "INVALID_OFFSET",
    "Api",
    "GroupCoordinator",
    "LeaveGroupResult",
    "LeaveMemberResponse",
    "MemberIdentity",
    "OffsetFetchPartition",
]

INVALID_OFFSET = -1

_E = GroupState.EMPTY
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_D = GroupState.DEAD

DEAD_GROUP = GroupSummary(str(_D), "", "", ())
NO_GROUP = GroupSummary("", "", "", ())


class Api(enum.Enum):
    JOIN_GROUP = "join-group"
    SYNC_GROUP = "sync-group"
    HEARTBEAT = "heartbeat"
    LEAVE_GROUP = "leave-group"
    OFFSET_COMMIT = "offset-commit"
    OFFSET_FETCH = "offset-fetch"
    DESCRIBE_GROUPS = "describe-groups"
    DELETE_GROUPS = "delete-groups"
    OFFSET_DELETE = "offset-delete"


# Group ids these APIs accept even when empty (Kafka keeps them for backwards compatibility).
_EMPTY_GROUP_ID_OK = frozenset(
    {Api.OFFSET_COMMIT, Api.OFFSET_FETCH, Api.DESCRIBE_GROUPS, Api.DELETE_GROUPS}
)


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[LeaveMemberResponse, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


_NO_OFFSET = OffsetFetchPartition(INVALID_OFFSET, -1, "", ErrorCode.none)

CommitCallback = Callable[[dict[TopicPartition, ErrorCode]], None]


def _java_length(s: str) -> int:
    """Java's String.length(): UTF-16 code units (offset.metadata.max.bytes counts these)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def _store_group_error(error: ErrorCode) -> ErrorCode:
    match error:
        case (
            ErrorCode.unknown_topic_or_partition
            | ErrorCode.not_enough_replicas
            | ErrorCode.not_enough_replicas_after_append
        ):
            return ErrorCode.coordinator_not_available
        case ErrorCode.not_leader_or_follower | ErrorCode.kafka_storage_error:
            return ErrorCode.not_coordinator
        case ErrorCode.request_timed_out:
            return ErrorCode.rebalance_in_progress
        case (
            ErrorCode.message_too_large
            | ErrorCode.record_list_too_large
            | ErrorCode.invalid_fetch_size
        ):
            return ErrorCode.unknown_server_error
        case _:
            return error


def _commit_error(error: ErrorCode) -> ErrorCode:
    match error:
        case (
            ErrorCode.unknown_topic_or_partition
            | ErrorCode.not_enough_replicas
            | ErrorCode.not_enough_replicas_after_append
        ):
            return ErrorCode.coordinator_not_available
        case ErrorCode.not_leader_or_follower | ErrorCode.kafka_storage_error:
            return ErrorCode.not_coordinator
        case (
            ErrorCode.message_too_large
            | ErrorCode.record_list_too_large
            | ErrorCode.invalid_fetch_size
        ):
            return ErrorCode.invalid_commit_offset_size
        case _:
            return error


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: GroupCoordinatorConfig,
        storage: OffsetsStorage,
        *,
        now_ms: int,
        partition_count: int | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self._storage = storage
        self._now_ms = now_ms
        self.partition_count = partition_count or config.offsets_topic_num_partitions
        self.rebalance_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory(
            "Rebalance", Timer(start_ms=now_ms)
        )
        self.heartbeat_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory(
            "Heartbeat", Timer(start_ms=now_ms)
        )
        self._groups: dict[str, GroupMetadata] = {}
        self._owned: set[int] = set()
        self._loading: dict[int, int | None] = {}  # partition -> epoch being loaded
        self._epochs: dict[int, int] = {}  # partition -> latest leader epoch seen
        self._active = False
        self._prefix = f"[GroupCoordinator {broker_id}]:"

    # --- lifecycle and time -------------------------------------------------------------------
    def startup(self) -> None:
        log.info("%s Startup complete.", self._prefix)
        self._active = True

    def shutdown(self) -> None:
        log.info("%s Shutting down.", self._prefix)
        self._active = False
        for p in sorted(self._owned | set(self._loading)):
            self.unload_partition(p)
        self.heartbeat_purgatory.shutdown()
        self.rebalance_purgatory.shutdown()

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def now_ms(self) -> int:
        """The latest time this coordinator was told about."""
        return self._now_ms

    def _tick(self, now_ms: int) -> None:
        if now_ms > self._now_ms:
            self._now_ms = now_ms

    def advance_clock(self, now_ms: int) -> None:
        """Expire due rebalances and sessions (call at `next_expiration_ms`)."""
        self._tick(now_ms)
        self.rebalance_purgatory.advance_clock(self._now_ms)
        self.heartbeat_purgatory.advance_clock(self._now_ms)

    def next_expiration_ms(self) -> int | None:
        nexts = [
            n
            for p in (self.rebalance_purgatory, self.heartbeat_purgatory)
            if (n := p.next_expiration_ms()) is not None
        ]
        return min(nexts) if nexts else None

    # --- placement and loading ------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    def is_partition_owned(self, partition: int) -> bool:
        return partition in self._owned

    def is_partition_loading(self, partition: int) -> bool:
        return partition in self._loading

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    def owned_partitions(self) -> set[int]:
        return set(self._owned)

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
        epoch: int | None = None,
    ) -> bool:
        """Rebuild the partition's groups and offsets from its log and start serving them.

        With `epoch`, the load only applies if it is still the one `begin_loading` started
        (leadership may have moved meanwhile); returns whether it was applied.
        """
        self._tick(now_ms)
        if epoch is not None and (
            partition not in self._loading or self._loading[partition] != epoch
        ):
            log.info("%s Discarding superseded load of partition %d", self._prefix, partition)
            return False
        snap = read_partition(batches)
        loaded: list[GroupMetadata] = []
        for group_id, value in snap.groups.items():
            group = self._group_from_value(group_id, value)
            group.initialize_offsets(snap.offsets.pop(group_id, {}))
            if self._groups.setdefault(group_id, group) is group:
                loaded.append(group)
        for group_id, offsets in snap.offsets.items():
            group = GroupMetadata(group_id, _E, self._now_ms)
            group.initialize_offsets(offsets)
            self._groups.setdefault(group_id, group)
        for group_id in snap.removed_groups:
            existing = self._groups.get(group_id)
            if existing is not None and group_id not in snap.groups and existing.size:
                log.error(
                    "%s Unexpected unload of active group %s while loading partition %d",
                    self._prefix,
                    group_id,
                    partition,
                )
        self._owned.add(partition)
        self._loading.pop(partition, None)
        for group in loaded:
            self._on_group_loaded(group)
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

    def unload_partition(self, partition: int, epoch: int | None = None) -> None:
        """Stop serving the partition's groups (Kafka's onResignation)."""
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
                self._on_group_unloaded(group)
                del self._groups[group_id]
                removed += 1
        if was:
            log.info(
                "%s Resigned as the group coordinator for partition %d; unloaded %d groups",
                self._prefix,
                partition,
                removed,
            )

    def _group_from_value(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
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
        group = GroupMetadata(group_id, _S if members else _E, self._now_ms)
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

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        log.info(
            "%s Loading group metadata for %s with generation %d",
            self._prefix,
            group.group_id,
            group.generation_id,
        )
        if group.size > self.config.group_max_size:
            self._prepare_rebalance(
                group,
                f"Freshly-loaded group is over capacity ({self.config.group_max_size}). "
                "Rebalancing in order to give a chance for consumers to commit offsets",
            )
        for m in group.all_member_metadata():
            self._complete_and_schedule_next_heartbeat_expiration(group, m)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        log.info(
            "%s Unloading group metadata for %s with generation %d",
            self._prefix,
            group.group_id,
            group.generation_id,
        )
        previous = group.state
        group.transition_to(_D, self._now_ms)
        if previous is _P:
            for m in group.all_member_metadata():
                group.maybe_invoke_join_callback(
                    m, JoinGroupResult.failed(m.member_id, ErrorCode.not_coordinator)
                )
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
        elif previous in (_S, _C):
            for m in group.all_member_metadata():
                group.maybe_invoke_sync_callback(
                    m, SyncGroupResult.failed(ErrorCode.not_coordinator)
                )
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, m.member_id))
        self._remove_sync_expiration(group)

    # --- validation -----------------------------------------------------------------------------
    def _validate_group_status(self, group_id: str | None, api: Api) -> ErrorCode | None:
        if group_id is None or (not group_id and api not in _EMPTY_GROUP_ID_OK):
            return ErrorCode.invalid_group_id
        if not self._active:
            return ErrorCode.coordinator_not_available
        p = self.partition_for(group_id)
        if p in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if p not in self._owned:
            return ErrorCode.not_coordinator
        return None

    def _validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, op: str
    ) -> ErrorCode | None:
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                log.info(
                    "%s Request memberId=%s for static member with groupInstanceId=%s is fenced "
                    "by current memberId=%s during operation %s",
                    self._prefix,
                    member_id,
                    group_instance_id,
                    current,
                    op,
                )
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self.config.group_max_size
        match group.state:
            case GroupState.EMPTY | GroupState.DEAD:
                return True
            case GroupState.PREPARING_REBALANCE:
                return (
                    group.has(member_id) and group.get(member_id).is_awaiting_join
                ) or group.num_awaiting < max_size
            case _:
                return group.has(member_id) or group.size < max_size

    # --- JoinGroup ------------------------------------------------------------------------------
    def handle_join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        *,
        require_known_member_id: bool,
        support_skipping_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        callback: JoinCallback,
        now_ms: int,
        reason: str | None = None,
    ) -> None:
        self._tick(now_ms)
        err = self._validate_group_status(group_id, Api.JOIN_GROUP)
        if err is not None:
            callback(JoinGroupResult.failed(member_id, err))
            return
        cfg = self.config
        if not (
            cfg.group_min_session_timeout_ms
            <= session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            callback(JoinGroupResult.failed(member_id, ErrorCode.invalid_session_timeout))
            return
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown:
                callback(JoinGroupResult.failed(member_id, ErrorCode.unknown_member_id))
                return
            group = self._groups[group_id] = GroupMetadata(group_id, _E, self._now_ms)
        why = reason or "not provided"
        protocols = [(name, bytes(data)) for name, data in protocols]
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._do_new_member_join_group(
                group,
                group_instance_id,
                require_known_member_id,
                support_skipping_assignment,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                callback,
                why,
            )
        else:
            self._do_current_member_join_group(
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                callback,
                why,
            )
        if group.is_(_P):
            self.rebalance_purgatory.check_and_complete(join_key(group_id))

    def _do_new_member_join_group(
        self,
        group: GroupMetadata,
        group_instance_id: str | None,
        require_known_member_id: bool,
        support_skipping_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: JoinCallback,
        reason: str,
    ) -> None:
        if group.is_(_D):
            callback(JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(
                JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol)
            )
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                log.info(
                    "%s Static member with groupInstanceId=%s and unknown member id joins group "
                    "%s in %s state. Replacing previously mapped member %s with this "
                    "groupInstanceId.",
                    self._prefix,
                    group_instance_id,
                    group.group_id,
                    group.state,
                    old_member_id,
                )
                self._update_static_member_and_rebalance(
                    group,
                    old_member_id,
                    new_member_id,
                    group_instance_id,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    callback,
                    reason,
                    support_skipping_assignment,
                )
            else:
                log.info(
                    "%s Static member with groupInstanceId=%s and unknown member id joins group "
                    "%s in %s state. Created a new member id %s for this member and add to the "
                    "group.",
                    self._prefix,
                    group_instance_id,
                    group.group_id,
                    group.state,
                    new_member_id,
                )
                self._add_member_and_rebalance(
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    new_member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    protocol_type,
                    protocols,
                    group,
                    callback,
                    reason,
                )
        elif require_known_member_id:
            # KIP-394: register a pending member and ask it to rejoin with the id.
            log.info(
                "%s Dynamic member with unknown member id joins group %s in %s state. Created a "
                "new member id %s and request the member to rejoin with this id.",
                self._prefix,
                group.group_id,
                group.state,
                new_member_id,
            )
            group.add_pending_member(new_member_id)
            self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
            callback(JoinGroupResult.failed(new_member_id, ErrorCode.member_id_required))
        else:
            log.info(
                "%s Dynamic Member with unknown member id joins group %s in %s state. Created a "
                "new member id %s for this member and add to the group.",
                self._prefix,
                group.group_id,
                group.state,
                new_member_id,
            )
            self._add_member_and_rebalance(
                rebalance_timeout_ms,
                session_timeout_ms,
                new_member_id,
                None,
                client_id,
                client_host,
                protocol_type,
                protocols,
                group,
                callback,
                reason,
            )

    def _do_current_member_join_group(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        callback: JoinCallback,
        reason: str,
    ) -> None:
        if group.is_(_D):
            callback(JoinGroupResult.failed(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(protocol_type, {p for p, _ in protocols}):
            callback(JoinGroupResult.failed(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                # A pending member is never static (Kafka raises IllegalStateException).
                log.error(
                    "%s Received unexpected JoinGroup with groupInstanceId=%s for pending member "
                    "with memberId=%s",
                    self._prefix,
                    group_instance_id,
                    member_id,
                )
                callback(JoinGroupResult.failed(member_id, ErrorCode.unknown_server_error))
                return
            log.info(
                "%s Pending dynamic member with id %s joins group %s in %s state. Adding to the "
                "group now.",
                self._prefix,
                member_id,
                group.group_id,
                group.state,
            )
            self._add_member_and_rebalance(
                rebalance_timeout_ms,
                session_timeout_ms,
                member_id,
                None,
                client_id,
                client_host,
                protocol_type,
                protocols,
                group,
                callback,
                reason,
            )
            return
        err = self._validate_current_member(group, member_id, group_instance_id, "join-group")
        if err is not None:
            callback(JoinGroupResult.failed(member_id, err))
            return
        member = group.get(member_id)
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                self._update_member_and_rebalance(
                    group,
                    member,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    f"Member {member_id} joining group during {group.state}; "
                    f"client reason: {reason}",
                    callback,
                )
            case GroupState.COMPLETING_REBALANCE:
                if member.matches(protocols):
                    # The member lost the JoinGroup response; answer with the current generation.
                    callback(self._current_join_result(group, member_id, with_members=True))
                else:
                    self._update_member_and_rebalance(
                        group,
                        member,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        f"Updating metadata for member {member_id} during {group.state}; "
                        f"client reason: {reason}",
                        callback,
                    )
            case GroupState.STABLE:
                if group.is_leader(member_id):
                    # The leader rejoins to trigger a rebalance (e.g. topic metadata changed).
                    self._update_member_and_rebalance(
                        group,
                        member,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        f"Leader {member_id} re-joining group during {group.state}; "
                        f"client reason: {reason}",
                        callback,
                    )
                elif not member.matches(protocols):
                    self._update_member_and_rebalance(
                        group,
                        member,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        f"Updating metadata for member {member_id} during {group.state}; "
                        f"client reason: {reason}",
                        callback,
                    )
                else:
                    callback(self._current_join_result(group, member_id, with_members=False))
            case _:
                log.warning(
                    "%s Attempt to add rejoining member %s of group %s in unexpected group "
                    "state %s",
                    self._prefix,
                    member_id,
                    group.group_id,
                    group.state,
                )
                callback(JoinGroupResult.failed(member_id, ErrorCode.unknown_member_id))

    def _current_join_result(
        self, group: GroupMetadata, member_id: str, *, with_members: bool
    ) -> JoinGroupResult:
        members = (
            group.current_member_metadata() if with_members and group.is_leader(member_id) else ()
        )
        return JoinGroupResult(
            members,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_or_empty,
            False,
            ErrorCode.none,
        )

    def _add_member_and_rebalance(
        self,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        group: GroupMetadata,
        callback: JoinCallback,
        reason: str,
    ) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_id=group.group_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            supported_protocols=list(protocols),
        )
        member.is_new = True
        # A member joining the first rebalance can extend the initial delay.
        if group.is_(_P) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # New members cannot heartbeat yet and a disconnect goes unnoticed while the JoinGroup
        # is parked, so their JoinGroup times out instead (they retry if still alive).
        self._complete_and_schedule_next_expiration(
            group, member, self.config.new_member_join_timeout_ms
        )
        self._maybe_prepare_rebalance(
            group,
            f"Adding new member {member_id} with group instance id {group_instance_id}; "
            f"client reason: {reason}",
        )

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback,
        reason: str,
        support_skipping_assignment: bool,
    ) -> None:
        current_leader = group.leader_or_empty
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old member id's session expires harmlessly; watch the new id instead.
        self._complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = list(member.supported_protocols)
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        match group.state:
            case GroupState.STABLE:
                # Without a change of the selected protocol, only persist the new member id.
                if group.protocol_name == group.select_protocol():
                    log.info(
                        "%s Static member which joins during Stable stage and doesn't affect "
                        "selectProtocol will not trigger rebalance.",
                        self._prefix,
                    )
                    assignment = {m.member_id: m.assignment for m in group.all_member_metadata()}

                    def stored(error: ErrorCode) -> None:
                        if error != ErrorCode.none:
                            log.warning(
                                "%s Failed to persist metadata for group %s: %s",
                                self._prefix,
                                group.group_id,
                                error.name,
                            )
                            # Revert the static member to its old id.
                            group.update_member(
                                member,
                                old_protocols,
                                old_rebalance_timeout_ms,
                                old_session_timeout_ms,
                                None,
                            )
                            old = group.replace_static_member(
                                group_instance_id, new_member_id, old_member_id
                            )
                            self._complete_and_schedule_next_heartbeat_expiration(group, old)
                            callback(
                                JoinGroupResult(
                                    (),
                                    UNKNOWN_MEMBER_ID,
                                    group.generation_id,
                                    group.protocol_type,
                                    group.protocol_name,
                                    current_leader,
                                    False,
                                    error,
                                )
                            )
                        elif support_skipping_assignment:
                            # JoinGroup v9+: tell the leader it leads but must not reassign.
                            is_leader = group.is_leader(new_member_id)
                            group.maybe_invoke_join_callback(
                                member,
                                JoinGroupResult(
                                    group.current_member_metadata() if is_leader else (),
                                    new_member_id,
                                    group.generation_id,
                                    group.protocol_type,
                                    group.protocol_name,
                                    group.leader_or_empty,
                                    is_leader,
                                    ErrorCode.none,
                                ),
                            )
                        else:
                            # Older clients: return the old leader id so that a rejoining
                            # leader does not run a (useless) assignment in a stable group.
                            group.maybe_invoke_join_callback(
                                member,
                                JoinGroupResult(
                                    (),
                                    new_member_id,
                                    group.generation_id,
                                    group.protocol_type,
                                    group.protocol_name,
                                    current_leader,
                                    False,
                                    ErrorCode.none,
                                ),
                            )

                    self._store_group(group, assignment, stored)
                else:
                    self._maybe_prepare_rebalance(
                        group,
                        f"Group's selectedProtocol will change because static member "
                        f"{member.member_id} with instance id {group_instance_id} joined with "
                        f"change of protocol; client reason: {reason}",
                    )
            case GroupState.COMPLETING_REBALANCE:
                # The leader may already be assigning to the old member id: rebalance again.
                self._prepare_rebalance(
                    group,
                    f"Updating metadata for static member {member.member_id} with instance id "
                    f"{group_instance_id}; client reason: {reason}",
                )
            case GroupState.PREPARING_REBALANCE:
                pass
            case _:
                raise AssertionError(
                    f"Group {group.group_id} was not supposed to be in the state {group.state} "
                    f"when the unknown static member {group_instance_id} rejoins."
                )

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        reason: str,
        callback: JoinCallback,
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        # Members waiting in SyncGroup must rejoin.
        if group.is_(_C):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        delayed: DelayedJoin
        if group.is_(_E):
            delay = self.config.group_initial_rebalance_delay_ms
            delayed = InitialDelayedJoin(
                self, group, delay, delay, max(group.rebalance_timeout_ms - delay, 0)
            )
        else:
            delayed = DelayedJoin(self, group, group.rebalance_timeout_ms)
        previous = group.state
        group.transition_to(_P, self._now_ms)
        log.info(
            "%s Preparing to rebalance group %s in state %s with old generation %d "
            "(%s-%d) (reason: %s)",
            self._prefix,
            group.group_id,
            previous,
            group.generation_id,
            OFFSETS_TOPIC,
            self.partition_for(group.group_id),
            reason,
        )
        self.rebalance_purgatory.try_complete_else_watch(
            delayed, [join_key(group.group_id)], now_ms=self._now_ms
        )

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        # A new member may time out with its JoinGroup still parked: answer it first.
        group.maybe_invoke_join_callback(
            member, JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id)
        )
        # (Not in Kafka: never leave a parked SyncGroup of a removed member unanswered.)
        group.maybe_invoke_sync_callback(
            member, SyncGroupResult.failed(ErrorCode.unknown_member_id)
        )
        group.remove(member.member_id)
        match group.state:
            case GroupState.STABLE | GroupState.COMPLETING_REBALANCE:
                self._maybe_prepare_rebalance(group, reason)
            case GroupState.PREPARING_REBALANCE:
                self.rebalance_purgatory.check_and_complete(join_key(group.group_id))
            case _:
                pass

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(_P):
            self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    # --- DelayedJoin callbacks ----------------------------------------------------------------
    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]) -> bool:
        if group.has_all_members_joined:
            return force_complete()
        return False

    def on_complete_join(self, group: GroupMetadata) -> None:
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static_member]
        if gone:
            log.info(
                "%s Group %s removed dynamic members who haven't joined: %s",
                self._prefix,
                group.group_id,
                [m.member_id for m in gone],
            )
            for m in gone:
                group.remove(m.member_id)
                self._remove_heartbeat_for_leaving_member(group, m.member_id)
        if group.is_(_D):
            log.info("%s Group %s is dead, skipping rebalance stage", self._prefix, group.group_id)
        elif not group.maybe_elect_new_joined_leader() and group.size:
            # Nobody rejoined: wait again until sessions remove the silent members.
            log.error(
                "%s Group %s could not complete rebalance because no members rejoined",
                self._prefix,
                group.group_id,
            )
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms),
                [join_key(group.group_id)],
                now_ms=self._now_ms,
            )
        else:
            group.init_next_generation(self._now_ms)
            if group.is_(_E):
                log.info(
                    "%s Group %s with generation %d is now empty (%s-%d)",
                    self._prefix,
                    group.group_id,
                    group.generation_id,
                    OFFSETS_TOPIC,
                    self.partition_for(group.group_id),
                )

                def stored(error: ErrorCode) -> None:
                    if error != ErrorCode.none:
                        log.warning(
                            "%s Failed to write empty metadata for group %s: %s",
                            self._prefix,
                            group.group_id,
                            error.name,
                        )

                self._store_group(group, {}, stored)
            else:
                log.info(
                    "%s Stabilized group %s generation %d (%s-%d) with %d members",
                    self._prefix,
                    group.group_id,
                    group.generation_id,
                    OFFSETS_TOPIC,
                    self.partition_for(group.group_id),
                    group.size,
                )
                for m in group.all_member_metadata():
                    result = self._current_join_result(group, m.member_id, with_members=True)
                    group.maybe_invoke_join_callback(m, result)
                    self._complete_and_schedule_next_heartbeat_expiration(group, m)
                    m.is_new = False
                    group.add_pending_sync_member(m.member_id)
                self._schedule_pending_sync(group)

    # --- pending SyncGroups (DelayedSync) -------------------------------------------------------
    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [sync_key(group.group_id)],
            now_ms=self._now_ms,
        )

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.clear_pending_sync_members()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def try_complete_pending_sync(
        self, group: GroupMetadata, generation_id: int, force_complete: Callable[[], bool]
    ) -> bool:
        if generation_id != group.generation_id or group.state in (_D, _E, _P):
            return force_complete()
        if group.has_received_sync_from_all_members:
            return force_complete()
        return False

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id or group.state in (_D, _E, _P):
            log.error(
                "%s Unexpected sync expiration for %s (generation %d, group at %d in %s)",
                self._prefix,
                group.group_id,
                generation_id,
                group.generation_id,
                group.state,
            )
            return
        if not group.has_received_sync_from_all_members:
            pending = group.all_pending_sync_members()
            for member_id in pending:
                group.remove(member_id)
                self._remove_heartbeat_for_leaving_member(group, member_id)
            log.info(
                "%s Group %s removed members who haven't sent their sync request: %s",
                self._prefix,
                group.group_id,
                sorted(pending),
            )
            self._prepare_rebalance(
                group, f"Removing {sorted(pending)} on pending sync request expiration"
            )

    # --- heartbeats (DelayedHeartbeat) ----------------------------------------------------------
    def _complete_and_schedule_next_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata
    ) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int
    ) -> None:
        key = member_key(group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        member.last_heartbeat_ms = self._now_ms
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms),
            [key],
            now_ms=self._now_ms,
        )

    def _add_pending_member_expiration(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms),
            [member_key(group.group_id, member_id)],
            now_ms=self._now_ms,
        )

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))

    def try_complete_heartbeat(
        self,
        group: GroupMetadata,
        member_id: str,
        is_pending: bool,
        force_complete: Callable[[], bool],
    ) -> bool:
        if group.is_(_D):
            return force_complete()
        if is_pending:
            return force_complete() if group.has(member_id) else False
        if not group.has(member_id) or group.get(member_id).has_satisfied_heartbeat:
            return force_complete()
        return False

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool) -> None:
        if group.is_(_D):
            log.info(
                "%s Received notification of heartbeat expiration for member %s after group %s "
                "had already been unloaded or deleted.",
                self._prefix,
                member_id,
                group.group_id,
            )
        elif is_pending:
            if group.is_pending_member(member_id):
                log.info(
                    "%s Pending member %s in group %s has been removed after session timeout "
                    "expiration.",
                    self._prefix,
                    member_id,
                    group.group_id,
                )
                self._remove_pending_member_and_update_group(group, member_id)
        elif group.has(member_id):
            member = group.get(member_id)
            if not member.has_satisfied_heartbeat:
                log.info(
                    "%s Member %s in group %s has failed, removing it from the group",
                    self._prefix,
                    member_id,
                    group.group_id,
                )
                self._remove_member_and_update_group(
                    group, member, f"removing member {member_id} on heartbeat expiration"
                )

    # --- SyncGroup ------------------------------------------------------------------------------
    def handle_sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
        assignments: Mapping[str, bytes],
        callback: SyncCallback,
        now_ms: int,
    ) -> None:
        self._tick(now_ms)
        err = self._validate_group_status(group_id, Api.SYNC_GROUP)
        if err == ErrorCode.coordinator_load_in_progress:
            # The rebalance state was lost with the old coordinator: rejoin (older clients do
            # not expect COORDINATOR_LOAD_IN_PROGRESS here).
            callback(SyncGroupResult.failed(ErrorCode.rebalance_in_progress))
            return
        if err is not None:
            callback(SyncGroupResult.failed(err))
            return
        group = self._groups.get(group_id)
        if group is None:
            callback(SyncGroupResult.failed(ErrorCode.unknown_member_id))
            return
        if group.is_(_D):
            callback(SyncGroupResult.failed(ErrorCode.coordinator_not_available))
            return
        err = self._validate_current_member(group, member_id, group_instance_id, "sync-group")
        if err is None:
            if generation_id != group.generation_id:
                err = ErrorCode.illegal_generation
            elif (protocol_type is not None and group.protocol_type != protocol_type) or (
                protocol_name is not None and group.protocol_name != protocol_name
            ):
                err = ErrorCode.inconsistent_group_protocol
        if err is not None:
            callback(SyncGroupResult.failed(err))
            return
        match group.state:
            case GroupState.EMPTY:
                callback(SyncGroupResult.failed(ErrorCode.unknown_member_id))
            case GroupState.PREPARING_REBALANCE:
                callback(SyncGroupResult.failed(ErrorCode.rebalance_in_progress))
            case GroupState.COMPLETING_REBALANCE:
                group.get(member_id).awaiting_sync_callback = callback
                self._remove_pending_sync_member(group, member_id)
                if group.is_leader(member_id):
                    self._on_leader_assignment(group, member_id, generation_id, assignments)
            case GroupState.STABLE:
                self._remove_pending_sync_member(group, member_id)
                member = group.get(member_id)
                callback(
                    SyncGroupResult(
                        group.protocol_type,
                        group.protocol_name,
                        member.assignment,
                        ErrorCode.none,
                    )
                )
                self._complete_and_schedule_next_heartbeat_expiration(group, member)
            case _:
                raise AssertionError(f"Reached unexpected condition for Dead group {group_id}")

    def _on_leader_assignment(
        self,
        group: GroupMetadata,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
    ) -> None:
        log.info(
            "%s Assignment received from leader %s for group %s for generation %d. The group "
            "has %d members, %d of which are static.",
            self._prefix,
            member_id,
            group.group_id,
            group.generation_id,
            group.size,
            len(group.all_static_members()),
        )
        assignment = {mid: bytes(a) for mid, a in assignments.items() if group.has(mid)}
        missing = [mid for mid in group.all_members() if mid not in assignment]
        if missing:
            log.warning(
                "%s Setting empty assignments for members %s of %s for generation %d",
                self._prefix,
                missing,
                group.group_id,
                group.generation_id,
            )
            for mid in missing:
                assignment[mid] = b""

        def stored(error: ErrorCode) -> None:
            # The group may have moved on while the write was in flight.
            if group.is_(_C) and generation_id == group.generation_id:
                if error != ErrorCode.none:
                    self._reset_and_propagate_assignment_error(group, error)
                    self._maybe_prepare_rebalance(
                        group,
                        f"Error {error.name} when storing group assignment during SyncGroup "
                        f"(member: {member_id})",
                    )
                else:
                    self._set_and_propagate_assignment(group, assignment)
                    group.transition_to(_S, self._now_ms)

        self._store_group(group, assignment, stored)

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: Mapping[str, bytes]
    ) -> None:
        for m in group.all_member_metadata():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for m in group.all_member_metadata():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error == ErrorCode.none
        for m in group.all_member_metadata():
            if ok and not m.assignment:
                log.warning(
                    "%s Sending empty assignment to member %s of %s for generation %d with no "
                    "errors",
                    self._prefix,
                    m.member_id,
                    group.group_id,
                    group.generation_id,
                )
            result = SyncGroupResult(
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                m.assignment,
                error,
            )
            if group.maybe_invoke_sync_callback(m, result):
                # Sessions that expired while waiting were ignored: restart them now.
                self._complete_and_schedule_next_heartbeat_expiration(group, m)

    # --- Heartbeat ------------------------------------------------------------------------------
    def handle_heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> ErrorCode:
        self._tick(now_ms)
        err = self._validate_group_status(group_id, Api.HEARTBEAT)
        if err is not None:
            # While loading, answer blindly: the group is not known yet.
            return ErrorCode.none if err == ErrorCode.coordinator_load_in_progress else err
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(_D):
            return ErrorCode.coordinator_not_available
        err = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if err is not None:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        match group.state:
            case GroupState.EMPTY:
                return ErrorCode.unknown_member_id
            case GroupState.COMPLETING_REBALANCE | GroupState.STABLE:
                self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
                return ErrorCode.none
            case GroupState.PREPARING_REBALANCE:
                self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
                return ErrorCode.rebalance_in_progress
            case _:
                raise AssertionError(f"Reached unexpected condition for Dead group {group_id}")

    # --- LeaveGroup -----------------------------------------------------------------------------
    def handle_leave_group(
        self, group_id: str, members: Sequence[MemberIdentity], now_ms: int
    ) -> LeaveGroupResult:
        self._tick(now_ms)
        err = self._validate_group_status(group_id, Api.LEAVE_GROUP)
        if err is not None:
            return LeaveGroupResult(err, ())
        group = self._groups.get(group_id)
        if group is None:
            return LeaveGroupResult(
                ErrorCode.none,
                tuple(
                    LeaveMemberResponse(
                        m.member_id, m.group_instance_id, ErrorCode.unknown_member_id
                    )
                    for m in members
                ),
            )
        if group.is_(_D):
            return LeaveGroupResult(ErrorCode.coordinator_not_available, ())
        out: list[LeaveMemberResponse] = []
        for m in members:
            out.append(
                LeaveMemberResponse(m.member_id, m.group_instance_id, self._leave_one(group, m))
            )
        return LeaveGroupResult(ErrorCode.none, tuple(out))

    def _leave_one(self, group: GroupMetadata, m: MemberIdentity) -> ErrorCode:
        reason = m.reason or "not provided"
        if m.member_id == UNKNOWN_MEMBER_ID:
            # Administrative removal of a static member by its group.instance.id.
            current = (
                group.current_static_member_id(m.group_instance_id)
                if m.group_instance_id is not None
                else None
            )
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_current_member_from_group(group, current, reason)
            return ErrorCode.none
        if group.is_pending_member(m.member_id):
            self._remove_pending_member_and_update_group(group, m.member_id)
            self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, m.member_id))
            log.info(
                "%s Pending member with memberId=%s has left group %s through explicit "
                "`LeaveGroup` request",
                self._prefix,
                m.member_id,
                group.group_id,
            )
            return ErrorCode.none
        err = self._validate_current_member(group, m.member_id, m.group_instance_id, "leave-group")
        if err is not None:
            return err
        self._remove_current_member_from_group(group, m.member_id, reason)
        return ErrorCode.none

    def _remove_current_member_from_group(
        self, group: GroupMetadata, member_id: str, reason: str
    ) -> None:
        member = group.get(member_id)
        self._remove_member_and_update_group(
            group, member, f"Removing member {member_id} on LeaveGroup; client reason: {reason}"
        )
        self._remove_heartbeat_for_leaving_member(group, member_id)
        log.info(
            "%s Member %r has left group %s through explicit `LeaveGroup`; client reason: %s",
            self._prefix,
            member,
            group.group_id,
            reason,
        )

    # --- OffsetCommit ---------------------------------------------------------------------------
    def handle_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        now_ms: int,
    ) -> None:
        self._tick(now_ms)
        err = self._validate_group_status(group_id, Api.OFFSET_COMMIT)
        if err is not None:
            callback(dict.fromkeys(offsets, err))
            return
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A commit from an older generation of a group that no longer exists.
                callback(dict.fromkeys(offsets, ErrorCode.illegal_generation))
                return
            # A group that only uses Kafka for offset storage (no group management).
            log.info(
                "%s Creating simple consumer group %s via manual offset commit.",
                self._prefix,
                group_id,
            )
            group = self._groups[group_id] = GroupMetadata(group_id, _E, self._now_ms)
        err = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if err is not None:
            callback(dict.fromkeys(offsets, err))
            return
        match group.state:
            case GroupState.EMPTY:
                self._store_offsets(group, member_id, offsets, callback)
            case GroupState.STABLE | GroupState.PREPARING_REBALANCE:
                # Commits stay allowed while preparing; the heartbeat tells the member to rejoin.
                self._complete_and_schedule_next_heartbeat_expiration(group, group.get(member_id))
                self._store_offsets(group, member_id, offsets, callback)
            case GroupState.COMPLETING_REBALANCE:
                callback(dict.fromkeys(offsets, ErrorCode.rebalance_in_progress))
            case _:
                raise AssertionError(f"unexpected group state {group.state}")

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> ErrorCode | None:
        if group.is_(_D):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(_E):
            # Admin client or a consumer without group management: fine while the group is empty.
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            err = self._validate_current_member(
                group, member_id, group_instance_id, "offset-commit"
            )
            if err is not None:
                return err
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if not group.is_(_E):
            # Only members can commit while the group has members.
            return ErrorCode.unknown_member_id
        return None

    def _metadata_ok(self, metadata: str) -> bool:
        return _java_length(metadata) <= self.config.offset_metadata_max_bytes

    def _store_offsets(
        self,
        group: GroupMetadata,
        member_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
    ) -> None:
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
        group.prepare_offset_commit(valid)

        def done(error: ErrorCode, base_offset: int) -> None:
            if error == ErrorCode.none:
                if not group.is_(_D):
                    for tp, om in valid.items():
                        group.on_offset_commit_append(
                            tp, CommitRecordMetadataAndOffset(base_offset, om)
                        )
                result = ErrorCode.none
            else:
                if not group.is_(_D):
                    for tp, om in valid.items():
                        group.fail_pending_offset_write(tp, om)
                log.debug(
                    "%s Offset commit from group %s, member %s failed when appending to log due "
                    "to %s",
                    self._prefix,
                    group.group_id,
                    member_id,
                    error.name,
                )
                result = _commit_error(error)
            callback(
                {
                    tp: result if tp in valid else ErrorCode.offset_metadata_too_large
                    for tp in offsets
                }
            )

        self._storage.append(p, records, done)

    def _store_group(
        self,
        group: GroupMetadata,
        assignment: Mapping[str, bytes],
        callback: Callable[[ErrorCode], None],
    ) -> None:
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
            callback(_store_group_error(error))

        self._storage.append(
            p,
            [(group_metadata_key(group.group_id), encode_group_metadata_value(value))],
            done,
        )

    # --- OffsetFetch ----------------------------------------------------------------------------
    def handle_fetch_offsets(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Sequence[TopicPartition] | None,
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetFetchPartition]]:
        """Committed offsets (all of the group's when `partitions` is None)."""
        err = self._validate_group_status(group_id, Api.OFFSET_FETCH)
        if err is not None:
            return err, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(_D):
            return ErrorCode.none, dict.fromkeys(partitions or (), _NO_OFFSET)
        tps = list(group.all_offsets()) if partitions is None else list(partitions)
        out: dict[TopicPartition, OffsetFetchPartition] = {}
        for tp in tps:
            if require_stable and group.has_pending_offset_commits(tp):
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
        return ErrorCode.none, out

    # --- DescribeGroups / ListGroups ----------------------------------------------------------
    def handle_describe_group(
        self, group_id: str, api_version: int = 0
    ) -> tuple[ErrorCode, str | None, GroupSummary]:
        err = self._validate_group_status(group_id, Api.DESCRIBE_GROUPS)
        if err is not None:
            return err, None, NO_GROUP
        group = self._groups.get(group_id)
        if group is None:
            if api_version >= 6:
                return ErrorCode.group_id_not_found, f"Group {group_id} not found.", DEAD_GROUP
            return ErrorCode.none, None, DEAD_GROUP
        return ErrorCode.none, None, group.summary()

    def handle_list_groups(
        self, states: Collection[str] = (), types: Collection[str] = ()
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        err = ErrorCode.coordinator_load_in_progress if self._loading else ErrorCode.none
        wanted = {s.lower() for s in states}
        if types and "classic" not in {t.lower() for t in types}:
            return err, []
        groups = [
            g.overview()
            for g in self._groups.values()
            if not wanted or str(g.state).lower() in wanted
        ]
        return err, groups

    def group(self, group_id: str) -> GroupMetadata | None:
        """The group's metadata, if this coordinator has it (for tools and tests)."""
        return self._groups.get(group_id)

    # --- DeleteGroups / OffsetDelete / retention -------------------------------------------
    def handle_delete_groups(self, group_ids: Iterable[str], now_ms: int) -> dict[str, ErrorCode]:
        self._tick(now_ms)
        errors: dict[str, ErrorCode] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            err = self._validate_group_status(group_id, Api.DELETE_GROUPS)
            if err is not None:
                errors[group_id] = err
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_(_D):
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.is_(_E):
                group.transition_to(_D, self._now_ms)
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.non_empty_group
        if eligible:
            removed = self._cleanup_group_metadata(eligible, lambda g: g.remove_all_offsets())
            for g in eligible:
                errors[g.group_id] = ErrorCode.none
            log.info(
                "%s The following groups were deleted: %s. A total of %d offsets were removed.",
                self._prefix,
                ", ".join(g.group_id for g in eligible),
                removed,
            )
        return errors

    def handle_delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], now_ms: int
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        self._tick(now_ms)
        err = self._validate_group_status(group_id, Api.OFFSET_DELETE)
        if err is not None:
            return err, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(_D):
            return ErrorCode.group_id_not_found, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        eligible: list[TopicPartition]
        if group.is_(_E):
            eligible = list(partitions)
        elif group.is_consumer_group:
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp.topic)]
            for tp in partitions:
                if group.is_subscribed_to_topic(tp.topic):
                    errors[tp] = ErrorCode.group_subscribed_to_topic
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            removed = self._cleanup_group_metadata([group], lambda g: g.remove_offsets(eligible))
            for tp in eligible:
                errors[tp] = ErrorCode.none
            log.info(
                "%s The following offsets of the group %s were deleted: %s. A total of %d "
                "offsets were removed.",
                self._prefix,
                group_id,
                ", ".join(str(tp) for tp in eligible),
                removed,
            )
        return ErrorCode.none, errors

    def cleanup_expired_offsets(self, now_ms: int) -> int:
        """The periodic retention task: expire offsets, drop dead groups, write tombstones."""
        self._tick(now_ms)
        retention = self.config.offsets_retention_ms
        removed = self._cleanup_group_metadata(
            list(self._groups.values()),
            lambda g: g.remove_expired_offsets(self._now_ms, retention),
        )
        if removed:
            log.info("%s Removed %d expired offsets.", self._prefix, removed)
        return removed

    def handle_deleted_partitions(self, partitions: Sequence[TopicPartition], now_ms: int) -> int:
        """Forget offsets of deleted topic partitions."""
        self._tick(now_ms)
        return self._cleanup_group_metadata(
            list(self._groups.values()), lambda g: g.remove_offsets(partitions)
        )

    def _cleanup_group_metadata(
        self,
        groups: Iterable[GroupMetadata],
        selector: Callable[[GroupMetadata], Mapping[TopicPartition, OffsetAndMetadata]],
    ) -> int:
        total = 0
        for group in groups:
            group_id = group.group_id
            removed = selector(group)
            if group.is_(_E) and not group.has_offsets:
                log.info(
                    "%s Group %s transitioned to Dead in generation %d",
                    self._prefix,
                    group_id,
                    group.generation_id,
                )
                group.transition_to(_D, self._now_ms)
            p = self.partition_for(group_id)
            if p not in self._owned:
                continue
            tombstones: list[Record] = [
                (offset_commit_key(group_id, tp.topic, tp.partition), None) for tp in removed
            ]
            if group.is_(_D) and self._groups.get(group_id) is group:
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
