"""The rebalance machinery of the group coordinator (the timed half of Kafka's GroupCoordinator).

`Rebalancer` owns the coordinator's two purgatories and the clock they run on. It moves
groups through their rebalance states (PreparingRebalance → CompletingRebalance → Stable),
completes the delayed operations (`RebalanceCallbacks` of `delayed.py`): a join that every
member has rejoined, pending SyncGroups, member sessions, and removes members whose session
or sync timed out. Group metadata goes to storage through the `GroupMetadataManager`.

The coordinator's request handling (`coordinator.py`, `join.py`) calls into it; it never
calls back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

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
from wherry.group.group import GroupMetadata
from wherry.group.member import (
    UNKNOWN_MEMBER_ID,
    JoinGroupResult,
    JoinMember,
    MemberMetadata,
    SyncGroupResult,
)
from wherry.group.metadata_manager import GroupMetadataManager
from wherry.group.records import OFFSETS_TOPIC
from wherry.group.state import GroupState
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.purgatory.timing_wheel import Timer

log = logging.getLogger(__name__)

__all__ = ["Rebalancer", "current_join_result", "generation_join_result"]

_E = GroupState.EMPTY
_P = GroupState.PREPARING_REBALANCE
_C = GroupState.COMPLETING_REBALANCE
_S = GroupState.STABLE
_D = GroupState.DEAD


def generation_join_result(
    group: GroupMetadata,
    member_id: str,
    members: tuple[JoinMember, ...],
    leader_id: str,
    *,
    skip_assignment: bool = False,
    error: ErrorCode = ErrorCode.none,
) -> JoinGroupResult:
    """A JoinGroup answer in the group's current generation and protocol."""
    return JoinGroupResult(
        members,
        member_id,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        leader_id,
        skip_assignment,
        error,
    )


def current_join_result(
    group: GroupMetadata, member_id: str, *, with_members: bool
) -> JoinGroupResult:
    """The JoinGroup answer for the group's current generation (members only for the leader)."""
    members = group.current_member_metadata() if with_members and group.is_leader(member_id) else ()
    return generation_join_result(group, member_id, members, group.leader_or_empty)


