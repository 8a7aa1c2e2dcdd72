"""Online migration between classic and KIP-848 consumer groups, pure parts: the upgrade of a
classic group with members when a consumer-protocol member joins, classic members served
inside a consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, offsets), the downgrade
when the last consumer-protocol member leaves, `group.consumer.migration.policy`, and the
conversions as records a reloading coordinator reads back."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.group.group_harness import T0, Call, MemoryOffsetsLog, commit_one
from wherry.common.topic_partition import TopicPartition
from wherry.group import consumer_group_records as cgr
from wherry.group import consumer_protocol as cp
from wherry.group.config import ConsumerGroupConfig, GroupCoordinatorConfig
from wherry.group.consumer_coordinator import HeartbeatRequest, HeartbeatResult, TopicsImage
from wherry.group.consumer_group import TopicMeta
from wherry.group.coordinator import GroupCoordinator, MemberIdentity
from wherry.group.records import decode_key, encode_subscription, group_metadata_key
from wherry.group.state import GroupState

E = ErrorCode
T1 = uuid.UUID(int=1)
PARTITIONS = 6


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription v1 (topics, no user data, owned partitions)."""
    return encode_subscription(topics, None, owned or {})


class Migration:
    """A coordinator with classic clients (join, sync, heartbeat, leave) and KIP-848 ones."""

    def __init__(self, *, policy: str = "bidirectional", log: MemoryOffsetsLog | None = None):
        self.now = T0
        self.log = log or MemoryOffsetsLog()
        self.config = GroupCoordinatorConfig(
            group_initial_rebalance_delay_ms=100,
            offsets_topic_num_partitions=1,
            consumer=ConsumerGroupConfig(migration_policy=policy),
        )
        self.coord = GroupCoordinator(0, self.config, self.log, now_ms=self.now)
        self.coord.startup()
        self.coord.load_partition(0, self.log.batches.get(0, []), now_ms=self.now)
        self.topics = TopicsImage({"t": TopicMeta(T1, "t", PARTITIONS)})
        self.generation: dict[str, int] = {}
        self.owned: dict[str, frozenset[int]] = {}  # classic and consumer members alike
        self.epoch: dict[str, int] = {}

    def advance(self, ms: int) -> None:
        self.now += ms
        self.coord.advance_clock(self.now)

    def wait_for(self, call: Call) -> None:
        """Let the clock run until a parked JoinGroup is answered (the initial delay)."""
        for _ in range(20):
            if call.done:
                return
            self.advance(100)
        raise AssertionError("JoinGroup not answered")

    # --- classic clients --------------------------------------------------------------------
    def join(self, member: str, *, protocol_type: str = "consumer", eager: bool = True) -> Call:
        owned = {} if eager else {"t": sorted(self.owned.get(member, ()))}
        if eager:
            self.owned.pop(member, None)  # an eager client revokes everything first
        call = Call()
        self.coord.handle_join_group(
            "g",
            member,
            None,
            require_known_member_id=False,
            support_skipping_assignment=False,
            client_id="classic",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=20_000,
            session_timeout_ms=10_000,
            protocol_type=protocol_type,
            protocols=[("range", subscription(["t"], owned))],
            callback=call,
            now_ms=self.now,
            topics=self.topics,
        )
        if call.done and call.join.error == E.none:
            self.generation[call.join.member_id] = call.join.generation_id
        return call

    def sync(self, member: str, assignments: dict[str, bytes] | None = None) -> Call:
        call = Call()
        self.coord.handle_sync_group(
            "g",
            self.generation[member],
            member,
            "consumer",
            "range",
            None,
            assignments or {},
            call,
            self.now,
        )
        if call.done and call.sync.error == E.none:
            self.owned[member] = cp.decode_assignment(call.sync.assignment).get("t", frozenset())
        return call

    def heartbeat(self, member: str) -> ErrorCode:
        return self.coord.handle_heartbeat("g", member, None, self.generation[member], self.now)

    def leave(self, member: str) -> ErrorCode:
        r = self.coord.handle_leave_group("g", [MemberIdentity(member)], self.now, self.topics)
        self.owned.pop(member, None)
        return r.members[0].error if r.error == E.none else r.error

    def classic_group_of_two(self) -> None:
        """a and b join a classic group; a leads and gives a 0-2 and b 3-5."""
        a, b = self.join(""), self.join("")
        assert not a.done and not b.done  # waiting for the rebalance
        self.wait_for(a)
        ids = [a.join.member_id, b.join.member_id]
        leader = a.join.leader_id
        for c in (a, b):
            self.generation[c.join.member_id] = c.join.generation_id
        plan = {
            ids[0]: cp.encode_assignment({"t": [0, 1, 2]}, 1),
            ids[1]: cp.encode_assignment({"t": [3, 4, 5]}, 1),
        }
        follower = ids[1] if leader == ids[0] else ids[0]
        assert self.sync(leader, plan).sync.error == E.none
        assert self.sync(follower).sync.error == E.none
        self.a, self.b = ids
        group = self.coord.group("g")
        assert group is not None and group.is_(GroupState.STABLE)

    # --- consumer-protocol clients ----------------------------------------------------------
    def hb(self, member: str, epoch: int | None = None) -> HeartbeatResult:
        e = self.epoch.get(member, 0) if epoch is None else epoch
        fields: dict[str, object] = {"owned": {T1: self.owned.get(member, frozenset())}}
        if e == 0:
            fields.update(rebalance_timeout_ms=30_000, subscribed_topic_names=("t",))
        out: list[HeartbeatResult] = []
        req = HeartbeatRequest("g", member, e, **fields)  # type: ignore[arg-type]
        self.coord.handle_consumer_group_heartbeat(req, self.topics, out.append, self.now)
        r = out[0]
        if e < 0:
            self.owned.pop(member, None)
        if r.error == E.none and e >= 0:
            self.epoch[member] = r.member_epoch
            if r.assignment is not None:
                self.owned[member] = r.assignment.get(T1, frozenset())
        return r

    # --- the classic clients' loop ------------------------------------------------------------
    def poll_classic(self, member: str) -> None:
        """What a classic client does: heartbeat; rejoin and sync when told to."""
        if self.heartbeat(member) == E.rebalance_in_progress:
            joined = self.join(member)
            assert joined.join.error == E.none, joined.results
            assert joined.join.leader_id == "" and joined.join.members == ()
            synced = self.sync(member)
            assert synced.sync.error in (E.none, E.rebalance_in_progress)

    def settle(self, classic: list[str], consumers: list[str], rounds: int = 8) -> None:
        for _ in range(rounds):
            for m in classic:
                self.poll_classic(m)
            for m in consumers:
                assert self.hb(m).error == E.none
            self.advance(100)

    def disjoint_and_complete(self) -> bool:
        owned = [p for parts in self.owned.values() for p in parts]
        return len(owned) == len(set(owned)) and sorted(owned) == list(range(PARTITIONS))


