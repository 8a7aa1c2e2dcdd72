"""JoinGroup in the classic group coordinator (Kafka's handleJoinGroup and its member paths).

A JoinGroup comes from a new member (unknown member id: dynamic, possibly first asked to
rejoin with an id under KIP-394, or static, possibly replacing the member of its
group.instance.id) or from a current member (rejoining, changing its protocols, or a leader
asking for a rebalance). Each path adds or updates the member and lets the `Rebalancer`
decide whether the group rebalances; the answer goes to the request's callback, now or when
the join completes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.group.group import GroupMetadata
from wherry.group.member import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
    JoinMember,
    MemberMetadata,
)
from wherry.group.rebalance import Rebalancer, current_join_result, generation_join_result
from wherry.group.state import GroupState

log = logging.getLogger(__name__)

__all__ = ["JoinGroupHandler", "JoinRequest"]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """What a JoinGroup says about the member, besides its group and member id."""

    group_instance_id: str | None
    require_known_member_id: bool
    support_skipping_assignment: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    callback: JoinCallback
    reason: str  # the client's reason, "not provided" if none


class JoinGroupHandler:
    def __init__(self, rebalancer: Rebalancer, *, log_prefix: str) -> None:
        self.config = rebalancer.config
        self._manager = rebalancer.manager
        self._rebalancer = rebalancer
        self._prefix = log_prefix

    def join(self, group_id: str, member_id: str, req: JoinRequest) -> None:
        """A JoinGroup for a group this coordinator serves (checked by the caller)."""
        cfg = self.config
        callback = req.callback
        if not (
            cfg.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            callback(JoinGroupResult.failed(member_id, ErrorCode.invalid_session_timeout))
            return
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self._manager.get_group(group_id)
        if group is None:
            if not is_unknown:
                callback(JoinGroupResult.failed(member_id, ErrorCode.unknown_member_id))
                return
            group = self._manager.add_group(
                GroupMetadata(group_id, GroupState.EMPTY, self._rebalancer.now_ms)
            )
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            callback(JoinGroupResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._do_new_member_join_group(group, req)
        else:
            self._do_current_member_join_group(group, member_id, req)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._rebalancer.check_join(group)

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

    @staticmethod
    def _reject_join(group: GroupMetadata, req: JoinRequest) -> ErrorCode | None:
        """Why a group cannot take this member's join now, if it cannot."""
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if not group.supports_protocols(req.protocol_type, {p for p, _ in req.protocols}):
            return ErrorCode.inconsistent_group_protocol
        return None

    def _do_new_member_join_group(self, group: GroupMetadata, req: JoinRequest) -> None:
        err = self._reject_join(group, req)
        if err is not None:
            req.callback(JoinGroupResult.failed(UNKNOWN_MEMBER_ID, err))
            return
        group_instance_id = req.group_instance_id
        new_member_id = group.generate_member_id(req.client_id, group_instance_id)
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
                    group, old_member_id, new_member_id, group_instance_id, req
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
                self._add_member_and_rebalance(group, new_member_id, req)
        elif req.require_known_member_id:
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
            self._rebalancer.add_pending_member_expiration(
                group, new_member_id, req.session_timeout_ms
            )
            req.callback(JoinGroupResult.failed(new_member_id, ErrorCode.member_id_required))
        else:
            log.info(
                "%s Dynamic Member with unknown member id joins group %s in %s state. Created a "
                "new member id %s for this member and add to the group.",
                self._prefix,
                group.group_id,
                group.state,
                new_member_id,
            )
            self._add_member_and_rebalance(group, new_member_id, req)

    def _do_current_member_join_group(
        self, group: GroupMetadata, member_id: str, req: JoinRequest
    ) -> None:
        callback = req.callback
        err = self._reject_join(group, req)
        if err is not None:
            callback(JoinGroupResult.failed(member_id, err))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                # A pending member is never static (Kafka raises IllegalStateException).
                log.error(
                    "%s Received unexpected JoinGroup with groupInstanceId=%s for pending member "
                    "with memberId=%s",
                    self._prefix,
                    req.group_instance_id,
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
            self._add_member_and_rebalance(group, member_id, req)
            return
        err = self._rebalancer.validate_current_member(
            group, member_id, req.group_instance_id, "join-group"
        )
        if err is not None:
            callback(JoinGroupResult.failed(member_id, err))
            return
        member = group.get(member_id)
        updating = f"Updating metadata for member {member_id} during {group.state}"
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                why = f"Member {member_id} joining group during {group.state}"
            case GroupState.COMPLETING_REBALANCE:
                if member.matches(req.protocols):
                    # The member lost the JoinGroup response; answer with the current generation.
                    callback(current_join_result(group, member_id, with_members=True))
                    return
                why = updating
            case GroupState.STABLE:
                if group.is_leader(member_id):
                    # The leader rejoins to trigger a rebalance (e.g. topic metadata changed).
                    why = f"Leader {member_id} re-joining group during {group.state}"
                elif not member.matches(req.protocols):
                    why = updating
                else:
                    callback(current_join_result(group, member_id, with_members=False))
                    return
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
                return
        group.update_member(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, callback
        )
        self._rebalancer.maybe_prepare_rebalance(group, f"{why}; client reason: {req.reason}")

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, req: JoinRequest
    ) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_id=group.group_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            supported_protocols=list(req.protocols),
        )
        member.is_new = True
        # A member joining the first rebalance can extend the initial delay.
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, req.callback)
        # New members cannot heartbeat yet and a disconnect goes unnoticed while the JoinGroup
        # is parked, so their JoinGroup times out instead (they retry if still alive).
        self._rebalancer.complete_and_schedule_next_expiration(
            group, member, self.config.new_member_join_timeout_ms
        )
        self._rebalancer.maybe_prepare_rebalance(
            group,
            f"Adding new member {member_id} with group instance id {req.group_instance_id}; "
            f"client reason: {req.reason}",
        )

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        req: JoinRequest,
    ) -> None:
        rebalancer = self._rebalancer
        callback = req.callback
        current_leader = group.leader_or_empty
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old member id's session expires harmlessly; watch the new id instead.
        rebalancer.complete_and_schedule_next_heartbeat_expiration(group, member)
        old_protocols = list(member.supported_protocols)
        old_rebalance_timeout_ms = member.rebalance_timeout_ms
        old_session_timeout_ms = member.session_timeout_ms
        group.update_member(
            member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, callback
        )
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

                    def result(
                        member_id: str, leader_id: str, is_leader: bool, error: ErrorCode
                    ) -> JoinGroupResult:
                        members: tuple[JoinMember, ...] = (
                            group.current_member_metadata() if is_leader else ()
                        )
                        return generation_join_result(
                            group,
                            member_id,
                            members,
                            leader_id,
                            skip_assignment=is_leader,
                            error=error,
                        )

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
                            rebalancer.complete_and_schedule_next_heartbeat_expiration(group, old)
                            callback(result(UNKNOWN_MEMBER_ID, current_leader, False, error))
                        elif req.support_skipping_assignment:
                            # JoinGroup v9+: tell the leader it leads but must not reassign.
                            is_leader = group.is_leader(new_member_id)
                            group.maybe_invoke_join_callback(
                                member,
                                result(
                                    new_member_id, group.leader_or_empty, is_leader, ErrorCode.none
                                ),
                            )
                        else:
                            # Older clients: return the old leader id so that a rejoining
                            # leader does not run a (useless) assignment in a stable group.
                            group.maybe_invoke_join_callback(
                                member,
                                result(new_member_id, current_leader, False, ErrorCode.none),
                            )

                    self._manager.store_group(group, assignment, stored)
                else:
                    rebalancer.maybe_prepare_rebalance(
                        group,
                        f"Group's selectedProtocol will change because static member "
                        f"{member.member_id} with instance id {group_instance_id} joined with "
                        f"change of protocol; client reason: {req.reason}",
                    )
            case GroupState.COMPLETING_REBALANCE:
                # The leader may already be assigning to the old member id: rebalance again.
                rebalancer.prepare_rebalance(
                    group,
                    f"Updating metadata for static member {member.member_id} with instance id "
                    f"{group_instance_id}; client reason: {req.reason}",
                )
            case GroupState.PREPARING_REBALANCE:
                pass
            case _:
                raise AssertionError(
                    f"Group {group.group_id} was not supposed to be in the state {group.state} "
                    f"when the unknown static member {group_instance_id} rejoins."
                )
