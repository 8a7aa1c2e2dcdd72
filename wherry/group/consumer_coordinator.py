"""The KIP-848 consumer groups of a group coordinator (Kafka 4's GroupMetadataManager for
groups of type `consumer`): ConsumerGroupHeartbeat, session and revocation timeouts, loading
from and writing to `__consumer_offsets`.

A heartbeat (Kafka's consumerGroupHeartbeat):

1. checks the request (INVALID_REQUEST), the member and its epoch (UNKNOWN_MEMBER_ID,
   FENCED_MEMBER_EPOCH -- a member one epoch behind whose owned partitions are a subset of its
   assignment is let through, its previous answer was lost), the static member's instance id
   (UNRELEASED_INSTANCE_ID) and the assignor (UNSUPPORTED_ASSIGNOR);
2. updates the member; a new or leaving member, a changed subscription or a change of the
   subscribed topics' metadata (new topics matching, more partitions) bumps the group epoch;
3. recomputes the target assignment when the group epoch is ahead of the assignment epoch
   (assignors.py; the member's `server_assignor`, the one most members ask for, else the
   first of `group.consumer.assignors`);
4. reconciles the member (reconciliation.py: revocation before assignment);
5. writes what changed as Kafka 4's records (consumer_group_records.py) and answers once
   the write is acknowledged.

Members are fenced (removed, group epoch bumped) when their session
(`group.consumer.session.timeout.ms` from the last heartbeat) or, while they still hold
partitions to revoke, their rebalance timeout expires.

Regular expressions (`subscribed_topic_regex`) use Kafka's RE2/J syntax and are compiled by
RE2 (`common/linear_regex.py`: linear-time matching, so no pattern can stall the broker), matched
against the whole topic name as RE2/J's `matches()` does; internal topics (`__`) never match.

Pure and single-threaded: time comes in as `now_ms`; writes go to `OffsetsStorage`.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.linear_regex import InvalidPattern, LinearPattern, compile_linear
from wherry.group import consumer_group_records as cgr
from wherry.group.assignors import ASSIGNORS, MemberSpec, assign
from wherry.group.config import ConsumerGroupConfig
from wherry.group.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    TopicMeta,
)
from wherry.group.reconciliation import MemberAssignment, MemberState, reconcile
from wherry.group.storage import APPEND_ERRORS, OffsetsStorage, Record

log = logging.getLogger(__name__)

__all__ = [
    "ConsumerGroupConfig",
    "ConsumerGroupManager",
    "HeartbeatRequest",
    "HeartbeatResult",
    "TopicsImage",
]

Parts = Mapping[uuid.UUID, frozenset[int]]


class TopicsImage:
    """The topics a heartbeat sees: name -> (topic id, partition count)."""

    def __init__(self, topics: Mapping[str, TopicMeta]) -> None:
        self._topics = dict(topics)
        self._by_id = {t.topic_id: t for t in topics.values()}

    def names(self) -> Iterable[str]:
        return self._topics.keys()

    def get(self, name: str) -> TopicMeta | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Parts | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Parts | None = None

    @classmethod
    def failed(cls, error: ErrorCode, message: str | None = None) -> HeartbeatResult:
        return cls(error, message)


HeartbeatCallback = Callable[[HeartbeatResult], None]

# Record types in the order a batch carries them: tombstones first (current assignment,
# target, member, then the group's), then member metadata, partition metadata, group epoch,
# targets, target epoch, current assignments -- the order Kafka writes them in.
_TOMBSTONE_ORDER = {8: 0, 7: 1, 5: 2, 6: 3, 4: 4, 3: 5}
_UPSERT_ORDER = {5: 0, 4: 1, 3: 2, 7: 3, 6: 4, 8: 5}


def _subset(a: Parts, b: Parts) -> bool:
    return all(p <= b.get(t, frozenset()) for t, p in a.items())


def _diff(old: Mapping[bytes, bytes], new: Mapping[bytes, bytes]) -> list[Record]:
    """The records that turn `old` into `new`, in Kafka's order of record types."""
    return cgr.record_diff(
        old,
        new,
        lambda k: _TOMBSTONE_ORDER[cgr.record_type(k)],
        lambda k: _UPSERT_ORDER[cgr.record_type(k)],
    )