def _commit(m: Migration, member: str, generation: int, offset: int, version: int = 8) -> E:
    return commit_one(m.coord, m.now, member, generation, offset, version)


def _offset(coord: GroupCoordinator) -> int:
    tp = TopicPartition("t", 0)
    return coord.handle_fetch_offsets("g", False, [tp])[1][tp].offset


def _reloaded(m: Migration) -> GroupCoordinator:
    coord = GroupCoordinator(1, m.config, MemoryOffsetsLog(), now_ms=m.now)
    coord.startup()
    coord.load_partition(0, m.log.batches[0], now_ms=m.now)
    return coord


def test_upgrade_takes_the_classic_members_into_a_consumer_group() -> None:
    m = Migration()
    m.classic_group_of_two()
    assert _commit(m, m.a, 1, 42) == E.none
    assert m.hb("k", 0).error == E.none
    group = m.coord.consumer_groups.get("g")
    assert group is not None and set(group.members) == {m.a, m.b, "k"}
    for mid in (m.a, m.b):
        member = group.members[mid]
        assert member.classic is not None and member.classic.session_timeout_ms == 10_000
        assert member.subscribed_topic_names == ("t",)
    # the classic group's record is deleted, its offsets kept
    tombstones = [k for k, v in m.log.records() if v is None]
    assert group_metadata_key("g") in tombstones
    assert _offset(m.coord) == 42
    # the new member waits for partitions the classic members still own; they rejoin
    assert m.heartbeat(m.a) == E.rebalance_in_progress
    m.settle([m.a, m.b], ["k"])
    assert m.disjoint_and_complete()
    assert all(m.owned[x] for x in (m.a, m.b, "k"))
    assert group.state == "Stable"
    # a classic member commits with its generation (its member epoch), at any version
    assert _commit(m, m.a, m.generation[m.a], 43, version=2) == E.none
    assert _commit(m, m.a, m.generation[m.a] - 1, 44) == E.illegal_generation
    assert _offset(m.coord) == 43
    # a reload sees the consumer group with its classic members and the offsets
    coord = _reloaded(m)
    again = coord.consumer_groups.get("g")
    assert again is not None and again.snapshot() == group.snapshot()
    assert again.members[m.a].classic == group.members[m.a].classic
    assert _offset(coord) == 43
    assert coord.group("g") is None or coord.group("g").size == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("policy", ["downgrade", "disabled"])
