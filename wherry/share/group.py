"""Share-group membership (KIP-932's share groups in the group coordinator), pure.

Members heartbeat (ShareGroupHeartbeat) with an id they chose and their epoch: 0 to join, -1
to leave. The coordinator keeps one target assignment per group epoch, computed by the
simple assignor: every subscribed partition goes to at least one member, and when there are
more members than partitions several members share a partition (records of a partition are
then spread across them by the share-partition leader, one record to one member at a time).
Share groups need no revocation step: a member takes its new assignment, and the group's
epoch, on its next heartbeat. A member silent for the session timeout is removed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = [
    "Assignment",
    "HeartbeatResult",
    "ShareGroup",
    "ShareGroups",
    "ShareMember",
    "TopicInfo",
    "simple_assign",
]

LEAVE_EPOCH = -1
JOIN_EPOCH = 0

Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    partitions: int


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    assignment: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed_topics: dict[str, TopicInfo] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ShareGroup states: Empty or Stable (share groups never rebalance)."""
        return "Stable" if self.members else "Empty"


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error_code: ErrorCode
    member_epoch: int = -1
    assignment: Assignment | None = None
    error_message: str | None = None


def simple_assign(
    members: Sequence[ShareMember], topics: Mapping[str, TopicInfo]
) -> dict[str, Assignment]:
    """Kafka's SimpleAssignor in spirit: per topic, its partitions round-robin over the
    subscribed members (sorted by id, so the answer depends on the inputs only); members left
    without a partition share one, round-robin, so that every member consumes."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    for name in sorted(topics):
        info = topics[name]
        subs = sorted(m.member_id for m in members if name in m.subscribed)
        if not subs or info.partitions <= 0:
            continue
        n = max(info.partitions, len(subs))
        for i in range(n):
            member = subs[i % len(subs)]
            out[member].setdefault(info.topic_id, set()).add(i % info.partitions)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


class ShareGroups:
    """Every share group this coordinator holds."""

    def __init__(self) -> None:
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed: Sequence[str] | None,
        rack_id: str | None,
        topics: Mapping[str, TopicInfo],
        now_ms: int,
        *,
        session_timeout_ms: int,
        client_id: str = "",
        client_host: str = "",
        max_size: int = 200,
    ) -> HeartbeatResult:
        if not member_id:
            return HeartbeatResult(
                ErrorCode.invalid_request, error_message="MemberId can't be empty."
            )
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                del group.members[member_id]
                self._bump(group)
                if not group.members:
                    group.target = {}
            return HeartbeatResult(ErrorCode.none, LEAVE_EPOCH)
        member = group.members.get(member_id) if group is not None else None
        if member_epoch == JOIN_EPOCH:
            if (subscribed is None or not subscribed) and member is None:
                return HeartbeatResult(
                    ErrorCode.invalid_request,
                    error_message="SubscribedTopicNames must be set in first request.",
                )
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            if member is None and len(group.members) >= max_size:
                return HeartbeatResult(
                    ErrorCode.group_max_size_reached,
                    error_message=f"The share group has reached its maximum capacity of "
                    f"{max_size} members.",
                )
            if member is None:
                member = ShareMember(
                    member_id, 0, tuple(subscribed or ()), rack_id, client_id, client_host, 0
                )
                group.members[member_id] = member
                self._bump(group)
        else:
            if member is None or group is None:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    error_message=f"Member {member_id} is not a member of group {group_id}.",
                )
            if member_epoch > member.member_epoch or member_epoch < member.member_epoch - 1:
                return HeartbeatResult(
                    ErrorCode.fenced_member_epoch,
                    error_message=f"The share group member has a smaller member epoch "
                    f"({member_epoch}) than the one known by the group coordinator "
                    f"({member.member_epoch}). The member must abandon all its partitions "
                    "and rejoin.",
                )
        if subscribed is not None and tuple(subscribed) != member.subscribed:
            member.subscribed = tuple(subscribed)
            self._bump(group)
        if rack_id is not None:
            member.rack_id = rack_id
        member.deadline_ms = now_ms + session_timeout_ms
        # The subscribed topics' metadata: a created, deleted or grown topic bumps the epoch.
        wanted = {t for m in group.members.values() for t in m.subscribed}
        known = {t: topics[t] for t in sorted(wanted) if t in topics}
        if known != group.subscribed_topics:
            group.subscribed_topics = known
            self._bump(group)
        if group.assignment_epoch != group.group_epoch:
            group.target = simple_assign(list(group.members.values()), known)
            group.assignment_epoch = group.group_epoch
        send: Assignment | None = None
        target = group.target.get(member_id, {})
        if member.member_epoch != group.assignment_epoch or member_epoch != member.member_epoch:
            member.member_epoch = group.assignment_epoch
            member.assignment = target
            send = target
        return HeartbeatResult(ErrorCode.none, member.member_epoch, send)

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove the members whose session timed out; (group, member) of each."""
        gone: list[tuple[str, str]] = []
        for group in self.groups.values():
            late = [m for m in group.members.values() if m.deadline_ms <= now_ms]
            for m in late:
                del group.members[m.member_id]
                gone.append((group.group_id, m.member_id))
            if late:
                self._bump(group)
        return gone

    def delete(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none

    @staticmethod
    def _bump(group: ShareGroup) -> None:
        group.group_epoch += 1