class Rebalancer:
    """Implements `RebalanceCallbacks` for the delayed operations it parks."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        *,
        now_ms: int,
        log_prefix: str,
    ) -> None:
        self.config = config
        self.manager = manager
        self._now_ms = now_ms
        self.rebalance_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory(
            "Rebalance", Timer(start_ms=now_ms)
        )
        self.heartbeat_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory(
            "Heartbeat", Timer(start_ms=now_ms)
        )
        self._prefix = log_prefix

    # --- time -----------------------------------------------------------------------------------
    @property
    def now_ms(self) -> int:
        """The latest time this coordinator was told about."""
        return self._now_ms

    def tick(self, now_ms: int) -> None:
        if now_ms > self._now_ms:
            self._now_ms = now_ms

    def advance_clock(self, now_ms: int) -> None:
        """Expire due rebalances and sessions."""
        self.tick(now_ms)
        self.rebalance_purgatory.advance_clock(self._now_ms)
        self.heartbeat_purgatory.advance_clock(self._now_ms)

    def next_expiration_ms(self) -> int | None:
        nexts = [
            n
            for p in (self.rebalance_purgatory, self.heartbeat_purgatory)
            if (n := p.next_expiration_ms()) is not None
        ]
        return min(nexts) if nexts else None

    def shutdown(self) -> None:
        self.heartbeat_purgatory.shutdown()
        self.rebalance_purgatory.shutdown()

    # --- members --------------------------------------------------------------------------------
    def validate_current_member(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, op: str
    ) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID unless the request comes from a member."""
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

    # --- groups loaded from and unloaded to the log ---------------------------------------------
    def on_group_loaded(self, group: GroupMetadata) -> None:
        log.info(
            "%s Loading group metadata for %s with generation %d",
            self._prefix,
            group.group_id,
            group.generation_id,
        )
        if group.size > self.config.group_max_size:
            self.prepare_rebalance(
                group,
                f"Freshly-loaded group is over capacity ({self.config.group_max_size}). "
                "Rebalancing in order to give a chance for consumers to commit offsets",
            )
        for m in group.all_member_metadata():
            self.complete_and_schedule_next_heartbeat_expiration(group, m)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
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
            self.check_join(group)
        elif previous in (_S, _C):
            for m in group.all_member_metadata():
                group.maybe_invoke_sync_callback(
                    m, SyncGroupResult.failed(ErrorCode.not_coordinator)
                )
                self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, m.member_id))
        self._remove_sync_expiration(group)

    def retire(self, group: GroupMetadata) -> None:
        """The group is gone (converted to a consumer group): Dead, its pending join, sync
        and heartbeat timers completed without effect."""
        members = group.all_members()
        group.transition_to(_D, self._now_ms)
        self.check_join(group)
        self._remove_sync_expiration(group)
        for member_id in members:
            self.remove_heartbeat_for_leaving_member(group, member_id)

    # --- preparing a rebalance ------------------------------------------------------------------
    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        # Members waiting in SyncGroup must rejoin.
        if group.is_(_C):
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
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
            self.manager.partition_for(group.group_id),
            reason,
        )
        self.watch_join(delayed)

    def watch_join(self, op: DelayedJoin) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            op, [join_key(op.group.group_id)], now_ms=self._now_ms
        )

    def check_join(self, group: GroupMetadata) -> None:
        """Re-check the group's pending join (after members joined or left)."""
        self.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def remove_member_and_update_group(
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
                self.maybe_prepare_rebalance(group, reason)
            case GroupState.PREPARING_REBALANCE:
                self.check_join(group)
            case _:
                pass

    def remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(_P):
            self.check_join(group)

    # --- DelayedJoin callbacks ------------------------------------------------------------------
    def try_complete_join(self, op: DelayedJoin) -> bool:
        return op.force_complete() if op.group.has_all_members_joined else False

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
                self.remove_heartbeat_for_leaving_member(group, m.member_id)
        if group.is_(_D):
            log.info("%s Group %s is dead, skipping rebalance stage", self._prefix, group.group_id)
        elif not group.maybe_elect_new_joined_leader() and group.size:
            # Nobody rejoined: wait again until sessions remove the silent members.
            log.error(
                "%s Group %s could not complete rebalance because no members rejoined",
                self._prefix,
                group.group_id,
            )
            self.watch_join(DelayedJoin(self, group, group.rebalance_timeout_ms))
        else:
            group.init_next_generation(self._now_ms)
            if group.is_(_E):
                log.info(
                    "%s Group %s with generation %d is now empty (%s-%d)",
                    self._prefix,
                    group.group_id,
                    group.generation_id,
                    OFFSETS_TOPIC,
                    self.manager.partition_for(group.group_id),
                )

                def stored(error: ErrorCode) -> None:
                    if error != ErrorCode.none:
                        log.warning(
                            "%s Failed to write empty metadata for group %s: %s",
                            self._prefix,
                            group.group_id,
                            error.name,
                        )

                self.manager.store_group(group, {}, stored)
            else:
                log.info(
                    "%s Stabilized group %s generation %d (%s-%d) with %d members",
                    self._prefix,
                    group.group_id,
                    group.generation_id,
                    OFFSETS_TOPIC,
                    self.manager.partition_for(group.group_id),
                    group.size,
                )
                for m in group.all_member_metadata():
                    result = current_join_result(group, m.member_id, with_members=True)
                    group.maybe_invoke_join_callback(m, result)
                    self.complete_and_schedule_next_heartbeat_expiration(group, m)
                    m.is_new = False
                    group.add_pending_sync_member(m.member_id)
                self._schedule_pending_sync(group)

    def on_leader_assignment(
        self,
        group: GroupMetadata,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
    ) -> None:
        """The leader's SyncGroup: store the assignment, then hand every member its share."""
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
                    self.reset_and_propagate_assignment_error(group, error)
                    self.maybe_prepare_rebalance(
                        group,
                        f"Error {error.name} when storing group assignment during SyncGroup "
                        f"(member: {member_id})",
                    )
                else:
                    self.set_and_propagate_assignment(group, assignment)
                    group.transition_to(_S, self._now_ms)

        self.manager.store_group(group, assignment, stored)

    # --- pending SyncGroups (DelayedSync) -------------------------------------------------------
    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [sync_key(group.group_id)],
            now_ms=self._now_ms,
        )

    def remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.clear_pending_sync_members()
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def try_complete_pending_sync(self, op: DelayedSync) -> bool:
        group = op.group
        if op.generation_id != group.generation_id or group.state in (_D, _E, _P):
            return op.force_complete()
        if group.has_received_sync_from_all_members:
            return op.force_complete()
        return False

    def on_expire_pending_sync(self, op: DelayedSync) -> None:
        group, generation_id = op.group, op.generation_id
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
                self.remove_heartbeat_for_leaving_member(group, member_id)
            log.info(
                "%s Group %s removed members who haven't sent their sync request: %s",
                self._prefix,
                group.group_id,
                sorted(pending),
            )
            self.prepare_rebalance(
                group, f"Removing {sorted(pending)} on pending sync request expiration"
            )

    # --- sessions (DelayedHeartbeat) ------------------------------------------------------------
    def complete_and_schedule_next_heartbeat_expiration(
        self, group: GroupMetadata, member: MemberMetadata
    ) -> None:
        self.complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def complete_and_schedule_next_expiration(
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

    def add_pending_member_expiration(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms),
            [member_key(group.group_id, member_id)],
            now_ms=self._now_ms,
        )

    def remove_heartbeat_for_leaving_member(self, group: GroupMetadata, member_id: str) -> None:
        self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))

    def try_complete_heartbeat(self, op: DelayedHeartbeat) -> bool:
        group, member_id = op.group, op.member_id
        if group.is_(_D):
            return op.force_complete()
        if op.is_pending:
            return op.force_complete() if group.has(member_id) else False
        if not group.has(member_id) or group.get(member_id).has_satisfied_heartbeat:
            return op.force_complete()
        return False

    def on_expire_heartbeat(self, op: DelayedHeartbeat) -> None:
        group, member_id = op.group, op.member_id
        if group.is_(_D):
            log.info(
                "%s Received notification of heartbeat expiration for member %s after group %s "
                "had already been unloaded or deleted.",
                self._prefix,
                member_id,
                group.group_id,
            )
        elif op.is_pending:
            if group.is_pending_member(member_id):
                log.info(
                    "%s Pending member %s in group %s has been removed after session timeout "
                    "expiration.",
                    self._prefix,
                    member_id,
                    group.group_id,
                )
                self.remove_pending_member_and_update_group(group, member_id)
        elif group.has(member_id):
            member = group.get(member_id)
            if not member.has_satisfied_heartbeat:
                log.info(
                    "%s Member %s in group %s has failed, removing it from the group",
                    self._prefix,
                    member_id,
                    group.group_id,
                )
                self.remove_member_and_update_group(
                    group, member, f"removing member {member_id} on heartbeat expiration"
                )

    # --- assignments ----------------------------------------------------------------------------
    def set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: Mapping[str, bytes]
    ) -> None:
        for m in group.all_member_metadata():
            m.assignment = assignment.get(m.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)

    def reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
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
                self.complete_and_schedule_next_heartbeat_expiration(group, m)