def test_upgrade_refused_by_the_policy(policy: str) -> None:
    m = Migration(policy=policy)
    m.classic_group_of_two()
    r = m.hb("k", 0)
    assert r.error == E.group_id_not_found
    assert r.message == "Group g is not a consumer group."
    assert m.coord.consumer_groups.get("g") is None
    assert m.heartbeat(m.a) == E.none  # the classic group goes on
    assert m.coord.group("g").is_(GroupState.STABLE)  # type: ignore[union-attr]


def test_empty_groups_convert_whatever_the_policy() -> None:
    m = Migration(policy="disabled")
    m.classic_group_of_two()
    assert _commit(m, m.a, 1, 5) == E.none
    assert m.leave(m.a) == E.none and m.leave(m.b) == E.none
    m.advance(1_000)
    assert m.coord.group("g").is_(GroupState.EMPTY)  # type: ignore[union-attr]
    assert m.hb("k", 0).error == E.none  # an empty classic group: upgraded
    assert _offset(m.coord) == 5
    assert m.hb("k", -1).error == E.none
    joined = m.join("")
    m.wait_for(joined)
    assert joined.join.error == E.none  # an empty consumer group: downgraded
    assert m.coord.consumer_groups.get("g") is None
    assert _offset(m.coord) == 5


def test_no_upgrade_of_a_group_of_another_protocol_type() -> None:
    m = Migration()
    a = m.join("", protocol_type="connect")
    m.wait_for(a)
    assert a.join.error == E.none
    assert m.hb("k", 0).error == E.group_id_not_found


def test_a_malformed_embedded_protocol_refuses_the_upgrade() -> None:
    m = Migration()
    call = Call()
    m.coord.handle_join_group(
        "g", "", None, require_known_member_id=False, support_skipping_assignment=False,
        client_id="c", client_host="/h", rebalance_timeout_ms=10_000, session_timeout_ms=10_000,
        protocol_type="consumer", protocols=[("range", b"\x00")], callback=call, now_ms=m.now,
    )
    m.wait_for(call)
    assert call.join.error == E.none
    assert m.hb("k", 0).error == E.group_id_not_found
    assert m.coord.consumer_groups.get("g") is None


def test_downgrade_when_the_last_consumer_member_leaves() -> None:
    m = Migration()
    m.classic_group_of_two()
    m.hb("k", 0)
    m.settle([m.a, m.b], ["k"])
    assert _commit(m, m.b, m.generation[m.b], 7) == E.none
    epoch = m.coord.consumer_groups.get("g").group_epoch  # type: ignore[union-attr]
    assert m.hb("k", -1).error == E.none
    assert m.coord.consumer_groups.get("g") is None
    classic = m.coord.group("g")
    assert classic is not None and classic.is_(GroupState.PREPARING_REBALANCE)
    assert set(classic.all_members()) == {m.a, m.b}
    assert classic.protocol_type == "consumer" and classic.protocol_name == "range"
    assert classic.generation_id == epoch
    assert _offset(m.coord) == 7
    # the consumer group's records are tombstoned; a reload sees the classic group
    coord = _reloaded(m)
    assert coord.consumer_groups.get("g") is None
    loaded = coord.group("g")
    assert loaded is not None and set(loaded.all_members()) == {m.a, m.b}
    assert _offset(coord) == 7
    # the members rejoin the classic group: a new generation with a leader
    assert m.heartbeat(m.a) == E.rebalance_in_progress
    ja, jb = m.join(m.a), m.join(m.b)
    m.wait_for(ja)
    assert ja.join.error == jb.join.error == E.none
    assert ja.join.generation_id == epoch + 1
    assert {ja.join.leader_id} == {jb.join.leader_id} and ja.join.leader_id in (m.a, m.b)


def test_no_downgrade_when_the_policy_only_upgrades() -> None:
    m = Migration(policy="upgrade")
    m.classic_group_of_two()
    m.hb("k", 0)
    m.settle([m.a, m.b], ["k"])
    assert m.hb("k", -1).error == E.none
    group = m.coord.consumer_groups.get("g")
    assert group is not None and set(group.members) == {m.a, m.b}
    m.settle([m.a, m.b], [])
    assert m.disjoint_and_complete()


def test_classic_members_join_a_consumer_group_whatever_the_policy() -> None:
    # As Kafka: the policy rules conversions, not classic members inside a consumer group.
    m = Migration(policy="disabled")
    m.hb("k", 0)
    call = m.join("")
    assert call.join.error == E.none
    assert call.join.protocol_type == "consumer" and call.join.protocol_name == "range"
    mid = call.join.member_id
    m.settle([mid], ["k"])
    assert m.disjoint_and_complete() and m.owned[mid] and m.owned["k"]
    # the consumer member leaves: no downgrade under this policy
    m.hb("k", -1)
    assert m.coord.consumer_groups.get("g") is not None
    # the classic member's LeaveGroup empties the consumer group
    assert m.leave(mid) == E.none
    assert m.coord.consumer_groups.get("g").members == {}  # type: ignore[union-attr]


