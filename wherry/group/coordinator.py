"""The classic group coordinator (Kafka 3.9's GroupCoordinator): the requests of group members.

Pure and single-threaded: no sockets, no asyncio. Requests come in as method calls with the
current wall-clock time `now_ms`; answers go to callbacks (JoinGroup, SyncGroup, OffsetCommit
may wait) or are returned. Rebalance and session timeouts live in two purgatories, which the
owner advances with `advance_clock(now_ms)` (the same clock).

`GroupCoordinator` checks each request (coordinator status, member, generation, group state)
and hands the work to three parts, calling down only:

* `join.py`: the JoinGroup paths of new and current members;
* `rebalance.py`: the purgatories and their clock, rebalances, sessions and pending syncs;
* `metadata_manager.py`: the groups and offsets, loading and unloading `__consumer_offsets`
  partitions, storage and offset expiry (Kafka's GroupMetadataManager).

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
from wherry.group.classic_members import ClassicJoin
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.consumer_bridge import ConsumerGroupBridge
from wherry.group.consumer_coordinator import (
    ConsumerGroupManager,
    HeartbeatCallback,
    HeartbeatRequest,
    TopicsImage,
)
from wherry.group.consumer_group import ConsumerGroup
from wherry.group.group import (
    GroupMetadata,
    GroupOverview,
    GroupSummary,
    OffsetAndMetadata,
    OffsetCommitter,
)
from wherry.group.join import JoinGroupHandler, JoinRequest
from wherry.group.loader import PartitionSnapshot
from wherry.group.member import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
    SyncCallback,
    SyncGroupResult,
)
from wherry.group.metadata_manager import (
    INVALID_OFFSET,
    CommitCallback,
    GroupMetadataManager,
    OffsetFetchPartition,
)
from wherry.group.rebalance import Rebalancer
from wherry.group.share_group_records import ShareGroupReplay
from wherry.group.state import GroupState
from wherry.group.storage import OffsetsStorage, ProducerIdAndEpoch
from wherry.purgatory.purgatory import DelayedOperationPurgatory

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
    TXN_OFFSET_COMMIT = "txn-offset-commit"
    CONSUMER_GROUP_HEARTBEAT = "consumer-group-heartbeat"
    CONSUMER_GROUP_DESCRIBE = "consumer-group-describe"


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
        self._active = False
        self._prefix = prefix = f"[GroupCoordinator {broker_id}]:"
        self._manager = GroupMetadataManager(
            config, storage, partition_count=partition_count, log_prefix=prefix
        )
        self._rebalancer = Rebalancer(config, self._manager, now_ms=now_ms, log_prefix=prefix)
        self._joins = JoinGroupHandler(self._rebalancer, log_prefix=prefix)
        # KIP-848 consumer groups; their offsets live in `_manager` (an Empty classic entry
        # per group holds them, as Kafka keeps offsets apart from the group's records).
        self._consumer = ConsumerGroupManager(
            config.consumer,
            storage,
            self._manager.partition_for,
            self._manager.is_partition_owned,
            log_prefix=prefix,
        )
        self._bridge = ConsumerGroupBridge(
            config, self._manager, self._consumer, storage, self._rebalancer, log_prefix=prefix
        )
        # Told of each loaded partition's share groups (records 9-15): the share runtime
        # rebuilds them (coordinator/shares.py)
        self.share_groups_loaded: Callable[[int, ShareGroupReplay], None] | None = None

    @property
    def partition_count(self) -> int:
        """Partitions of `__consumer_offsets` (set to the topic's actual count when known)."""
        return self._manager.partition_count

    @partition_count.setter
    def partition_count(self, count: int) -> None:
        self._manager.partition_count = count

    @property
    def rebalance_purgatory(self) -> DelayedOperationPurgatory:
        return self._rebalancer.rebalance_purgatory

    @property
    def heartbeat_purgatory(self) -> DelayedOperationPurgatory:
        return self._rebalancer.heartbeat_purgatory

    # --- lifecycle and time -------------------------------------------------------------------
    def startup(self) -> None:
        log.info("%s Startup complete.", self._prefix)
        self._active = True

    def shutdown(self) -> None:
        log.info("%s Shutting down.", self._prefix)
        self._active = False
        self._manager.shutdown(self._rebalancer.on_group_unloaded)
        for p in range(self._manager.partition_count):
            self._consumer.unload(p)
        self._rebalancer.shutdown()

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def now_ms(self) -> int:
        """The latest time this coordinator was told about."""
        return self._rebalancer.now_ms

    def advance_clock(self, now_ms: int) -> None:
        """Expire due rebalances and sessions (call at `next_expiration_ms`)."""
        self._rebalancer.advance_clock(now_ms)
        if self._active:
            self._consumer.advance_clock(now_ms)

    def next_expiration_ms(self) -> int | None:
        deadlines = [
            d
            for d in (self._rebalancer.next_expiration_ms(), self._consumer.next_expiration_ms())
            if d is not None
        ]
        return min(deadlines) if deadlines else None

    # --- placement and loading ------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return self._manager.partition_for(group_id)

    def is_partition_owned(self, partition: int) -> bool:
        return self._manager.is_partition_owned(partition)

    def is_partition_loading(self, partition: int) -> bool:
        return self._manager.is_partition_loading(partition)

    @property
    def is_loading(self) -> bool:
        return self._manager.is_loading

    def owned_partitions(self) -> set[int]:
        return self._manager.owned_partitions()

    def begin_loading(self, partition: int, epoch: int) -> bool:
        """This broker became leader of `partition` at `epoch` (Kafka's onElection).

        Marks the partition loading (requests for its groups get COORDINATOR_LOAD_IN_PROGRESS)
        and returns True if the caller must read the log and call `load_partition`; False if
        it is already loaded or the epoch is stale.
        """
        return self._manager.begin_loading(partition, epoch)

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
        self._rebalancer.tick(now_ms)

        def consumer_groups(snap: PartitionSnapshot) -> None:
            n = self._consumer.load(partition, snap.consumer_groups, now_ms)
            if n:
                log.info("%s Loaded %d consumer groups of partition %d", self._prefix, n, partition)
            if self.share_groups_loaded is not None:
                self.share_groups_loaded(partition, snap.share_groups)

        return self._manager.load_partition(
            partition,
            batches,
            now_ms=self.now_ms,
            epoch=epoch,
            on_group_loaded=self._rebalancer.on_group_loaded,
            on_snapshot=consumer_groups,
        )

    def unload_partition(self, partition: int, epoch: int | None = None) -> None:
        """Stop serving the partition's groups (Kafka's onResignation)."""
        self._manager.unload_partition(partition, epoch, self._rebalancer.on_group_unloaded)
        if not self._manager.is_partition_owned(partition):
            self._consumer.unload(partition)

    # --- validation -----------------------------------------------------------------------------
    def catch_up(self, now_ms: int | None) -> None:
        """Expire every session and rebalance due by ``now_ms`` before a request is answered:
        as with Kafka's timers, a request arriving after a deadline never sees the member whose
        session ended there, even when the ticker is late on a busy event loop."""
        if now_ms is not None:
            self.advance_clock(now_ms)

    def _group_status(self, group_id: str, api: Api, now_ms: int) -> ErrorCode | None:
        """Expire the classic rebalances and sessions due by ``now_ms`` (their purgatories:
        only what is due is touched), then `_validate_group_status`. The consumer groups'
        member deadlines are a walk over every member, left to the ticker and to the admin
        requests (`catch_up`) rather than paid on every heartbeat and commit."""
        self._rebalancer.advance_clock(now_ms)
        return self._validate_group_status(group_id, api)

    def _validate_group_status(self, group_id: str | None, api: Api) -> ErrorCode | None:
        if group_id is None or (not group_id and api not in _EMPTY_GROUP_ID_OK):
            return ErrorCode.invalid_group_id
        if not self._active:
            return ErrorCode.coordinator_not_available
        if self._manager.is_group_loading(group_id):
            return ErrorCode.coordinator_load_in_progress
        if not self._manager.is_group_local(group_id):
            return ErrorCode.not_coordinator
        return None

    def _validate_member_generation(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        op: str,
    ) -> ErrorCode | None:
        """A request of a current member, in the group's current generation."""
        err = self._rebalancer.validate_current_member(group, member_id, group_instance_id, op)
        if err is None and generation_id != group.generation_id:
            err = ErrorCode.illegal_generation
        return err

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
        topics: TopicsImage | None = None,
    ) -> None:
        err = self._group_status(group_id, Api.JOIN_GROUP, now_ms)
        classic = ClassicJoin(
            member_id,
            group_instance_id,
            require_known_member_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
        )
        if err is None and self._bridge.join_consumer_group(
            group_id, classic, topics, self.now_ms, callback
        ):
            return
        if err is None:
            err = self._bridge.classic_join_refusal(group_id)
        if err is not None:
            callback(JoinGroupResult.failed(member_id, err))
            return
        request = JoinRequest(
            group_instance_id=group_instance_id,
            require_known_member_id=require_known_member_id,
            support_skipping_assignment=support_skipping_assignment,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=[(name, bytes(data)) for name, data in protocols],
            callback=callback,
            reason=reason or "not provided",
        )
        self._joins.join(group_id, member_id, request)

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
        err = self._group_status(group_id, Api.SYNC_GROUP, now_ms)
        if err == ErrorCode.coordinator_load_in_progress:
            # The rebalance state was lost with the old coordinator: rejoin (older clients do
            # not expect COORDINATOR_LOAD_IN_PROGRESS here).
            callback(SyncGroupResult.failed(ErrorCode.rebalance_in_progress))
            return
        if err is not None:
            callback(SyncGroupResult.failed(err))
            return
        who = (member_id, group_instance_id, generation_id)
        protocol = (protocol_type, protocol_name)
        if self._bridge.sync_consumer_group(group_id, who, protocol, self.now_ms, callback):
            return
        group = self._manager.get_group(group_id)
        if group is None:
            callback(SyncGroupResult.failed(ErrorCode.unknown_member_id))
            return
        if group.is_(_D):
            callback(SyncGroupResult.failed(ErrorCode.coordinator_not_available))
            return
        err = self._validate_member_generation(
            group, member_id, group_instance_id, generation_id, "sync-group"
        )
        if err is None and (
            (protocol_type is not None and group.protocol_type != protocol_type)
            or (protocol_name is not None and group.protocol_name != protocol_name)
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
                self._rebalancer.remove_pending_sync_member(group, member_id)
                if group.is_leader(member_id):
                    self._rebalancer.on_leader_assignment(
                        group, member_id, generation_id, assignments
                    )
            case GroupState.STABLE:
                self._rebalancer.remove_pending_sync_member(group, member_id)
                member = group.get(member_id)
                callback(
                    SyncGroupResult(
                        group.protocol_type,
                        group.protocol_name,
                        member.assignment,
                        ErrorCode.none,
                    )
                )
                self._rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
            case _:
                raise AssertionError(f"Reached unexpected condition for Dead group {group_id}")

    # --- Heartbeat ------------------------------------------------------------------------------
    def handle_heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> ErrorCode:
        err = self._group_status(group_id, Api.HEARTBEAT, now_ms)
        if err is not None:
            # While loading, answer blindly: the group is not known yet.
            return ErrorCode.none if err == ErrorCode.coordinator_load_in_progress else err
        err = self._bridge.heartbeat_consumer_group(
            group_id, member_id, group_instance_id, generation_id, self.now_ms
        )
        if err is not None:
            return err
        group = self._manager.get_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(_D):
            return ErrorCode.coordinator_not_available
        err = self._validate_member_generation(
            group, member_id, group_instance_id, generation_id, "heartbeat"
        )
        if err is not None:
            return err
        match group.state:
            case GroupState.EMPTY:
                return ErrorCode.unknown_member_id
            case (
                GroupState.COMPLETING_REBALANCE | GroupState.STABLE | GroupState.PREPARING_REBALANCE
            ):
                # Members of a group preparing a rebalance learn that they must rejoin.
                answer = ErrorCode.rebalance_in_progress if group.is_(_P) else ErrorCode.none
                self._rebalancer.complete_and_schedule_next_heartbeat_expiration(
                    group, group.get(member_id)
                )
                return answer
            case _:
                raise AssertionError(f"Reached unexpected condition for Dead group {group_id}")

    # --- LeaveGroup -----------------------------------------------------------------------------
    def handle_leave_group(
        self,
        group_id: str,
        members: Sequence[MemberIdentity],
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> LeaveGroupResult:
        err = self._group_status(group_id, Api.LEAVE_GROUP, now_ms)
        if err is not None:
            return LeaveGroupResult(err, ())
        left = self._bridge.leave_consumer_group(
            group_id, [(m.member_id, m.group_instance_id, m.reason) for m in members], topics
        )
        if left is not None:
            return LeaveGroupResult(ErrorCode.none, tuple(LeaveMemberResponse(*r) for r in left))
        group = self._manager.get_group(group_id)
        if group is not None and group.is_(_D):
            return LeaveGroupResult(ErrorCode.coordinator_not_available, ())

        def leave(m: MemberIdentity) -> LeaveMemberResponse:
            error = ErrorCode.unknown_member_id if group is None else self._leave_one(group, m)
            return LeaveMemberResponse(m.member_id, m.group_instance_id, error)

        return LeaveGroupResult(ErrorCode.none, tuple(leave(m) for m in members))

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
            self._rebalancer.remove_pending_member_and_update_group(group, m.member_id)
            self._rebalancer.remove_heartbeat_for_leaving_member(group, m.member_id)
            log.info(
                "%s Pending member with memberId=%s has left group %s through explicit "
                "`LeaveGroup` request",
                self._prefix,
                m.member_id,
                group.group_id,
            )
            return ErrorCode.none
        err = self._rebalancer.validate_current_member(
            group, m.member_id, m.group_instance_id, "leave-group"
        )
        if err is not None:
            return err
        self._remove_current_member_from_group(group, m.member_id, reason)
        return ErrorCode.none

    def _remove_current_member_from_group(
        self, group: GroupMetadata, member_id: str, reason: str
    ) -> None:
        member = group.get(member_id)
        self._rebalancer.remove_member_and_update_group(
            group, member, f"Removing member {member_id} on LeaveGroup; client reason: {reason}"
        )
        self._rebalancer.remove_heartbeat_for_leaving_member(group, member_id)
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
        committer: OffsetCommitter,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        now_ms: int,
        api_version: int = 9,
    ) -> None:
        group_id, member_id = committer.group_id, committer.member_id
        if self._commit_not_classic(
            committer, Api.OFFSET_COMMIT, offsets, callback, now_ms,
            lambda consumer_group: self._consumer.validate_offset_commit(
                consumer_group, member_id, committer.generation_id, api_version
            ),
            lambda holder: self._manager.store_offsets(holder, member_id, offsets, callback),
        ):
            return
        group = self._manager.get_group(group_id)
        if group is None:
            if committer.generation_id >= 0:
                # A commit from an older generation of a group that no longer exists.
                callback(dict.fromkeys(offsets, ErrorCode.illegal_generation))
                return
            # A group that only uses Kafka for offset storage (no group management).
            log.info(
                "%s Creating simple consumer group %s via manual offset commit.",
                self._prefix,
                group_id,
            )
            group = self._manager.add_group(GroupMetadata(group_id, _E, self.now_ms))
        err = self._validate_offset_commit(group, committer)
        if err is not None:
            callback(dict.fromkeys(offsets, err))
            return
        match group.state:
            case GroupState.EMPTY:
                self._manager.store_offsets(group, member_id, offsets, callback)
            case GroupState.STABLE | GroupState.PREPARING_REBALANCE:
                # Commits stay allowed while preparing; the heartbeat tells the member to rejoin.
                self._rebalancer.complete_and_schedule_next_heartbeat_expiration(
                    group, group.get(member_id)
                )
                self._manager.store_offsets(group, member_id, offsets, callback)
            case GroupState.COMPLETING_REBALANCE:
                callback(dict.fromkeys(offsets, ErrorCode.rebalance_in_progress))
            case _:
                raise AssertionError(f"unexpected group state {group.state}")

    def handle_txn_commit_offsets(
        self,
        committer: OffsetCommitter,
        txn: ProducerIdAndEpoch,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        now_ms: int,
    ) -> None:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): offsets of a transaction, pending
        until its marker. A producer outside the group's management sends generation -1 and
        no member id, accepted whatever the group's state."""
        group_id, member_id = committer.group_id, committer.member_id
        # A KIP-848 member's epoch (none for a producer outside the group's management).
        unmanaged = committer.generation_id < 0 and member_id == UNKNOWN_MEMBER_ID
        if self._commit_not_classic(
            committer, Api.TXN_OFFSET_COMMIT, offsets, callback, now_ms,
            lambda consumer_group: None
            if unmanaged
            else self._consumer.validate_offset_commit(
                consumer_group, member_id, committer.generation_id, api_version=9
            ),
            lambda holder: self._manager.store_txn_offsets(holder, txn, offsets, callback),
        ):
            return
        group = self._manager.get_group(group_id)
        if group is None:
            group = self._manager.add_group(GroupMetadata(group_id, _E, self.now_ms))
        err = self._validate_offset_commit(group, committer, transactional=True)
        if err is not None:
            callback(dict.fromkeys(offsets, err))
            return
        self._manager.store_txn_offsets(group, txn, offsets, callback)

    def _commit_not_classic(
        self,
        committer: OffsetCommitter,
        api: Api,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback,
        now_ms: int,
        refusal: Callable[[ConsumerGroup], tuple[ErrorCode, str | None] | None],
        store: Callable[[GroupMetadata], None],
    ) -> bool:
        """What OffsetCommit and TxnOffsetCommit share before a classic group's checks: the
        coordinator's refusal (not here, loading, ...), then a commit to a KIP-848 group,
        refused with `refusal`'s error or handed to `store` with the group's classic offsets
        holder. False when the commit goes to a classic group (or to none yet)."""
        group_id = committer.group_id
        err = self._group_status(group_id, api, now_ms)
        if err is None:
            consumer_group = self._consumer.get(group_id)
            if consumer_group is None:
                return False
            refused = refusal(consumer_group)
            if refused is None:
                store(self._bridge.offsets_holder(group_id, self.now_ms))
                return True
            err = refused[0]
        callback(dict.fromkeys(offsets, err))
        return True

    def on_transaction_completed(
        self, producer_id: int, offsets_partitions: Iterable[int], is_commit: bool
    ) -> None:
        """WriteTxnMarkers wrote the producer's marker to these `__consumer_offsets`
        partitions: materialize (commit) or drop (abort) its pending offsets there."""
        self._manager.handle_txn_completion(producer_id, offsets_partitions, is_commit)

    def _validate_offset_commit(
        self, group: GroupMetadata, committer: OffsetCommitter, *, transactional: bool = False
    ) -> ErrorCode | None:
        if group.is_(_D):
            return ErrorCode.coordinator_not_available
        if not transactional and committer.generation_id < 0 and group.is_(_E):
            # Admin client or a consumer without group management: fine while the group is empty.
            return None
        if committer.managed:
            return self._validate_member_generation(
                group,
                committer.member_id,
                committer.group_instance_id,
                committer.generation_id,
                "txn-offset-commit" if transactional else "offset-commit",
            )
        if transactional or group.is_(_E):
            return None  # a producer outside the group's management commits whatever the state
        return ErrorCode.unknown_member_id  # only members commit while the group has members

    # --- OffsetFetch ----------------------------------------------------------------------------
    def handle_fetch_offsets(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Sequence[TopicPartition] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetFetchPartition]]:
        """Committed offsets (all of the group's when `partitions` is None); a KIP-848
        member (OffsetFetch v9+) gives its member id and epoch."""
        err = self._validate_group_status(group_id, Api.OFFSET_FETCH)
        if err is not None:
            return err, {}
        consumer_group = self._consumer.get(group_id)
        if consumer_group is not None:
            err = self._consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)
            if err is not None:
                return err, {}
        return ErrorCode.none, self._manager.get_offsets(group_id, require_stable, partitions)

    def after_offset_writes(self, group_id: str, then: Callable[[], None]) -> None:
        """`then` once the group's commits being written are answered (`require_stable`)."""
        self._manager.after_offset_writes(group_id, then)

    # --- DescribeGroups / ListGroups ----------------------------------------------------------
    def handle_describe_group(
        self, group_id: str, api_version: int = 0, now_ms: int | None = None
    ) -> tuple[ErrorCode, str | None, GroupSummary]:
        self.catch_up(now_ms)
        err = self._validate_group_status(group_id, Api.DESCRIBE_GROUPS)
        if err is not None:
            return err, None, NO_GROUP
        group = self._manager.get_group(group_id)
        if self._consumer.get(group_id) is not None:
            # Kafka 4: DescribeGroups describes classic groups only.
            if api_version >= 6:
                message = f"Group {group_id} is not a classic group."
                return ErrorCode.group_id_not_found, message, DEAD_GROUP
            return ErrorCode.none, None, DEAD_GROUP
        if group is None:
            if api_version >= 6:
                return ErrorCode.group_id_not_found, f"Group {group_id} not found.", DEAD_GROUP
            return ErrorCode.none, None, DEAD_GROUP
        return ErrorCode.none, None, group.summary()

    def handle_list_groups(
        self, states: Collection[str] = (), types: Collection[str] = (), now_ms: int | None = None
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        self.catch_up(now_ms)
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        err = ErrorCode.coordinator_load_in_progress if self._manager.is_loading else ErrorCode.none
        wanted = {s.lower() for s in states}
        kinds = {t.lower() for t in types}
        groups: list[GroupOverview] = []
        if not kinds or "classic" in kinds:
            groups = [
                g.overview()
                for g in self._manager.current_groups()
                if (not wanted or str(g.state).lower() in wanted)
                and self._consumer.get(g.group_id) is None
            ]
        if not kinds or "consumer" in kinds:
            groups += [
                GroupOverview(g.group_id, "consumer", g.state, "consumer")
                for g in self._consumer.groups()
                if not wanted or g.state.lower() in wanted
            ]
        return err, groups

    def group(self, group_id: str) -> GroupMetadata | None:
        """The group's metadata, if this coordinator has it (for tools and tests)."""
        return self._manager.get_group(group_id)

    def local_groups(self) -> list[GroupMetadata]:
        """The groups this coordinator holds now (for monitoring: their committed offsets)."""
        return self._manager.current_groups() if self._active else []

    # --- DeleteGroups / OffsetDelete / retention -------------------------------------------
    def handle_delete_groups(self, group_ids: Iterable[str], now_ms: int) -> dict[str, ErrorCode]:
        self.catch_up(now_ms)
        errors: dict[str, ErrorCode] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            err = self._validate_group_status(group_id, Api.DELETE_GROUPS)
            if err is not None:
                errors[group_id] = err
                continue
            group = self._manager.get_group(group_id)
            if self._consumer.get(group_id) is not None:
                err = self._consumer.delete(group_id)
                if err != ErrorCode.none:
                    errors[group_id] = err
                    continue
                if group is None or not group.is_(_E):
                    errors[group_id] = ErrorCode.none
                    continue
            if group is None or group.is_(_D):
                errors[group_id] = ErrorCode.group_id_not_found
            elif group.is_(_E):
                group.transition_to(_D, self.now_ms)
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.non_empty_group
        if eligible:
            removed = self._manager.cleanup_group_metadata(
                eligible, lambda g: g.remove_all_offsets(), self.now_ms
            )
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
        err = self._group_status(group_id, Api.OFFSET_DELETE, now_ms)
        if err is not None:
            return err, {}
        group = self._manager.get_group(group_id)
        if group is None or group.is_(_D):
            return ErrorCode.group_id_not_found, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        consumer_group = self._consumer.get(group_id)
        if consumer_group is not None and consumer_group.members:
            # A KIP-848 group keeps the offsets of the topics it subscribes to.
            subscribed = consumer_group.subscribed_topics
            for tp in partitions:
                if tp.topic in subscribed:
                    errors[tp] = ErrorCode.group_subscribed_to_topic
            partitions = [tp for tp in partitions if tp not in errors]
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
            removed = self._manager.cleanup_group_metadata(
                [group], lambda g: g.remove_offsets(eligible), self.now_ms
            )
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
        self._rebalancer.tick(now_ms)
        active = {g.group_id for g in self._consumer.groups() if g.members}
        return self._manager.cleanup_expired_offsets(self.now_ms, active)

    def handle_deleted_partitions(self, partitions: Sequence[TopicPartition], now_ms: int) -> int:
        """Forget offsets of deleted topic partitions."""
        self._rebalancer.tick(now_ms)
        return self._manager.remove_partition_offsets(partitions, self.now_ms)

    # --- KIP-848 consumer groups (consumer_bridge.py) --------------------------------------
    @property
    def consumer_groups(self) -> ConsumerGroupManager:
        return self._consumer

    def handle_consumer_group_heartbeat(
        self,
        req: HeartbeatRequest,
        topics: TopicsImage,
        callback: HeartbeatCallback,
        now_ms: int,
    ) -> None:
        status = self._group_status(req.group_id, Api.CONSUMER_GROUP_HEARTBEAT, now_ms)
        self._bridge.heartbeat(req, topics, callback, now_ms, status)

    def handle_consumer_group_describe(
        self, group_id: str, now_ms: int | None = None
    ) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        self.catch_up(now_ms)
        status = self._validate_group_status(group_id, Api.CONSUMER_GROUP_DESCRIBE)
        return self._bridge.describe(group_id, status)