class ConsumerGroupManager:
    def __init__(
        self,
        config: ConsumerGroupConfig,
        storage: OffsetsStorage,
        partition_for: Callable[[str], int],
        is_partition_owned: Callable[[int], bool],
        *,
        log_prefix: str,
    ) -> None:
        self.config = config
        self._storage = storage
        self._partition_for = partition_for
        self._is_owned = is_partition_owned
        self._groups: dict[str, ConsumerGroup] = {}
        self._regex_cache: dict[str, LinearPattern | None] = {}
        self._prefix = log_prefix
        # Told of every write of a group (its state then) and, through the callable it
        # returns, of the write's outcome: the simulation's ledger.
        self.write_observer: Callable[[ConsumerGroup], Callable[[ErrorCode], None]] | None = None
        # Called with a group, a member leaving it or fenced and the time: True if the group
        # was converted to a classic group instead (the online downgrade).
        self.downgrade: Callable[[ConsumerGroup, str, int], bool] | None = None

    # --- registry -----------------------------------------------------------------------------
    def get(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def groups(self) -> list[ConsumerGroup]:
        return list(self._groups.values())

    # --- loading ------------------------------------------------------------------------------
    def load(self, partition: int, replay: cgr.ConsumerGroupReplay, now_ms: int) -> int:
        """Rebuild the partition's consumer groups from its replayed records."""
        n = 0
        for group_id, r in replay.groups.items():
            if self._partition_for(group_id) != partition or r.group_epoch is None:
                continue
            g = ConsumerGroup.from_replay(group_id, r, now_ms, self.config.session_timeout_ms)
            g.persisted = g.records()
            self._groups[group_id] = g
            n += 1
        return n

    def unload(self, partition: int) -> int:
        gone = [g for g in self._groups if self._partition_for(g) == partition]
        for g in gone:
            del self._groups[g]
        return len(gone)

    # --- writing ------------------------------------------------------------------------------
    def write(
        self,
        group: ConsumerGroup,
        done: Callable[[ErrorCode], None],
        touched: Collection[str] | None = None,
    ) -> None:
        """Append what changed in `group` since the last write (this coordinator's requests
        and classic members' alike); `done(error)` once acked.
        With `touched`, only these members (and the group's own records) may have changed --
        unless an earlier write failed: what the log holds of its records is unknown then
        (marked b""), so a write that has something to append appends the whole group's
        difference, not only the touched members' (a member added or moved by a failed write
        would otherwise stay as it was in the log). A heartbeat that changes nothing still
        writes nothing."""
        if group.dead or touched is None:
            new = {} if group.dead else group.records()
            old = dict(group.persisted)
        else:
            new = group.records(touched)
            keys = group.record_keys(touched)
            old = {k: group.persisted[k] for k in keys if k in group.persisted}
            if _diff(old, new) and b"" in group.persisted.values():
                new, old = group.records(), dict(group.persisted)
                touched = None
        records = _diff(old, new)
        if touched is None:
            group.persisted = new
        else:
            for k in group.record_keys(touched):
                if k in new:
                    group.persisted[k] = new[k]
                else:
                    group.persisted.pop(k, None)
        if not records:
            done(ErrorCode.none)
            return
        p = self._partition_for(group.group_id)
        if not self._is_owned(p):
            done(ErrorCode.not_coordinator)
            return
        observed = None if self.write_observer is None else self.write_observer(group)

        def appended(error: ErrorCode, _base_offset: int) -> None:
            if observed is not None:
                observed(error)
            if error != ErrorCode.none:
                log.warning(
                    "%s Writing consumer group %s failed: %s",
                    self._prefix,
                    group.group_id,
                    error.name,
                )
                # What the log holds is unknown now: rewrite these records next time.
                for k in set(new) | set(old):
                    group.persisted[k] = b""
            done(APPEND_ERRORS.get(error, error))

        self._storage.append(p, records, appended)

    # --- time ---------------------------------------------------------------------------------
    def next_expiration_ms(self) -> int | None:
        best: int | None = None
        for g in self._groups.values():
            for m in g.members.values():
                for d, _ in m.deadlines():
                    if d is not None and (best is None or d < best):
                        best = d
        return best

    def advance_clock(self, now_ms: int) -> None:
        for g in list(self._groups.values()):
            expired: list[tuple[str, str]] = []
            for m in g.members.values():
                why = next((w for d, w in m.deadlines() if d is not None and d <= now_ms), None)
                if why is not None:
                    expired.append((m.member_id, why))
            if not expired:
                continue
            for member_id, why in expired:
                log.info(
                    "%s Member %s of consumer group %s fenced: %s",
                    self._prefix,
                    member_id,
                    g.group_id,
                    why,
                )
                if self.downgrade is not None and self.downgrade(g, member_id, now_ms):
                    break
                g.remove_member(member_id)
            else:
                g.group_epoch += 1
                self.write(g, lambda _e: None, [mid for mid, _ in expired])

    # --- ConsumerGroupHeartbeat -----------------------------------------------------------------
    def invalid_request(self, req: HeartbeatRequest) -> str | None:
        """Why the request is invalid (INVALID_REQUEST), checked before the group is looked
        up, as Kafka's GroupCoordinatorService does; None if it is not."""
        problem = self._check_request(req)
        return None if problem in ("assignor", "regex") else problem

    def _check_request(self, req: HeartbeatRequest) -> str | None:
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if req.owned is not None and any(req.owned.values()):
                return "TopicPartitions must be empty when (re-)joining."
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                return "InstanceId can't be null when leaving with member epoch -2."
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            return f"MemberEpoch {req.member_epoch} is invalid."
        if not req.member_id:
            return "MemberId can't be empty."
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return "assignor"
        if req.subscribed_topic_regex and self._pattern(req.subscribed_topic_regex) is None:
            return "regex"
        return None

    def _pattern(self, regex: str) -> LinearPattern | None:
        if regex not in self._regex_cache:
            try:
                self._regex_cache[regex] = compile_linear(regex)
            except InvalidPattern:
                self._regex_cache[regex] = None
            if len(self._regex_cache) > 1024:
                self._regex_cache.pop(next(iter(self._regex_cache)))
        return self._regex_cache[regex]

    def heartbeat(
        self,
        req: HeartbeatRequest,
        topics: TopicsImage,
        now_ms: int,
        callback: HeartbeatCallback,
    ) -> None:
        problem = self._check_request(req)
        if problem == "assignor":
            callback(
                HeartbeatResult.failed(
                    ErrorCode.unsupported_assignor,
                    f"ServerAssignor {req.server_assignor} is not supported. Supported "
                    f"assignors: {', '.join(self.config.assignors)}.",
                )
            )
            return
        if problem == "regex":
            callback(
                HeartbeatResult.failed(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid "
                    "regular expression.",
                )
            )
            return
        if problem is not None:
            callback(HeartbeatResult.failed(ErrorCode.invalid_request, problem))
            return
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            self._leave(req, now_ms, callback)
            return
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                callback(
                    HeartbeatResult.failed(
                        ErrorCode.group_id_not_found, f"Group {req.group_id} not found."
                    )
                )
                return
            group = self._groups[req.group_id] = ConsumerGroup(req.group_id)
            log.info("%s Created consumer group %s", self._prefix, req.group_id)
        bump = False
        touched: list[str] | None = [req.member_id]
        if req.member_epoch == 0:
            static = None if req.instance_id is None else group.static_member(req.instance_id)
            if static is not None and static.member_id != req.member_id:
                touched = None  # a static member replaced: write the whole group
            member, err = self._joining_member(group, req)
            if member is None:
                assert err is not None
                callback(err)
                return
            bump = member.member_id not in group.members
            if bump:
                if len(group.members) >= self.config.max_size:
                    callback(
                        HeartbeatResult.failed(
                            ErrorCode.group_max_size_reached,
                            f"The consumer group has reached its maximum capacity of "
                            f"{self.config.max_size} members.",
                        )
                    )
                    return
                group.add_member(member)
        else:
            existing = group.members.get(req.member_id)
            if existing is None:
                callback(
                    HeartbeatResult.failed(
                        ErrorCode.unknown_member_id,
                        f"Member {req.member_id} is not a member of group {req.group_id}.",
                    )
                )
                return
            if not self._epoch_ok(existing, req):
                callback(
                    HeartbeatResult.failed(
                        ErrorCode.fenced_member_epoch,
                        f"The consumer group member has a smaller or larger member epoch "
                        f"({req.member_epoch}) than the one known by the group coordinator "
                        f"({existing.member_epoch}). The member must abandon all its "
                        "partitions and rejoin.",
                    )
                )
                return
            member = existing
        before = member.assignment
        bump = self._update_member(member, req) or bump
        subscribed = self._subscribed_topics(group, topics)
        if subscribed != group.subscribed_topics:
            group.subscribed_topics = subscribed
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, topics)
            touched = None
        target = group.target.get(member.member_id, {})
        after = reconcile(
            member.assignment,
            group.assignment_epoch,
            target,
            req.owned,
            group.is_free_for(member.member_id),  # type: ignore[arg-type]
        )
        if after != member.assignment:
            group.set_assignment(member, after)
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if (
                before.state != MemberState.UNREVOKED_PARTITIONS
                or member.revocation_deadline_ms is None
            ):
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        else:
            member.revocation_deadline_ms = None
        full = (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.owned is not None
        )
        # Also when the member reports owning something else than its assignment (an answer
        # that carried it was lost).
        stale = req.owned is not None and {t: p for t, p in req.owned.items() if p} != {
            t: p for t, p in member.assigned.items() if p
        }
        send_assignment = (
            req.member_epoch == 0 or full or stale or before.assigned != member.assigned
        )
        result = HeartbeatResult(
            ErrorCode.none,
            None,
            member.member_id,
            member.member_epoch,
            self.config.heartbeat_interval_ms,
            dict(member.assigned) if send_assignment else None,
        )

        def written(error: ErrorCode) -> None:
            callback(result if error == ErrorCode.none else HeartbeatResult.failed(error))

        self.write(group, written, touched)

    def _joining_member(
        self, group: ConsumerGroup, req: HeartbeatRequest
    ) -> tuple[ConsumerMember | None, HeartbeatResult | None]:
        """The member a heartbeat with epoch 0 joins (or rejoins) as."""
        if req.instance_id is not None:
            static = group.static_member(req.instance_id)
            if static is not None and static.member_id != req.member_id:
                if static.member_epoch != STATIC_LEAVE_EPOCH:
                    return None, HeartbeatResult.failed(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {static.member_id} with instance id "
                        f"{req.instance_id} is not released yet.",
                    )
                # The static member comes back under a new member id: it takes over the old
                # one's assignment and epoch, no rebalance.
                target = group.target.get(static.member_id, {})
                group.remove_member(static.member_id)
                replacement = ConsumerMember(
                    req.member_id,
                    instance_id=static.instance_id,
                    rack_id=static.rack_id,
                    client_id=static.client_id,
                    client_host=static.client_host,
                    subscribed_topic_names=static.subscribed_topic_names,
                    subscribed_topic_regex=static.subscribed_topic_regex,
                    rebalance_timeout_ms=static.rebalance_timeout_ms,
                    server_assignor=static.server_assignor,
                )
                epoch = group.assignment_epoch
                replacement.member_epoch = epoch
                group.add_member(replacement)
                group.target[req.member_id] = target
                group.set_assignment(
                    replacement,
                    MemberAssignment(
                        static.state if static.state != MemberState.UNKNOWN else MemberState.STABLE,
                        static.previous_member_epoch
                        if static.member_epoch == STATIC_LEAVE_EPOCH
                        else static.member_epoch,
                        static.previous_member_epoch,
                        static.assigned,
                        static.pending_revocation,
                    ),
                )
                return replacement, None
        existing = group.members.get(req.member_id)
        if existing is not None:
            # A member rejoining (it lost its partitions, e.g. fenced): start over at epoch 0.
            group.set_assignment(existing, MemberAssignment(MemberState.STABLE, 0, 0, {}, {}))
            return existing, None
        return ConsumerMember(req.member_id, instance_id=req.instance_id), None

    @staticmethod
    def _epoch_ok(member: ConsumerMember, req: HeartbeatRequest) -> bool:
        if req.member_epoch == member.member_epoch:
            return True
        if req.member_epoch > member.member_epoch:
            return False
        # One epoch behind: the previous answer was lost; fine if the member owns no more
        # than it is assigned.
        return (
            req.member_epoch == member.previous_member_epoch
            and req.owned is not None
            and _subset(req.owned, member.assigned)
        )

    @staticmethod
    def _update_member(member: ConsumerMember, req: HeartbeatRequest) -> bool:
        """Apply the heartbeat's fields; True if the subscription changed."""
        changed = False
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.client_id:
            member.client_id = req.client_id
        if req.client_host:
            member.client_host = req.client_host
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                changed = True
        if req.server_assignor is not None:
            assignor = req.server_assignor or None
            if assignor != member.server_assignor:
                member.server_assignor = assignor
                changed = True
        return changed

    def _member_topics(self, member: ConsumerMember, topics: TopicsImage) -> set[str]:
        names = {n for n in member.subscribed_topic_names if topics.get(n) is not None}
        if member.subscribed_topic_regex:
            pattern = self._pattern(member.subscribed_topic_regex)
            if pattern is not None:
                names.update(
                    n for n in topics.names() if not n.startswith("__") and pattern.fullmatch(n)
                )
        return names

    def _subscribed_topics(self, group: ConsumerGroup, topics: TopicsImage) -> dict[str, TopicMeta]:
        out: dict[str, TopicMeta] = {}
        for m in group.members.values():
            for name in self._member_topics(m, topics):
                meta = topics.get(name)
                if meta is not None:
                    out[name] = meta
        return out

    def _assignor_of(self, group: ConsumerGroup) -> str:
        wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if wanted:
            return sorted(wanted.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        return self.config.assignors[0] if self.config.assignors else "uniform"

    def assignor_name(self, group: ConsumerGroup) -> str:
        return self._assignor_of(group)

    def _compute_target(self, group: ConsumerGroup, topics: TopicsImage) -> None:
        specs: dict[str, MemberSpec] = {}
        for mid, m in group.members.items():
            ids = frozenset(
                group.subscribed_topics[n].topic_id
                for n in self._member_topics(m, topics)
                if n in group.subscribed_topics
            )
            specs[mid] = MemberSpec(ids, group.target.get(mid, {}))
        counts = {t.topic_id: t.num_partitions for t in group.subscribed_topics.values()}
        name = self._assignor_of(group)
        if name not in ASSIGNORS:
            name = "uniform"
        group.target = {mid: dict(a) for mid, a in assign(name, specs, counts).items()}
        group.assignment_epoch = group.group_epoch

    def _leave(self, req: HeartbeatRequest, now_ms: int, callback: HeartbeatCallback) -> None:
        group = self._groups.get(req.group_id)
        member = None if group is None else group.members.get(req.member_id)
        if group is None or member is None:
            callback(
                HeartbeatResult.failed(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {req.group_id}.",
                )
            )
            return
        result = HeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch, 0, None)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member leaving for now: it keeps its assignment until its session
            # expires or its instance id comes back.
            log.info(
                "%s Static member %s (instance %s) of consumer group %s is leaving temporarily",
                self._prefix,
                member.member_id,
                member.instance_id,
                group.group_id,
            )
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.revocation_deadline_ms = None
        else:
            log.info(
                "%s Member %s left consumer group %s",
                self._prefix,
                member.member_id,
                group.group_id,
            )
            if self.downgrade is not None and self.downgrade(group, member.member_id, now_ms):
                callback(result)
                return
            group.remove_member(member.member_id)
            group.group_epoch += 1

        def written(error: ErrorCode) -> None:
            callback(result if error == ErrorCode.none else HeartbeatResult.failed(error))

        self.write(group, written, [req.member_id])

    # --- offsets ------------------------------------------------------------------------------
    @staticmethod
    def validate_offset_commit(
        group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int
    ) -> tuple[ErrorCode, str | None] | None:
        """Kafka's ConsumerGroup.validateOffsetCommit (None: the commit may go on)."""
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, None
        if api_version < 9 and member.classic is None:
            return (
                ErrorCode.unsupported_version,
                "OffsetCommit version 9 or above must be used by members using the consumer "
                "group protocol",
            )
        if member_epoch != member.member_epoch:
            # A classic member gives its generation, which is its member epoch.
            stale = ErrorCode.illegal_generation if member.classic else ErrorCode.stale_member_epoch
            return stale, None
        return None

    @staticmethod
    def validate_offset_fetch(
        group: ConsumerGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetFetch (admin fetches: no member, epoch -1)."""
        if member_epoch < 0 and member_id is None:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.illegal_generation if member.classic else ErrorCode.stale_member_epoch
        return None

    # --- conversions ------------------------------------------------------------------------
    def adopt(self, group: ConsumerGroup, now_ms: int) -> None:
        """Serve `group` (converted from a classic group); its records are written by the
        next write of it."""
        self._groups[group.group_id] = group
        for m in group.members.values():
            session = self.config.session_timeout_ms
            if m.classic is not None:
                session = m.classic.session_timeout_ms
            m.session_deadline_ms = now_ms + session

    def drop(self, group_id: str, done: Callable[[ErrorCode], None]) -> ConsumerGroup | None:
        """Stop serving the group (converted to a classic group): tombstones for its records."""
        group = self._groups.pop(group_id, None)
        if group is None:
            return None
        group.dead = True
        self.write(group, done)
        return group

    def update_subscriptions(self, group: ConsumerGroup, topics: TopicsImage) -> bool:
        """Recompute the subscribed topics' metadata; True if it changed."""
        subscribed = self._subscribed_topics(group, topics)
        if subscribed == group.subscribed_topics:
            return False
        group.subscribed_topics = subscribed
        return True

    def compute_target(self, group: ConsumerGroup, topics: TopicsImage) -> None:
        self._compute_target(group, topics)

    # --- deletion -----------------------------------------------------------------------------
    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of an empty consumer group: tombstones for all its records."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        group.dead = True
        del self._groups[group_id]
        self.write(group, lambda _e: None)
        return ErrorCode.none
