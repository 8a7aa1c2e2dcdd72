"""A KIP-848 consumer group and its members (Kafka's ConsumerGroup / ConsumerGroupMember).

The group holds its epoch (bumped whenever members or their subscriptions or the subscribed
topics' metadata change), the target assignment and its epoch, each member's current
assignment (reconciliation.py) and who owns each partition now, so that no partition is given
to a member while another still owns it. `records()` is the group as the `__consumer_offsets`
records that describe it (consumer_group_records.py); the coordinator writes the difference
from what it last wrote. Pure: no I/O, time passed in.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from wherry.group import consumer_group_records as cgr
from wherry.group.reconciliation import MemberAssignment, MemberState

__all__ = ["ConsumerGroup", "ConsumerMember", "TopicMeta"]

Parts = Mapping[uuid.UUID, frozenset[int]]

# Kafka's ConsumerGroup.ConsumerGroupState names
EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class TopicMeta:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = 300_000
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    pending_revocation: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    # a member using the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside the group
    classic: cgr.ClassicMemberMetadata | None = None
    # deadlines (wall clock ms); not persisted, reset when a group is loaded
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    # a classic member's: to rejoin once asked to, to sync once joined
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def deadlines(self) -> tuple[tuple[int | None, str], ...]:
        """The member's deadlines and why it is fenced when one passes."""
        return (
            (self.session_deadline_ms, "session timeout"),
            (self.revocation_deadline_ms, "rebalance timeout (partitions not revoked)"),
            (
                self.join_deadline_ms,
                "the classic member failed to join within the rebalance timeout",
            ),
            (self.sync_deadline_ms, "the member failed to sync within timeout"),
        )

    @property
    def assignment(self) -> MemberAssignment:
        return MemberAssignment(
            self.state,
            self.member_epoch,
            self.previous_member_epoch,
            dict(self.assigned),
            dict(self.pending_revocation),
        )

    def metadata_value(self) -> cgr.MemberMetadataValue:
        return cgr.MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        # the subscribed topics' metadata the target assignment was computed for
        self.subscribed_topics: dict[str, TopicMeta] = {}
        self._owner: dict[tuple[uuid.UUID, int], str] = {}
        # what the log holds for this group: key -> value (the coordinator writes the diff)
        self.persisted: dict[bytes, bytes] = {}
        self.dead = False

    # --- state ------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE:
                return RECONCILING
        return STABLE

    def classic_protocols_supported(self, protocol_type: str, names: Collection[str]) -> bool:
        """Kafka's supportsClassicProtocols: type "consumer" and a protocol every classic
        member supports."""
        if protocol_type != "consumer":
            return False
        classic = [m for m in self.members.values() if m.classic is not None]
        if not classic:
            return bool(names)
        return any(
            all(any(n == p for p, _ in m.classic.supported_protocols) for m in classic if m.classic)
            for n in names
        )

    def all_classic_except(self, member_id: str) -> bool:
        """Every member but `member_id` uses the classic protocol, and it does not."""
        m = self.members.get(member_id)
        if m is None or m.classic is not None:
            return False
        return all(o.classic is not None for mid, o in self.members.items() if mid != member_id)

    def waiting_on_unreleased_partition(self, m: ConsumerMember) -> bool:
        """Whether a partition of `m`'s target is still owned by another member."""
        for t, parts in self.target.get(m.member_id, {}).items():
            for p in parts - m.assigned.get(t, frozenset()):
                owner = self._owner.get((t, p))
                if owner is not None and owner != m.member_id:
                    return True
        return False

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    # --- ownership ------------------------------------------------------------------------
    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self._owner.get((topic_id, partition))

    def is_free_for(self, member_id: str) -> object:
        def free(t: uuid.UUID, p: int) -> bool:
            o = self._owner.get((t, p))
            return o is None or o == member_id

        return free

    def _owned_by(self, m: ConsumerMember) -> Iterator[tuple[uuid.UUID, int]]:
        for parts in (m.assigned, m.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    yield (t, p)

    def set_assignment(self, m: ConsumerMember, a: MemberAssignment) -> None:
        """Give `m` the assignment `a`, moving partition ownership accordingly."""
        for tp in self._owned_by(m):
            if self._owner.get(tp) == m.member_id:
                del self._owner[tp]
        m.state = a.state
        m.member_epoch = a.member_epoch
        m.previous_member_epoch = a.previous_member_epoch
        m.assigned = {t: p for t, p in a.assigned.items() if p}
        m.pending_revocation = {t: p for t, p in a.pending_revocation.items() if p}
        for tp in self._owned_by(m):
            other = self._owner.get(tp)
            if other is not None and other != m.member_id:
                raise AssertionError(
                    f"partition {tp} of group {self.group_id} given to {m.member_id} while "
                    f"{other} owns it"
                )
            self._owner[tp] = m.member_id

    def add_member(self, m: ConsumerMember) -> None:
        self.members[m.member_id] = m
        for tp in self._owned_by(m):
            self._owner.setdefault(tp, m.member_id)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        m = self.members.pop(member_id, None)
        if m is not None:
            for tp in self._owned_by(m):
                if self._owner.get(tp) == member_id:
                    del self._owner[tp]
            self.target.pop(member_id, None)
        return m

    # --- records ----------------------------------------------------------------------------
    def record_keys(self, member_ids: Iterable[str]) -> list[bytes]:
        """The keys of the group's own records and of these members' records."""
        gid = self.group_id
        keys = [
            cgr.group_metadata_key(gid),
            cgr.target_metadata_key(gid),
            cgr.partition_metadata_key(gid),
        ]
        for mid in member_ids:
            keys += [
                cgr.member_metadata_key(gid, mid),
                cgr.current_assignment_key(gid, mid),
                cgr.target_member_key(gid, mid),
            ]
        return keys

    def records(self, member_ids: Collection[str] | None = None) -> dict[bytes, bytes]:
        """The group as `__consumer_offsets` records (key -> value), Kafka 4.0's types 3-8:
        all of them, or the group's own and those of `member_ids`."""
        gid = self.group_id
        out: dict[bytes, bytes] = {}
        wanted = self.members if member_ids is None else member_ids
        for mid in wanted:
            m = self.members.get(mid)
            if m is None:
                continue
            out[cgr.member_metadata_key(gid, mid)] = cgr.encode_member_metadata(m.metadata_value())
            out[cgr.current_assignment_key(gid, mid)] = cgr.encode_current_assignment(
                cgr.CurrentAssignmentValue(
                    m.member_epoch,
                    m.previous_member_epoch,
                    int(m.state),
                    m.assigned,
                    m.pending_revocation,
                )
            )
        for mid in self.target if member_ids is None else member_ids:
            a = self.target.get(mid)
            if a is not None:
                out[cgr.target_member_key(gid, mid)] = cgr.encode_target_member(a)
        out[cgr.group_metadata_key(gid)] = cgr.encode_epoch_value(self.group_epoch)
        out[cgr.target_metadata_key(gid)] = cgr.encode_epoch_value(self.assignment_epoch)
        out[cgr.partition_metadata_key(gid)] = cgr.encode_partition_metadata(
            self.group_epoch,
            [
                cgr.TopicMetadataValue(t.topic_id, t.name, t.num_partitions)
                for _, t in sorted(self.subscribed_topics.items())
            ],
        )
        return out

    def snapshot(self) -> tuple[object, ...]:
        """What must survive a reload (for tests and the simulation): epochs, members,
        their assignments and the target."""
        return (
            self.group_id,
            self.group_epoch,
            self.assignment_epoch,
            tuple(
                sorted(
                    (
                        mid,
                        m.member_epoch,
                        m.previous_member_epoch,
                        int(m.state),
                        tuple(sorted((str(t), tuple(sorted(p))) for t, p in m.assigned.items())),
                        tuple(
                            sorted(
                                (str(t), tuple(sorted(p))) for t, p in m.pending_revocation.items()
                            )
                        ),
                        m.subscribed_topic_names,
                        m.subscribed_topic_regex,
                    )
                    for mid, m in self.members.items()
                )
            ),
            tuple(
                sorted(
                    (mid, tuple(sorted((str(t), tuple(sorted(p))) for t, p in a.items())))
                    for mid, a in self.target.items()
                )
            ),
        )

    @classmethod
    def from_replay(
        cls, group_id: str, r: cgr.ReplayedGroup, now_ms: int, session_ms: int
    ) -> ConsumerGroup:
        g = cls(group_id)
        g.group_epoch = r.group_epoch or 0
        g.assignment_epoch = r.assignment_epoch or 0
        g.subscribed_topics = {
            t.name: TopicMeta(t.topic_id, t.name, t.num_partitions) for t in (r.topics or ())
        }
        for mid, md in r.members.items():
            m = ConsumerMember(
                mid,
                instance_id=md.instance_id,
                rack_id=md.rack_id,
                client_id=md.client_id,
                client_host=md.client_host,
                subscribed_topic_names=md.subscribed_topic_names,
                subscribed_topic_regex=md.subscribed_topic_regex,
                rebalance_timeout_ms=md.rebalance_timeout_ms,
                server_assignor=md.server_assignor,
                classic=md.classic,
                session_deadline_ms=now_ms
                + (session_ms if md.classic is None else md.classic.session_timeout_ms),
            )
            cur = r.current.get(mid)
            if cur is not None:
                m.member_epoch = cur.member_epoch
                m.previous_member_epoch = cur.previous_member_epoch
                try:
                    m.state = MemberState(cur.state)
                except ValueError:
                    m.state = MemberState.UNKNOWN
                m.assigned = dict(cur.assigned)
                m.pending_revocation = dict(cur.pending_revocation)
                if m.state == MemberState.UNREVOKED_PARTITIONS:
                    m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
            g.add_member(m)
        g.target = {mid: dict(a) for mid, a in r.targets.items() if mid in g.members}
        return g
