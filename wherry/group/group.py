"""One classic group (Kafka's GroupMetadata): membership, generation, protocol and offsets.

Pure bookkeeping; the coordinator decides when things happen. Time comes in as `now_ms`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.member import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupResult,
    JoinMember,
    MemberMetadata,
    SyncGroupResult,
)
from wherry.group.records import parse_subscription_topics
from wherry.group.state import GroupState, can_transition, transition

log = logging.getLogger(__name__)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "CommitRecordMetadataAndOffset",
    "GroupMetadata",
    "GroupOverview",
    "GroupSummary",
    "MemberSummary",
    "OffsetAndMetadata",
    "OffsetCommitter",
]

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int  # -1 when unknown
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None  # only from OffsetCommit v2-v4 retention_time


@dataclass(frozen=True, slots=True)
class OffsetCommitter:
    """Who commits offsets (OffsetCommit, TxnOffsetCommit): the group, and the member with its
    static instance id and generation (a KIP-848 member's epoch). A client outside the group's
    management (an admin client, a producer) sends no member id and generation -1."""

    group_id: str
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    generation_id: int = -1

    @property
    def managed(self) -> bool:
        """The commit names a member of the group (its generation, member or instance id)."""
        return (
            self.generation_id >= 0
            or self.member_id != UNKNOWN_MEMBER_ID
            or self.group_instance_id is not None
        )


@dataclass(frozen=True, slots=True)
class CommitRecordMetadataAndOffset:
    """A committed offset with the offset of the record that stored it (None until appended)."""

    appended_batch_offset: int | None
    offset_and_metadata: OffsetAndMetadata

    def older_than(self, other: CommitRecordMetadataAndOffset) -> bool:
        mine = -1 if self.appended_batch_offset is None else self.appended_batch_offset
        theirs = -1 if other.appended_batch_offset is None else other.appended_batch_offset
        return mine < theirs


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


class GroupMetadata:
    def __init__(self, group_id: str, initial_state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self._state = initial_state
        self.current_state_timestamp_ms: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self._leader_id: str | None = None
        self._members: dict[str, MemberMetadata] = {}
        self._static_members: dict[str, str] = {}  # group.instance.id -> member.id
        self._pending_members: set[str] = set()
        self._pending_sync_members: set[str] = set()
        self._num_members_awaiting_join = 0
        self._supported_protocols: dict[str, int] = {}
        self._offsets: dict[TopicPartition, CommitRecordMetadataAndOffset] = {}
        self._pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        # producer id -> its transactional offsets awaiting the transaction's marker
        self._pending_txn_offset_commits: dict[
            int, dict[TopicPartition, CommitRecordMetadataAndOffset]
        ] = {}
        self.subscribed_topics: frozenset[str] | None = None
        self.new_member_added = False

    # --- state -----------------------------------------------------------------------------
    @property
    def state(self) -> GroupState:
        return self._state

    def is_(self, state: GroupState) -> bool:
        return self._state is state

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        self._state = transition(self.group_id, self._state, target)
        self.current_state_timestamp_ms = now_ms

    @property
    def can_rebalance(self) -> bool:
        return can_transition(self._state, GroupState.PREPARING_REBALANCE)

    # --- members ---------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self._members

    def get(self, member_id: str) -> MemberMetadata:
        return self._members[member_id]

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    def load_leader(self, leader_id: str | None) -> None:
        """Set the leader of a group rebuilt from the log (before its members are added)."""
        self._leader_id = leader_id

    def is_leader(self, member_id: str) -> bool:
        return self._leader_id == member_id

    @property
    def leader_or_empty(self) -> str:
        return self._leader_id or ""

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def all_members(self) -> list[str]:
        return list(self._members)

    def all_member_metadata(self) -> list[MemberMetadata]:
        return list(self._members.values())

    def all_static_members(self) -> list[str]:
        return list(self._static_members)

    @property
    def num_awaiting(self) -> int:
        return self._num_members_awaiting_join

    @property
    def num_pending(self) -> int:
        return len(self._pending_members)

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self._members.values() if not m.is_awaiting_join]

    @property
    def has_all_members_joined(self) -> bool:
        return len(self._members) == self._num_members_awaiting_join and not self._pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        """Add a member (callback: its parked JoinGroup, or None when loaded from the log)."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self._static_members:
                raise ValueError(
                    f"Static member with groupInstanceId={member.group_instance_id} cannot be "
                    f"added to group {self.group_id} since it is already a member"
                )
            self._static_members[member.group_instance_id] = member.member_id
        if not self._members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError(
                f"member protocol type {member.protocol_type!r} != group {self.protocol_type!r}"
            )
        if self._leader_id is None:
            self._leader_id = member.member_id
        self._members[member.member_id] = member
        self._inc_supported_protocols(member)
        member.awaiting_join_callback = callback
        if member.is_awaiting_join:
            self._num_members_awaiting_join += 1
        self._pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self._members.pop(member_id, None)
        if member is not None:
            self._dec_supported_protocols(member)
            if member.is_awaiting_join:
                self._num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self._static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self._leader_id = next(iter(self._members), None)
        self._pending_members.discard(member_id)
        self._pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any rejoined member; False if none did."""
        if self._leader_id is None:
            return False
        leader = self._members[self._leader_id]
        if leader.is_awaiting_join:
            return True
        for member_id, m in self._members.items():
            if m.is_awaiting_join:
                log.info(
                    "Group leader [member.id: %s, group.instance.id: %s] failed to join before "
                    "rebalance timeout, while new leader %s was elected.",
                    leader.member_id,
                    leader.group_instance_id,
                    member_id,
                )
                self._leader_id = member_id
                return True
        log.info(
            "Group leader [member.id: %s, group.instance.id: %s] failed to join before "
            "rebalance timeout, and the group couldn't proceed to next generation because no "
            "member joined.",
            leader.member_id,
            leader.group_instance_id,
        )
        return False

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """Give a static member a new member id, fencing any request parked under the old one."""
        member = self._members.pop(old_member_id, None)
        if member is None:
            raise ValueError(f"Cannot replace non-existing member id {old_member_id}")
        self.maybe_invoke_join_callback(
            member, JoinGroupResult.failed(old_member_id, ErrorCode.fenced_instance_id)
        )
        self.maybe_invoke_sync_callback(
            member, SyncGroupResult.failed(ErrorCode.fenced_instance_id)
        )
        member.member_id = new_member_id
        self._members[new_member_id] = member
        if self.is_leader(old_member_id):
            self._leader_id = new_member_id
        self._static_members[group_instance_id] = new_member_id
        return member

    # --- pending members (KIP-394) and pending syncs -------------------------------------------
    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self._pending_members

    def add_pending_member(self, member_id: str) -> None:
        if self.has(member_id):
            raise ValueError(f"Attempt to add pending member {member_id} which is a member")
        self._pending_members.add(member_id)

    def add_pending_sync_member(self, member_id: str) -> None:
        if not self.has(member_id):
            raise ValueError(f"Attempt to add a pending sync for non-member {member_id}")
        self._pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        self._pending_sync_members.discard(member_id)

    @property
    def has_received_sync_from_all_members(self) -> bool:
        return not self._pending_sync_members

    def all_pending_sync_members(self) -> set[str]:
        return set(self._pending_sync_members)

    def clear_pending_sync_members(self) -> None:
        self._pending_sync_members.clear()

    # --- static members ------------------------------------------------------------------------
    def has_static_member(self, group_instance_id: str) -> bool:
        return group_instance_id in self._static_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self._static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str, member_id: str) -> bool:
        current = self._static_members.get(group_instance_id)
        return current is not None and current != member_id

    # --- protocols -----------------------------------------------------------------------------
    def _inc_supported_protocols(self, member: MemberMetadata) -> None:
        for name, _ in member.supported_protocols:
            self._supported_protocols[name] = self._supported_protocols.get(name, 0) + 1

    def _dec_supported_protocols(self, member: MemberMetadata) -> None:
        for name, _ in member.supported_protocols:
            n = self._supported_protocols.get(name, 0) - 1
            if n > 0:
                self._supported_protocols[name] = n
            else:
                self._supported_protocols.pop(name, None)

    def _candidate_protocols(self) -> set[str]:
        n = len(self._members)
        return {p for p, count in self._supported_protocols.items() if count == n}

    def supports_protocols(self, member_protocol_type: str, member_protocols: set[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(member_protocol_type) and bool(member_protocols)
        n = len(self._members)
        return self.protocol_type == member_protocol_type and any(
            self._supported_protocols.get(p, 0) == n for p in member_protocols
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that gets the most votes (preference order)."""
        if not self._members:
            raise ValueError("Cannot select protocol for empty group")
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for m in self._members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Most votes wins; ties go to the protocol voted for first (deterministic).
        return max(votes, key=lambda p: votes[p])

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Sequence[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._dec_supported_protocols(member)
        member.supported_protocols = list(protocols)
        self._inc_supported_protocols(member)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self._num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self._num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        cb = member.awaiting_join_callback
        if cb is None:
            return
        member.awaiting_join_callback = None
        self._num_members_awaiting_join -= 1
        try:
            cb(result)
        except Exception:
            log.exception("Failed to invoke join callback for %r", member)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        cb = member.awaiting_sync_callback
        if cb is None:
            return False
        member.awaiting_sync_callback = None
        try:
            cb(result)
        except Exception:
            log.exception("Failed to invoke sync callback for %r", member)
        return True

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self._members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.clear_pending_sync_members()

    def current_member_metadata(self) -> tuple[JoinMember, ...]:
        if self._state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise ValueError(f"Cannot obtain member metadata for group in state {self._state}")
        assert self.protocol_name is not None
        return tuple(
            JoinMember(mid, m.group_instance_id, m.metadata(self.protocol_name))
            for mid, m in self._members.items()
        )

    def summary(self) -> GroupSummary:
        if self.is_(GroupState.STABLE):
            protocol = self.protocol_name or ""
            members = tuple(
                MemberSummary(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(protocol),
                    m.assignment,
                )
                for m in self._members.values()
            )
            return GroupSummary(str(self._state), self.protocol_type or "", protocol, members)
        members = tuple(
            MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
            for m in self._members.values()
        )
        return GroupSummary(str(self._state), self.protocol_type or "", "", members)

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, self.protocol_type or "", str(self._state))

    # --- subscriptions (consumer protocol) --------------------------------------------------
    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to, for protocol type "consumer"; None if unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self._members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self._members.values():
            try:
                parsed = parse_subscription_topics(m.metadata(self.protocol_name))
            except ValueError:
                log.warning(
                    "Failed to parse Consumer Protocol consumer:%s of group %s. Consumer group "
                    "coordinator is not aware of the subscribed topics.",
                    self.protocol_name,
                    self.group_id,
                )
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """True if subscribed, or when the subscriptions are unknown (to be safe)."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # --- offsets -------------------------------------------------------------------------------
    def initialize_offsets(
        self, offsets: Mapping[TopicPartition, CommitRecordMetadataAndOffset]
    ) -> None:
        self._offsets.update(offsets)

    def share_offsets_of(self, other: GroupMetadata) -> None:
        """Hold `other`'s offsets, pending commits included, as one (a group converted to or
        from a consumer group: commits in flight on `other` land here too)."""
        self._offsets = other._offsets
        self._pending_offset_commits = other._pending_offset_commits
        self._pending_txn_offset_commits = other._pending_txn_offset_commits

    def prepare_offset_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        self._pending_offset_commits.update(offsets)

    def on_offset_commit_append(
        self, tp: TopicPartition, committed: CommitRecordMetadataAndOffset
    ) -> None:
        if tp in self._pending_offset_commits:
            current = self._offsets.get(tp)
            if current is None or current.older_than(committed):
                self._offsets[tp] = committed
        staged = self._pending_offset_commits.get(tp)
        if staged is not None and staged == committed.offset_and_metadata:
            del self._pending_offset_commits[tp]

    def fail_pending_offset_write(self, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
        if self._pending_offset_commits.get(tp) == offset:
            del self._pending_offset_commits[tp]

    def has_pending_txn_offset_commit(self, tp: TopicPartition) -> bool:
        """A transactional commit of `tp` awaiting its marker."""
        return any(tp in pending for pending in self._pending_txn_offset_commits.values())

    # --- transactional offsets (Kafka's pendingTransactionalOffsetCommits) ----------------------
    def initialize_pending_txn_offsets(
        self, pending: Mapping[int, Mapping[TopicPartition, CommitRecordMetadataAndOffset]]
    ) -> None:
        for producer_id, offsets in pending.items():
            self._pending_txn_offset_commits.setdefault(producer_id, {}).update(offsets)

    def prepare_txn_offset_commit(
        self, producer_id: int, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        staged = self._pending_txn_offset_commits.setdefault(producer_id, {})
        for tp, om in offsets.items():
            staged[tp] = CommitRecordMetadataAndOffset(None, om)

    def on_txn_offset_commit_append(
        self, producer_id: int, tp: TopicPartition, committed: CommitRecordMetadataAndOffset
    ) -> None:
        staged = self._pending_txn_offset_commits.get(producer_id)
        if staged is not None:
            current = staged.get(tp)
            if current is not None and current.offset_and_metadata == committed.offset_and_metadata:
                staged[tp] = committed

    def fail_pending_txn_offset_commit(self, producer_id: int, tp: TopicPartition) -> None:
        staged = self._pending_txn_offset_commits.get(producer_id)
        if staged is not None:
            staged.pop(tp, None)
            if not staged:
                del self._pending_txn_offset_commits[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, is_commit: bool) -> None:
        """The producer's transaction ended: its offsets become committed (if newer than the
        current ones) or are dropped."""
        staged = self._pending_txn_offset_commits.pop(producer_id, None)
        if not is_commit or staged is None:
            return
        for tp, committed in staged.items():
            if committed.appended_batch_offset is None:
                continue  # its write has not been acknowledged: not in the log before the marker
            current = self._offsets.get(tp)
            if current is None or current.older_than(committed):
                self._offsets[tp] = committed

    def has_pending_offset_commits_from_producer(self, producer_id: int) -> bool:
        return producer_id in self._pending_txn_offset_commits

    def pending_txn_producers(self) -> list[int]:
        return list(self._pending_txn_offset_commits)

    def offset(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        c = self._offsets.get(tp)
        return None if c is None else c.offset_and_metadata

    def offset_with_record_metadata(
        self, tp: TopicPartition
    ) -> CommitRecordMetadataAndOffset | None:
        return self._offsets.get(tp)

    def all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: c.offset_and_metadata for tp, c in self._offsets.items()}

    @property
    def num_offsets(self) -> int:
        return len(self._offsets)

    @property
    def has_offsets(self) -> bool:
        return (
            bool(self._offsets)
            or bool(self._pending_offset_commits)
            or bool(self._pending_txn_offset_commits)
        )

    def remove_all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.remove_offsets(list(self._offsets))

    def remove_offsets(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        removed: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in tps:
            self._pending_offset_commits.pop(tp, None)
            for staged in self._pending_txn_offset_commits.values():
                staged.pop(tp, None)
            c = self._offsets.pop(tp, None)
            if c is not None:
                removed[tp] = c.offset_and_metadata
        return removed

    def remove_expired_offsets(
        self, now_ms: int, retention_ms: int
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Drop offsets past retention (Kafka 2.1+ semantics, KIP-211) and return them.

        * Empty group with a protocol type: retention counts from when the group became Empty.
        * Stable consumer group with known subscriptions: offsets of topics no longer
          subscribed expire `retention_ms` after their commit.
        * No protocol type (a "simple" group that only commits): from each commit.
        Offsets with a pending commit never expire; an explicit expire timestamp (OffsetCommit
        v2-v4 retention time) wins over the rules above.
        """

        def expired(
            base_ms: int | None, exclude: frozenset[str] = frozenset()
        ) -> list[TopicPartition]:
            out: list[TopicPartition] = []
            for tp, c in self._offsets.items():
                if tp.topic in exclude or tp in self._pending_offset_commits:
                    continue
                om = c.offset_and_metadata
                if om.expire_timestamp_ms is not None:
                    if now_ms >= om.expire_timestamp_ms:
                        out.append(tp)
                else:
                    base = om.commit_timestamp_ms if base_ms is None else base_ms
                    if now_ms - base >= retention_ms:
                        out.append(tp)
            return out

        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            tps = expired(self.current_state_timestamp_ms)
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):
            tps = expired(None, self.subscribed_topics)
        elif self.protocol_type is None:
            tps = expired(None)
        else:
            tps = []
        removed = {tp: self._offsets.pop(tp).offset_and_metadata for tp in tps}
        if removed:
            log.debug("Expired offsets from group '%s': %s", self.group_id, sorted(removed))
        return removed

    # --- misc ----------------------------------------------------------------------------------
    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def __repr__(self) -> str:
        return (
            f"GroupMetadata(groupId={self.group_id}, generation={self.generation_id}, "
            f"protocolType={self.protocol_type}, currentState={self._state}, "
            f"members={list(self._members)})"
        )