def test_classic_members_need_the_group_protocols() -> None:
    m = Migration()
    m.hb("k", 0)
    first = m.join("")
    assert first.join.error == E.none
    answers = []
    for protocol in ("roundrobin", "range"):
        call = Call()
        m.coord.handle_join_group(
            "g", "", None, require_known_member_id=True, support_skipping_assignment=False,
            client_id="c", client_host="/h", rebalance_timeout_ms=10_000,
            session_timeout_ms=10_000, protocol_type="consumer",
            protocols=[(protocol, subscription(["t"]))], callback=call, now_ms=m.now,
            topics=m.topics,
        )
        answers.append(call.join)
    call = Call()
    m.coord.handle_join_group(
        "g", "", None, require_known_member_id=True, support_skipping_assignment=False,
        client_id="c", client_host="/h", rebalance_timeout_ms=10_000, session_timeout_ms=1_000,
        protocol_type="consumer", protocols=[("range", subscription(["t"]))], callback=call,
        now_ms=m.now, topics=m.topics,
    )
    assert call.join.error == E.invalid_session_timeout
    assert answers[0].error == E.inconsistent_group_protocol
    assert answers[1].error == E.member_id_required and answers[1].member_id


def test_classic_member_checks_and_timeouts() -> None:
    m = Migration()
    m.hb("k", 0)
    mid = m.join("").join.member_id
    assert m.coord.handle_heartbeat("g", "nobody", None, 1, m.now) == E.unknown_member_id
    assert m.coord.handle_heartbeat("g", "k", None, m.epoch["k"], m.now) == E.unknown_member_id
    assert m.coord.handle_heartbeat("g", mid, None, 99, m.now) == E.illegal_generation
    call = Call()
    gen = m.generation[mid]
    m.coord.handle_sync_group("g", gen, mid, "consumer", "other", None, {}, call, m.now)
    assert call.sync.error == E.inconsistent_group_protocol
    # joined, heartbeating but never synced: fenced after its rebalance timeout (20 s)
    for _ in range(4):
        m.advance(4_500)
        m.heartbeat(mid)
        m.hb("k")
    assert mid in m.coord.consumer_groups.get("g").members  # type: ignore[union-attr]
    m.advance(2_500)
    assert mid not in m.coord.consumer_groups.get("g").members  # type: ignore[union-attr]
    # a synced member that stops heartbeating: fenced after its session timeout (10 s)
    mid = m.join("").join.member_id
    m.sync(mid)
    for _ in range(3):
        m.advance(4_000)
        m.hb("k")
    assert mid not in m.coord.consumer_groups.get("g").members  # type: ignore[union-attr]


def test_classic_member_metadata_record_round_trip() -> None:
    classic = cgr.ClassicMemberMetadata(45_000, (("range", b"\x00\x01"), ("roundrobin", b"")))
    v = cgr.MemberMetadataValue(None, "r", "c", "/h", ("t",), None, 300_000, None, classic)
    data = cgr.encode_member_metadata(v)
    assert cgr.decode_member_metadata(data) == v
    plain = cgr.MemberMetadataValue(None, None, "c", "/h", ("t",), None, 300_000, "uniform")
    assert cgr.decode_member_metadata(cgr.encode_member_metadata(plain)) == plain
    assert len(cgr.encode_member_metadata(plain)) < len(data)


def test_consumer_protocol_round_trips() -> None:
    s = cp.decode_subscription(subscription(["t", "u"], {"t": [2, 1]}))
    assert s.topics == ("t", "u") and s.owned == {"t": frozenset({1, 2})} and s.version == 1
    a = cp.encode_assignment({"t": [3, 1], "u": []}, 7)
    assert cp.protocol_version(a) == 3
    assert cp.decode_assignment(a) == {"t": frozenset({1, 3}), "u": frozenset()}
    assert cp.decode_assignment(b"") == {}
    with pytest.raises(ValueError):
        cp.decode_subscription(b"\x00\x00\x00\x00\x00\x05t")


def test_conversion_records_keep_their_types() -> None:
    m = Migration()
    m.classic_group_of_two()
    m.hb("k", 0)
    m.settle([m.a, m.b], ["k"])
    m.hb("k", -1)
    types = [decode_key(k) for k, _ in m.log.records() if k is not None]
    names = [type(t).__name__ for t in types]
    # classic metadata, its tombstone, the consumer group's records, then the classic one again
    assert names.count("GroupMetadataKey") >= 3
