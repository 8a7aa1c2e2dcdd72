"""KIP-848 consumer groups, pure parts: assignors (balance, stickiness), reconciliation (a
partition is never owned by two members, even as clients see it), epoch fencing, session and
rebalance timeouts, the Kafka 4 records and a reload from the log, offsets with member
epochs, and where classic and consumer groups meet."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

import pytest
from kio.schema.errors import ErrorCode

from tests.group.group_harness import SUB_T, T0, Call, MemoryOffsetsLog, commit_one
from wherry.common.topic_partition import TopicPartition
from wherry.group import consumer_group_records as cgr
from wherry.group.assignors import MemberSpec, range_assign, uniform_assign
from wherry.group.config import ConsumerGroupConfig, GroupCoordinatorConfig
from wherry.group.consumer_coordinator import HeartbeatRequest, HeartbeatResult, TopicsImage
from wherry.group.consumer_group import TopicMeta
from wherry.group.coordinator import GroupCoordinator
from wherry.group.group import OffsetAndMetadata, OffsetCommitter
from wherry.group.records import decode_key
from wherry.group.storage import ProducerIdAndEpoch

E = ErrorCode
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
Parts = Mapping[uuid.UUID, frozenset[int]]


def _count(a: Parts) -> int:
    return sum(len(p) for p in a.values())


def _flat(a: Parts) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


# --- assignors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("members", "partitions"), [(1, 6), (3, 6), (4, 6), (5, 17), (7, 3)])
def test_uniform_is_balanced_and_complete(members: int, partitions: int) -> None:
    specs = {f"m{i}": MemberSpec(frozenset({T1}), {}) for i in range(members)}
    out = uniform_assign(specs, {T1: partitions})
    counts = [_count(a) for a in out.values()]
    assert max(counts) - min(counts) <= 1
    owned = [tp for a in out.values() for tp in _flat(a)]
    assert sorted(owned) == [(T1, p) for p in range(partitions)]


def test_uniform_is_sticky_when_a_member_joins_or_leaves() -> None:
    specs = {f"m{i}": MemberSpec(frozenset({T1, T2}), {}) for i in range(3)}
    first = uniform_assign(specs, {T1: 6, T2: 6})
    # a fourth member: the three keep at least 3 of their 4 partitions each
    grown = {m: MemberSpec(s.subscribed, first[m]) for m, s in specs.items()}
    grown["m3"] = MemberSpec(frozenset({T1, T2}), {})
    second = uniform_assign(grown, {T1: 6, T2: 6})
    for m in specs:
        assert len(_flat(first[m]) & _flat(second[m])) >= 3
    assert sorted(_count(a) for a in second.values()) == [3, 3, 3, 3]
    # m1 leaves: the others keep everything they had
    shrunk = {m: MemberSpec(frozenset({T1, T2}), second[m]) for m in ("m0", "m2", "m3")}
    third = uniform_assign(shrunk, {T1: 6, T2: 6})
    for m in shrunk:
        assert _flat(second[m]) <= _flat(third[m])
    assert sorted(_count(a) for a in third.values()) == [4, 4, 4]


def test_uniform_respects_subscriptions() -> None:
    specs = {
        "a": MemberSpec(frozenset({T1}), {}),
        "b": MemberSpec(frozenset({T1, T2}), {}),
        "c": MemberSpec(frozenset({T2}), {}),
    }
    out = uniform_assign(specs, {T1: 4, T2: 4})
    assert T2 not in out["a"] and T1 not in out["c"]
    assert sorted(_count(a) for a in out.values()) in ([2, 3, 3], [3, 3, 2], [2, 2, 4])
    assert max(_count(a) for a in out.values()) - min(_count(a) for a in out.values()) <= 1


def test_range_gives_contiguous_ranges_first_members_more() -> None:
    specs = {m: MemberSpec(frozenset({T1}), {}) for m in ("b", "a", "c")}
    out = range_assign(specs, {T1: 7})
    assert out["a"][T1] == frozenset({0, 1, 2})
    assert out["b"][T1] == frozenset({3, 4})
    assert out["c"][T1] == frozenset({5, 6})


# --- a driver ---------------------------------------------------------------------------------


class Driver:
    def __init__(self, *, partitions: int = 6, **cfg: object) -> None:
        self.now = T0
        self.log = MemoryOffsetsLog()
        self.config = GroupCoordinatorConfig(
            offsets_topic_num_partitions=1, consumer=ConsumerGroupConfig(**cfg)  # type: ignore[arg-type]
        )
        self.coord = GroupCoordinator(0, self.config, self.log, now_ms=self.now)
        self.coord.startup()
        self.coord.load_partition(0, [], now_ms=self.now)
        self.topics = TopicsImage({"t": TopicMeta(T1, "t", partitions)})
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, dict[uuid.UUID, frozenset[int]]] = {}

    def advance(self, ms: int) -> None:
        self.now += ms
        self.coord.advance_clock(self.now)

    def hb(self, member: str, epoch: int | None = None, **kw: object) -> HeartbeatResult:
        """A heartbeat as a client sends it; the client then owns what it was told."""
        e = self.epoch.get(member, 0) if epoch is None else epoch
        fields: dict[str, object] = {"owned": self.owned.get(member, {})}
        if e == 0:
            fields.update(rebalance_timeout_ms=30_000, subscribed_topic_names=("t",))
        fields.update(kw)
        out: list[HeartbeatResult] = []
        req = HeartbeatRequest("g", member, e, **fields)  # type: ignore[arg-type]
        self.coord.handle_consumer_group_heartbeat(req, self.topics, out.append, self.now)
        assert len(out) == 1
        r = out[0]
        if r.error == E.none and e >= 0:
            self.epoch[member] = r.member_epoch
            if r.assignment is not None:
                self.owned[member] = dict(r.assignment)
        return r

    def client_views_disjoint(self) -> bool:
        seen: set[tuple[uuid.UUID, int]] = set()
        for parts in self.owned.values():
            f = _flat(parts)
            if f & seen:
                return False
            seen |= f
        return True


def test_reconciliation_never_gives_a_partition_to_two_members() -> None:
    rng = random.Random(848)
    d = Driver(partitions=12)
    active: list[str] = []
    for step in range(400):
        roll = rng.random()
        if roll < 0.08 and len(active) < 6:
            m = f"m{step}"
            active.append(m)
            d.hb(m, 0)
        elif roll < 0.12 and len(active) > 1:
            m = active.pop(rng.randrange(len(active)))
            assert d.hb(m, -1).error == E.none
            d.owned.pop(m, None)
        elif active:
            r = d.hb(rng.choice(active))
            assert r.error == E.none, r
        assert d.client_views_disjoint(), step
        group = d.coord.consumer_groups.get("g")
        if group is None:
            continue
        # what was written (partial writes included) is the whole group, record for record
        assert group.persisted == group.records(), step
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for m in group.members.values():
            for tp in _flat(m.assigned) | _flat(m.pending_revocation):
                assert tp not in owners, (tp, owners[tp], m.member_id)
                owners[tp] = m.member_id
    # everyone heartbeats until the group is stable: the assignment is the balanced target
    for _ in range(6):
        for m in active:
            d.hb(m)
    group = d.coord.consumer_groups.get("g")
    assert group is not None and group.state == "Stable"
    counts = sorted(_count(d.owned[m]) for m in active)
    assert counts[-1] - counts[0] <= 1 and sum(counts) == 12


def test_revocation_comes_before_assignment() -> None:
    d = Driver()
    assert _count(d.hb("a", 0).assignment or {}) == 6
    r = d.hb("b", 0)
    assert r.error == E.none and _count(r.assignment or {}) == 0  # a still owns everything
    ra = d.hb("a")  # a is told to keep 3: it revokes 3, keeping its epoch
    assert _count(ra.assignment or {}) == 3 and ra.member_epoch == 1
    assert _count(d.hb("b").assignment or {}) == 0  # a has not confirmed the revocation
    ra = d.hb("a")  # owns 3 now: a moves to epoch 2
    assert ra.member_epoch == 2
    rb = d.hb("b")
    assert _count(rb.assignment or {}) == 3 and rb.member_epoch == 2
    assert d.client_views_disjoint()


def test_member_epoch_fencing() -> None:
    d = Driver()
    d.hb("a", 0)
    d.hb("b", 0)
    d.hb("a")
    d.hb("a")
    assert d.epoch["a"] == 2
    assert d.hb("a", 3).error == E.fenced_member_epoch  # ahead
    assert d.hb("a", 0 + 1, owned={T1: frozenset({0, 1, 2, 3, 4, 5})}).error == (
        E.fenced_member_epoch  # behind and owns more than it is assigned
    )
    # one epoch behind owning a subset: its last answer was lost, it is let through
    assert d.hb("a", 1, owned=d.owned["a"]).error == E.none
    assert d.hb("nobody", 3).error == E.unknown_member_id
    assert d.hb("a", -1).error == E.none
    assert d.hb("a", 2).error == E.unknown_member_id
    r = d.hb("x", 0, rebalance_timeout_ms=-1)
    assert r.error == E.invalid_request
    assert d.hb("x", 0, server_assignor="sticky").error == E.unsupported_assignor
    assert d.hb("x", 0, subscribed_topic_regex="(").error == E.invalid_regular_expression


def test_session_and_rebalance_timeouts_fence_members() -> None:
    d = Driver(session_timeout_ms=10_000)
    d.hb("a", 0, rebalance_timeout_ms=3_000)
    d.hb("b", 0)
    d.hb("a")  # a must revoke 3 partitions within 3 s
    group = d.coord.consumer_groups.get("g")
    assert group is not None
    before = group.group_epoch
    d.advance(2_000)
    d.hb("b")
    assert "a" in group.members
    d.advance(1_500)  # a never confirmed the revocation
    assert "a" not in group.members and group.group_epoch == before + 1
    assert d.hb("a", d.epoch["a"]).error == E.unknown_member_id
    assert _count(d.hb("b").assignment or {}) == 6
    d.advance(10_001)  # b stops heartbeating
    assert group.members == {} and group.state == "Empty"


def test_regex_subscription_picks_up_new_topics_and_partitions() -> None:
    d = Driver()
    d.topics = TopicsImage({"t": TopicMeta(T1, "t", 2), "other": TopicMeta(T2, "other", 2)})
    r = d.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex="t|t-.*")
    assert set((r.assignment or {}).keys()) == {T1}
    t3 = uuid.UUID(int=3)
    d.topics = TopicsImage(
        {"t": TopicMeta(T1, "t", 4), "other": TopicMeta(T2, "other", 2),
         "t-new": TopicMeta(t3, "t-new", 1)}
    )
    r = d.hb("a")
    assert r.assignment == {T1: frozenset(range(4)), t3: frozenset({0})}


# --- records and reload ------------------------------------------------------------------------


def test_record_values_round_trip() -> None:
    md = cgr.MemberMetadataValue("i", None, "c", "/h", ("a", "b"), "x.*", 300_000, "range")
    assert cgr.decode_member_metadata(cgr.encode_member_metadata(md)) == md
    cur = cgr.CurrentAssignmentValue(5, 4, 1, {T1: frozenset({1, 2})}, {T2: frozenset({0})})
    assert cgr.decode_current_assignment(cgr.encode_current_assignment(cur)) == cur
    assert cgr.decode_target_member(cgr.encode_target_member({T1: frozenset({3})})) == {
        T1: frozenset({3})}
    assert cgr.decode_epoch_value(cgr.encode_epoch_value(7)) == 7
    topics = (cgr.TopicMetadataValue(T1, "t", 6),)
    assert cgr.decode_partition_metadata(cgr.encode_partition_metadata(3, topics)) == (3, topics)
    # Kafka's layout: type 3 key = int16 3 + string; values start with version 0
    assert cgr.group_metadata_key("g") == b"\x00\x03\x00\x01g"
    assert cgr.encode_epoch_value(1) == b"\x00\x00\x00\x00\x00\x01\x00"
    with pytest.raises(cgr.RecordFormatError):
        cgr.decode_member_metadata(b"\x00\x00\x05")


def test_a_new_coordinator_rebuilds_the_group_from_the_log() -> None:
    d = Driver()
    d.hb("a", 0)
    d.hb("b", 0)
    d.hb("a")
    d.hb("a")
    d.hb("c", 0, instance_id="static-c")
    d.hb("b")
    group = d.coord.consumer_groups.get("g")
    assert group is not None
    types = {decode_key(k).version for k, _ in d.log.records(0) if k}  # type: ignore[union-attr]
    assert {3, 4, 5, 6, 7, 8} <= types
    coord = GroupCoordinator(1, d.config, MemoryOffsetsLog(), now_ms=d.now)
    coord.startup()
    assert coord.begin_loading(0, epoch=3)
    assert coord.load_partition(0, d.log.batches[0], now_ms=d.now, epoch=3)
    rebuilt = coord.consumer_groups.get("g")
    assert rebuilt is not None and rebuilt.snapshot() == group.snapshot()
    # after b leaves and the group is deleted, the log holds no record of it
    for m in ("a", "b", "c"):
        d.hb(m, -1)
    assert d.coord.handle_delete_groups(["g"], d.now) == {"g": E.none}
    coord = GroupCoordinator(2, d.config, MemoryOffsetsLog(), now_ms=d.now)
    coord.startup()
    coord.load_partition(0, d.log.batches[0], now_ms=d.now)
    assert coord.consumer_groups.get("g") is None


# --- offsets and classic groups ----------------------------------------------------------------


def _commit(d: Driver, member: str, epoch: int, offset: int, version: int = 9) -> ErrorCode:
    return commit_one(d.coord, d.now, member, epoch, offset, version)


def test_offset_commit_and_fetch_check_member_epochs() -> None:
    d = Driver()
    d.hb("a", 0)
    assert _commit(d, "a", 1, 10) == E.none
    assert _commit(d, "a", 0, 11) == E.stale_member_epoch
    assert _commit(d, "zz", 1, 11) == E.unknown_member_id
    assert _commit(d, "a", 1, 11, version=8) == E.unsupported_version
    tp = TopicPartition("t", 0)
    err, got = d.coord.handle_fetch_offsets("g", False, [tp], "a", 1)
    assert err == E.none and got[tp].offset == 10
    assert d.coord.handle_fetch_offsets("g", False, [tp], "a", 7)[0] == E.stale_member_epoch
    assert d.coord.handle_fetch_offsets("g", False, [tp])[0] == E.none  # admin
    # offsets survive a reload next to the group
    coord = GroupCoordinator(1, d.config, MemoryOffsetsLog(), now_ms=d.now)
    coord.startup()
    coord.load_partition(0, d.log.batches[0], now_ms=d.now)
    assert coord.handle_fetch_offsets("g", False, [tp])[1][tp].offset == 10
    assert coord.consumer_groups.get("g") is not None


def _classic_join(d: Driver, group: str) -> ErrorCode:
    call = Call()
    d.coord.handle_join_group(
        group, "", None, require_known_member_id=False, support_skipping_assignment=False,
        client_id="c", client_host="/h", rebalance_timeout_ms=10_000, session_timeout_ms=10_000,
        protocol_type="consumer", protocols=[("range", SUB_T)], callback=call, now_ms=d.now,
    )
    return call.join.error if call.done else E.none


def test_classic_and_consumer_groups_meet_under_the_migration_policy() -> None:
    d = Driver(migration_policy="disabled")
    d.hb("a", 0)
    # a classic member joins a consumer group with members as one of them (any policy);
    # without a member id it is asked to come back with one
    assert _classic_join(d, "g") == E.none
    group = d.coord.consumer_groups.get("g")
    assert group is not None and len(group.members) == 2
    # an empty consumer group becomes classic for a classic member, whatever the policy
    d1 = Driver(migration_policy="disabled")
    d1.hb("a", 0)
    d1.hb("a", -1)
    assert _classic_join(d1, "g") == E.none
    assert d1.coord.consumer_groups.get("g") is None
    d2 = Driver()
    d2.hb("a", 0)
    d2.hb("a", -1)
    # an empty consumer group becomes classic for a classic member (downgrade)
    assert _classic_join(d2, "g") == E.none
    assert d2.coord.consumer_groups.get("g") is None
    d2.advance(1)
    listed = d2.coord.handle_list_groups(types=["consumer"])[1]
    assert listed == []
    # and a classic group with members refuses a KIP-848 member when upgrades are disabled
    d3 = Driver(migration_policy="disabled")
    assert _classic_join(d3, "g") == E.none
    d3.advance(1)
    assert d3.hb("b", 0).error == E.group_id_not_found


def test_an_offsets_only_group_takes_a_consumer_member_whatever_the_policy() -> None:
    d = Driver(migration_policy="disabled")
    call = Call()
    tp = TopicPartition("t", 0)
    d.coord.handle_commit_offsets(
        OffsetCommitter("g"), {tp: OffsetAndMetadata(3, -1, "", d.now, None)}, call, d.now
    )
    # offsets only (generation 0): nothing to convert, the KIP-848 member may join
    assert d.hb("a", 0).error == E.none
    assert d.coord.handle_fetch_offsets("g", False, [tp])[1][tp].offset == 3
    listed = d.coord.handle_list_groups()[1]
    assert [(g.group_id, g.group_type) for g in listed] == [("g", "consumer")]
    summary = d.coord.handle_describe_group("g", 6)
    assert summary[0] == E.group_id_not_found


def test_offset_delete_keeps_subscribed_topics_of_an_active_group() -> None:
    d = Driver()
    d.hb("a", 0)
    assert _commit(d, "a", 1, 10) == E.none
    tp, other = TopicPartition("t", 0), TopicPartition("gone", 0)
    err, out = d.coord.handle_delete_offsets("g", [tp, other], d.now)
    assert err == E.none
    assert out == {tp: E.group_subscribed_to_topic, other: E.none}
    d.hb("a", -1)
    assert d.coord.handle_delete_offsets("g", [tp], d.now)[1] == {tp: E.none}


def test_static_member_leaves_for_now_and_comes_back_under_a_new_id() -> None:
    d = Driver()
    d.hb("a", 0, instance_id="i-a")
    d.hb("b", 0)
    for _ in range(3):
        d.hb("a")
        d.hb("b")
    group = d.coord.consumer_groups.get("g")
    assert group is not None and group.state == "Stable"
    epoch, kept = group.group_epoch, dict(d.owned["a"])
    assert d.hb("a", -2, instance_id="i-a").member_epoch == -2
    assert group.group_epoch == epoch  # no rebalance
    assert d.hb("a3", 0, instance_id="i-a").assignment == kept  # the same assignment back
    assert "a" not in group.members and group.group_epoch == epoch
    assert d.epoch["a3"] == d.epoch["b"]
    # while a static member is active, its instance id cannot be taken
    assert d.hb("a4", 0, instance_id="i-a").error == E.unreleased_instance_id


def test_transactional_offsets_of_a_consumer_group_member() -> None:
    d = Driver()
    d.hb("a", 0)
    tp = TopicPartition("t", 0)

    def txn_commit(member: str, epoch: int) -> ErrorCode:
        call = Call()
        d.coord.handle_txn_commit_offsets(
            OffsetCommitter("g", member, None, epoch), ProducerIdAndEpoch(7, 0),
            {tp: OffsetAndMetadata(4, -1, "", d.now, None)}, call, d.now,
        )
        return call.commit[tp]

    assert txn_commit("a", 0) == E.stale_member_epoch
    assert txn_commit("b", 1) == E.unknown_member_id
    assert txn_commit("a", 1) == E.none
    assert txn_commit("", -1) == E.none  # a producer outside the group's management
    d.coord.on_transaction_completed(7, [0], is_commit=True)
    assert d.coord.handle_fetch_offsets("g", True, [tp])[1][tp].offset == 4


def test_broker_configs_of_consumer_groups() -> None:
    from wherry.server.config import BrokerConfig, BrokerConfigError
    from wherry.server.groups import group_coordinator_config

    c = BrokerConfig.from_props({
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,"
                                    "uniform",
        "group.consumer.migration.policy": "DISABLED",
        "group.consumer.session.timeout.ms": "12000",
        "group.consumer.heartbeat.interval.ms": "700",
    })
    cc = group_coordinator_config(c).consumer
    assert (cc.assignors, cc.migration_policy) == (("range", "uniform"), "disabled")
    assert (cc.session_timeout_ms, cc.heartbeat_interval_ms) == (12_000, 700)
    with pytest.raises(BrokerConfigError, match=r"group\.consumer\.migration\.policy"):
        BrokerConfig.from_props({"group.consumer.migration.policy": "sideways"})
    with pytest.raises(BrokerConfigError, match=r"group\.consumer\.assignors"):
        BrokerConfig.from_props({"group.consumer.assignors": "sticky"})
    with pytest.raises(BrokerConfigError, match=r"group\.consumer\.session\.timeout\.ms"):
        BrokerConfig.from_props({"group.consumer.session.timeout.ms": "0"})


def test_a_write_after_a_failed_one_rewrites_the_whole_group() -> None:
    """A failed write leaves the log without the group's latest records (new member, new
    targets of the others). The next write must rewrite all of them, not only the records of
    the member whose heartbeat writes it: a reload after that acknowledged write rebuilds
    the group the coordinator had then (the simulation's GroupLedger found this)."""
    d = Driver()
    for m in ("a", "b", "a", "b", "a", "b"):
        d.hb(m, 0 if m not in d.epoch else None)
    d.log.fail_with = E.not_enough_replicas  # c's join: a new epoch and targets, not written
    assert d.hb("c", 0).error != E.none
    d.log.fail_with = None
    assert d.hb("a").error == E.none  # acknowledged
    group = d.coord.consumer_groups.get("g")
    assert group is not None and set(group.members) == {"a", "b", "c"}
    coord = GroupCoordinator(1, d.config, MemoryOffsetsLog(), now_ms=d.now)
    coord.startup()
    assert coord.begin_loading(0, epoch=3)
    assert coord.load_partition(0, d.log.batches[0], now_ms=d.now, epoch=3)
    rebuilt = coord.consumer_groups.get("g")
    assert rebuilt is not None and rebuilt.snapshot() == group.snapshot()
