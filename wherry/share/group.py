"""Share-group membership (KIP-932's share groups in the group coordinator), pure.

Members heartbeat (ShareGroupHeartbeat) with an id they chose and their epoch: 0 to join, -1
to leave. The coordinator keeps one target assignment per group epoch, computed by the
simple assignor: every subscribed partition goes to at least one member, and when there are
more members than partitions several members share a partition (records of a partition are
then spread across them by the share-partition leader, one record to one member at a time).
Share groups need no revocation step: a member takes its new assignment, and the group's
epoch, on its next heartbeat. A member silent for the session timeout is removed.

The group is written to `__consumer_offsets` as Kafka 4.1 writes share groups
(group/share_group_records.py): `records()` is the group's whole record set, the caller
appends what changed since `persisted`, and `ShareGroups.load` rebuilds the groups from a
replay after a coordinator failover, members keeping their ids and epochs.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from wherry.group import consumer_group_records as cgr
from wherry.group import share_group_records as sgr

__all__ = [
    "Assignment",
    "HeartbeatResult",
    "ShareGroup",
    "ShareGroups",
    "ShareMember",
    "TopicInfo",
    "simple_assign",
    "topics_hash",
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
    previous_epoch: int = -1


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed_topics: dict[str, TopicInfo] = field(default_factory=dict)
    metadata_hash: int = 0  # of the subscribed topics (Kafka's MetadataHash)
    # topic id -> (name, partitions) whose share-partition state may exist (ever assigned)
    state_topics: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    # what `__consumer_offsets` holds of the group (key -> value), as last written
    persisted: dict[bytes, bytes] = field(default_factory=dict)
    _in_doubt: set[bytes] = field(default_factory=set)

    @property
    def state(self) -> str:
        """Kafka's ShareGroup states: Empty or Stable (share groups never rebalance)."""
        return "Stable" if self.members else "Empty"

    def records(self) -> dict[bytes, bytes]:
        """The group's whole record set in `__consumer_offsets` (types 10-15)."""
        g = self.group_id
        out = {
            sgr.group_metadata_key(g): sgr.encode_group_metadata(
                self.group_epoch, self.metadata_hash
            ),
            sgr.target_metadata_key(g): cgr.encode_epoch_value(self.assignment_epoch),
        }
        if self.state_topics:
            out[sgr.state_metadata_key(g)] = sgr.encode_state_metadata(
                sgr.StateTopic(tid, name, parts) for tid, (name, parts) in self.state_topics.items()
            )
        for mid, m in self.members.items():
            out[sgr.member_metadata_key(g, mid)] = sgr.encode_member_metadata(
                sgr.ShareMemberValue(m.rack_id, m.client_id, m.client_host, m.subscribed)
            )
            out[sgr.target_member_key(g, mid)] = cgr.encode_target_member(self.target.get(mid, {}))
            out[sgr.current_assignment_key(g, mid)] = sgr.encode_current_assignment(
                sgr.ShareCurrentAssignment(m.member_epoch, m.previous_epoch, 0, m.assignment)
            )
        return out

    def changes(self) -> list[tuple[bytes, bytes | None]]:
        """The records to append so that the log holds `records()` (and mark them written:
        `unwritten` undoes that when the append fails)."""
        new = self.records()
        out = cgr.record_diff(self.persisted, new, sgr.tombstone_order, sgr.upsert_order)
        self._in_doubt = set(self.persisted) | set(new)  # what a failed append leaves unknown
        self.persisted = new
        return out

    def deletion(self) -> list[tuple[bytes, bytes | None]]:
        """Tombstones of every record the group has in the log (DeleteGroups)."""
        keys = set(self.persisted) | set(self.records())
        keys.add(sgr.partition_metadata_key(self.group_id))
        out = cgr.record_diff(
            dict.fromkeys(keys, b""), {}, sgr.tombstone_order, sgr.upsert_order
        )
        self.persisted = {}
        return out

    def unwritten(self) -> None:
        """An append failed: what the log holds is unknown, every record is written again."""
        self.persisted = dict.fromkeys(set(self.persisted) | self._in_doubt, b"")


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error_code: ErrorCode
    member_epoch: int = -1
    assignment: Assignment | None = None
    error_message: str | None = None


def topics_hash(topics: Mapping[str, TopicInfo]) -> int:
    """A stable 64-bit hash of the subscribed topics' metadata (names, ids, partition
    counts): the group's epoch moves when it changes (Kafka's MetadataHash, ours)."""
    if not topics:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(topics):
        t = topics[name]
        h.update(f"{name}\0{t.topic_id}\0{t.partitions}\0".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


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
            # Kafka's rule: the member's epoch, or the one it had before its last bump (the
            # answer that carried the bump was lost, or its write failed)
            if member_epoch not in (member.member_epoch, member.previous_epoch):
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
        group.subscribed_topics = known
        h = topics_hash(known)
        if h != group.metadata_hash:
            group.metadata_hash = h
            self._bump(group)
        if group.assignment_epoch != group.group_epoch:
            group.target = simple_assign(list(group.members.values()), known)
            group.assignment_epoch = group.group_epoch
            names = {t.topic_id: n for n, t in known.items()}
            for a in group.target.values():
                for tid, parts in a.items():
                    name, had = group.state_topics.get(tid, (names.get(tid, ""), frozenset()))
                    if not parts <= had:
                        group.state_topics[tid] = (name, had | parts)
        send: Assignment | None = None
        target = group.target.get(member_id, {})
        if member.member_epoch != group.assignment_epoch or member_epoch != member.member_epoch:
            if member.member_epoch != group.assignment_epoch:
                # the epoch it sent: what it holds until an answer reaches it
                member.previous_epoch = member_epoch if member_epoch > 0 else member.member_epoch
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

    def load(
        self,
        replayed: Mapping[str, sgr.ReplayedShareGroup],
        in_partition: Callable[[str], bool],
        now_ms: int,
        session_timeout_ms: int,
    ) -> int:
        """Rebuild the groups of one loaded offsets partition (`in_partition` says which
        groups it holds) from their records; members get a full session from `now_ms`."""
        for g in [g for g in self.groups if in_partition(g)]:
            del self.groups[g]
        n = 0
        for gid, r in replayed.items():
            if r.group_epoch is None or not in_partition(gid):
                continue
            group = ShareGroup(gid, r.group_epoch, r.assignment_epoch or 0)
            group.metadata_hash = r.metadata_hash
            for mid, mv in r.members.items():
                cur = r.current.get(mid)
                group.members[mid] = ShareMember(
                    mid,
                    cur.member_epoch if cur is not None else 0,
                    mv.subscribed_topic_names,
                    mv.rack_id,
                    mv.client_id,
                    mv.client_host,
                    now_ms + session_timeout_ms,
                    dict(cur.assigned) if cur is not None else {},
                    cur.previous_member_epoch if cur is not None else -1,
                )
            group.target = {m: dict(a) for m, a in r.targets.items() if m in group.members}
            group.state_topics = {t.topic_id: (t.name, t.partitions) for t in r.state_topics}
            group.persisted = group.records()
            self.groups[gid] = group
            n += 1
        return n

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
