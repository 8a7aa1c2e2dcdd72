"""Members using the classic protocol inside a KIP-848 consumer group (Kafka 4's
classicGroupJoinToConsumerGroup and its SyncGroup, Heartbeat and LeaveGroup siblings).

A classic consumer (JoinGroup with protocol type "consumer") joining a consumer group with
members becomes one of its members: its subscription is read from the embedded consumer
protocol of its first protocol, the server-side assignor gives it its share of the target
assignment, and the JoinGroup answer carries its member epoch as the generation, no leader
and no member list, so the client sends an empty SyncGroup, whose answer is the member's
assigned partitions in the consumer protocol. The member reconciles by rejoining: its
Heartbeat answers REBALANCE_IN_PROGRESS when the group epoch moved past its member epoch,
when it must revoke partitions, or when partitions it waits for are free; the rejoin's owned
partitions (none for an eager assignor) complete the revocation. A member that does not
rejoin within its rebalance timeout once asked to, or does not sync within it once joined,
is fenced, as is one whose (classic) session expires.

Pure: time passed in, writes through the consumer-group manager.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.group import consumer_protocol as cp
from wherry.group.consumer_coordinator import ConsumerGroupManager, TopicsImage
from wherry.group.consumer_group import ConsumerGroup, ConsumerMember
from wherry.group.consumer_group_records import ClassicMemberMetadata
from wherry.group.member import JoinCallback, JoinGroupResult, SyncCallback, SyncGroupResult
from wherry.group.reconciliation import MemberState, reconcile

log = logging.getLogger(__name__)

__all__ = ["ClassicJoin", "ClassicMembers"]


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup request, as a consumer group needs it."""

    member_id: str
    instance_id: str | None
    require_known_member_id: bool
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]


def _fail_join(member_id: str, error: ErrorCode) -> JoinGroupResult:
    return JoinGroupResult.failed(member_id, error)


class ClassicMembers:
    def __init__(self, consumer: ConsumerGroupManager, *, log_prefix: str) -> None:
        self._consumer = consumer
        self._prefix = log_prefix

    # --- JoinGroup -------------------------------------------------------------------------
    def join(
        self,
        group: ConsumerGroup,
        req: ClassicJoin,
        topics: TopicsImage,
        now_ms: int,
        callback: JoinCallback,
    ) -> None:
        member_id = req.member_id or str(uuid.uuid4())
        existing = group.members.get(member_id)
        if existing is None and len(group.members) >= self._consumer.config.max_size:
            callback(_fail_join(member_id, ErrorCode.group_max_size_reached))
            return
        names = [name for name, _ in req.protocols]
        if not group.classic_protocols_supported(req.protocol_type, names):
            callback(_fail_join(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if not req.member_id and req.require_known_member_id:
            log.info(
                "%s Dynamic member with unknown member id joins consumer group %s; created "
                "member id %s and asked it to rejoin with it",
                self._prefix,
                group.group_id,
                member_id,
            )
            callback(_fail_join(member_id, ErrorCode.member_id_required))
            return
        try:
            subscription = cp.decode_subscription(bytes(req.protocols[0][1]))
        except ValueError:
            callback(_fail_join(member_id, ErrorCode.inconsistent_group_protocol))
            return
        member, bump = self._member_for(group, member_id, req)
        if member is None:
            callback(_fail_join(member_id, ErrorCode.fenced_instance_id))
            return
        bump = _update(member, req, subscription) or bump
        if bump:
            group.add_member(member)
        if self._consumer.update_subscriptions(group, topics):
            bump = True
        touched: list[str] | None = [member_id]
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._consumer.compute_target(group, topics)
            touched = None
        owned: dict[uuid.UUID, frozenset[int]] = {}
        for name, parts in subscription.owned.items():
            meta = topics.get(name)
            if meta is not None:
                owned[meta.topic_id] = parts
        after = reconcile(
            member.assignment,
            group.assignment_epoch,
            group.target.get(member_id, {}),
            owned,
            group.is_free_for(member_id),  # type: ignore[arg-type]
        )
        if after != member.assignment:
            group.set_assignment(member, after)
        member.join_deadline_ms = None
        member.revocation_deadline_ms = None
        member.session_deadline_ms = now_ms + req.session_timeout_ms
        member.sync_deadline_ms = now_ms + req.rebalance_timeout_ms
        result = JoinGroupResult(
            (),
            member_id,
            member.member_epoch,
            cp.CONSUMER_PROTOCOL_TYPE,
            req.protocols[0][0],
            "",
            False,
            ErrorCode.none,
        )

        def written(error: ErrorCode) -> None:
            callback(result if error == ErrorCode.none else _fail_join(member_id, error))

        self._consumer.write(group, written, touched)

    def _member_for(
        self, group: ConsumerGroup, member_id: str, req: ClassicJoin
    ) -> tuple[ConsumerMember | None, bool]:
        """The joining member and whether it is new (None: a fenced static instance)."""
        existing = group.members.get(member_id)
        if req.instance_id is not None:
            static = group.static_member(req.instance_id)
            if static is not None and static.member_id != member_id:
                if req.member_id:
                    return None, False
                # The static member came back under a new member id: the old one goes.
                group.remove_member(static.member_id)
                group.group_epoch += 1
        if existing is not None:
            return existing, False
        return ConsumerMember(member_id, instance_id=req.instance_id), True

    # --- SyncGroup, Heartbeat --------------------------------------------------------------
    def _validate(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[ConsumerMember | None, ErrorCode]:
        if instance_id is not None:
            member = group.static_member(instance_id)
            if member is not None and member.member_id != member_id:
                return None, ErrorCode.fenced_instance_id
        else:
            member = group.members.get(member_id)
        if member is None or member.classic is None:
            return None, ErrorCode.unknown_member_id
        if generation != member.member_epoch:
            return None, ErrorCode.illegal_generation
        return member, ErrorCode.none

    def sync(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol: tuple[str | None, str | None],
        now_ms: int,
        callback: SyncCallback,
    ) -> None:
        member, error = self._validate(group, member_id, instance_id, generation)
        if member is None or member.classic is None:
            callback(SyncGroupResult.failed(error))
            return
        protocol_type, protocol_name = protocol
        name, metadata = (member.classic.supported_protocols or (("", b""),))[0]
        if (protocol_type is not None and protocol_type != cp.CONSUMER_PROTOCOL_TYPE) or (
            protocol_name is not None and protocol_name != name
        ):
            callback(SyncGroupResult.failed(ErrorCode.inconsistent_group_protocol))
            return
        if (
            group.group_epoch > member.member_epoch
            and member.state != MemberState.UNREVOKED_PARTITIONS
        ):
            self._ask_to_rejoin(member, now_ms)
            callback(SyncGroupResult.failed(ErrorCode.rebalance_in_progress))
            return
        member.sync_deadline_ms = None
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        by_name = _topic_names(group)
        assigned = {by_name[t]: ps for t, ps in member.assigned.items() if t in by_name}
        try:
            version = cp.protocol_version(metadata)
        except ValueError:
            version = 0
        callback(
            SyncGroupResult(
                cp.CONSUMER_PROTOCOL_TYPE,
                name,
                cp.encode_assignment(assigned, version),
                ErrorCode.none,
            )
        )

    def heartbeat(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        generation: int,
        now_ms: int,
    ) -> ErrorCode:
        member, error = self._validate(group, member_id, instance_id, generation)
        if member is None or member.classic is None:
            return error
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        if (
            member.member_epoch < group.group_epoch
            or member.state == MemberState.UNREVOKED_PARTITIONS
            or (
                member.state == MemberState.UNRELEASED_PARTITIONS
                and not group.waiting_on_unreleased_partition(member)
            )
        ):
            self._ask_to_rejoin(member, now_ms)
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    @staticmethod
    def _ask_to_rejoin(member: ConsumerMember, now_ms: int) -> None:
        if member.join_deadline_ms is None:
            member.join_deadline_ms = now_ms + member.rebalance_timeout_ms

    # --- LeaveGroup ------------------------------------------------------------------------
    def leave(
        self,
        group: ConsumerGroup,
        members: Sequence[tuple[str, str | None, str | None]],
        topics: TopicsImage | None,
    ) -> list[tuple[str, str | None, ErrorCode]]:
        """LeaveGroup of (member id, instance id, reason) each: the answer per member."""
        out: list[tuple[str, str | None, ErrorCode]] = []
        left: list[str] = []
        for member_id, instance_id, reason in members:
            if instance_id is None:
                member = group.members.get(member_id)
            else:
                member = group.static_member(instance_id)
                if member is not None and member_id and member.member_id != member_id:
                    out.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
            if member is None or member.classic is None:
                out.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            log.info(
                "%s Member %s has left consumer group %s through explicit `LeaveGroup` request; "
                "client reason: %s",
                self._prefix,
                member.member_id,
                group.group_id,
                reason or "not provided",
            )
            group.remove_member(member.member_id)
            left.append(member.member_id)
            out.append((member.member_id, instance_id, ErrorCode.none))
        if left:
            if topics is not None:
                self._consumer.update_subscriptions(group, topics)
            group.group_epoch += 1
            self._consumer.write(group, _ignore, left)
        return out


def _ignore(_error: ErrorCode) -> None:
    pass


def _topic_names(group: ConsumerGroup) -> dict[uuid.UUID, str]:
    return {t.topic_id: t.name for t in group.subscribed_topics.values()}


def _update(member: ConsumerMember, req: ClassicJoin, subscription: cp.Subscription) -> bool:
    """Apply the JoinGroup's fields to the member; True if its subscription changed."""
    if req.instance_id is not None:
        member.instance_id = req.instance_id
    if subscription.rack_id is not None:
        member.rack_id = subscription.rack_id
    if req.rebalance_timeout_ms > 0:
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.client_id = req.client_id
    member.client_host = req.client_host
    member.server_assignor = None
    member.classic = ClassicMemberMetadata(
        req.session_timeout_ms, tuple((n, bytes(m)) for n, m in req.protocols)
    )
    names = tuple(sorted(set(subscription.topics)))
    if names != member.subscribed_topic_names:
        member.subscribed_topic_names = names
        return True
    return False
