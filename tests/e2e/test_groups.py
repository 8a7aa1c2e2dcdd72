"""Consumer groups against a real broker: three clients, rebalances, static members, restarts,
committed offsets and bad input."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import poll_messages
from tests.kafka_wire import call, connect
from wherry.group.records import OFFSETS_TOPIC, encode_subscription

OVERRIDES = [
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=10",
    "log.retention.check.interval.ms=1000",
]
SESSION_MS = 6000

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("groups"), overrides=OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def new_topic(bs: str, partitions: int) -> str:
    name = f"g-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(15)
    return name


def produce(bs: str, topic: str, partitions: int, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(20) == 0


def consumer(bs: str, group: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
        "auto.commit.interval.ms": 200,
        **extra,
    }
    return Consumer(conf)


def subscribed(
    bs: str, partitions: int, records: int, group_prefix: str, **extra: Any
) -> tuple[str, str, Consumer]:
    """A new topic holding `records` records (values 0, 1, ... round-robin over its
    `partitions`), a new group, and a `consumer` of that group subscribed to the topic."""
    topic = new_topic(bs, partitions)
    produce(bs, topic, partitions, records)
    group = f"{group_prefix}-{uuid.uuid4().hex[:6]}"
    c = consumer(bs, group, **extra)
    c.subscribe([topic])
    return topic, group, c


def drain(c: Consumer, want: int, timeout_s: float = 20.0) -> list[int]:
    eof = {KafkaError._PARTITION_EOF}
    return [int(m.value()) for m in poll_messages(c, want, timeout_s, skip_errors=eof, poll_s=0.2)]


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = consumer(bs, group)
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


# --- the three clients, default settings, subscribe + auto-commit --------------------------------


def test_confluent_kafka_group_consumes_and_commits(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    topic, group, c = subscribed(bs, 3, 90, "cg")
    got = drain(c, 90)
    c.close()  # commits the final positions
    assert sorted(got) == list(range(90))
    assert committed(bs, group, topic, 3) == {0: 30, 1: 30, 2: 30}


def test_kafka_python_group_consumes_and_commits(gbroker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    bs = gbroker.bootstrap
    topic = new_topic(bs, 2)
    produce(bs, topic, 2, 40)
    group = f"kp-{uuid.uuid4().hex[:6]}"
    c = KafkaConsumer(
        topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
        auto_commit_interval_ms=200,
    )
    got: list[int] = []
    deadline = time.monotonic() + 30
    while len(got) < 40 and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=300).values():
            got.extend(int(r.value) for r in records)
    c.close()  # auto-commit on close
    assert sorted(got) == list(range(40))
    assert committed(bs, group, topic, 2) == {0: 20, 1: 20}


def test_aiokafka_group_consumes_and_commits(gbroker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    bs = gbroker.bootstrap
    topic = new_topic(bs, 2)
    produce(bs, topic, 2, 40)
    group = f"ak-{uuid.uuid4().hex[:6]}"

    async def run() -> list[int]:
        c = AIOKafkaConsumer(
            topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
            auto_commit_interval_ms=200,
        )
        await c.start()
        got: list[int] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 40 and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=300)).values():
                    got.extend(int(r.value) for r in records)
        finally:
            await asyncio.wait_for(c.stop(), 15)  # commits
        return got

    assert sorted(asyncio.run(run())) == list(range(40))
    assert committed(bs, group, topic, 2) == {0: 20, 1: 20}


# --- rebalancing ------------------------------------------------------------------------------


class Member(threading.Thread):
    """A confluent consumer polling in its own thread, recording what it is assigned."""

    def __init__(self, bs: str, group: str, topic: str, **extra: Any) -> None:
        super().__init__(daemon=True)
        self.c = consumer(bs, group, **extra)
        self.topic = topic
        self.assigned: set[int] = set()
        self.revocations = 0
        self.values: list[int] = []
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()

    def on_revoke(self, c: Consumer, parts: list[TopicPartition]) -> None:
        with self.lock:
            self.revocations += 1

    def run(self) -> None:
        self.c.subscribe([self.topic], on_revoke=self.on_revoke)
        while not self.stop_flag.is_set():
            m = self.c.poll(0.1)
            if m is not None and not m.error():
                self.values.append(int(m.value()))
            assigned = {tp.partition for tp in self.c.assignment()}
            with self.lock:
                self.assigned = assigned
        self.c.close()

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(15)
        assert not self.is_alive()


def assignments(members: list[Member]) -> list[set[int]]:
    out = []
    for m in members:
        with m.lock:
            out.append(set(m.assigned))
    return out


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_split_six_partitions_then_one_leaves(
    gbroker: BrokerProcess, strategy: str
) -> None:
    """Eager and incremental (KIP-429) rebalancing: the client leader assigns, as in Kafka."""
    bs = gbroker.bootstrap
    topic = new_topic(bs, 6)
    group = f"split-{uuid.uuid4().hex[:6]}"
    members = [
        Member(bs, group, topic, **{"partition.assignment.strategy": strategy})
        for _ in range(3)
    ]
    for m in members:
        m.start()
    try:
        def split_evenly() -> bool:
            a = assignments(members)
            return [len(x) for x in a] == [2, 2, 2] and set().union(*a) == set(range(6))

        assert wait_until(split_evenly, timeout_s=30), assignments(members)
        produce(bs, topic, 6, 60)
        assert wait_until(lambda: sum(len(m.values) for m in members) == 60, timeout_s=20)
        # One member leaves (LeaveGroup on close); the other two take over its partitions.
        members[2].finish()
        rest = members[:2]

        def taken_over() -> bool:
            a = assignments(rest)
            return [len(x) for x in a] == [3, 3] and set().union(*a) == set(range(6))

        assert wait_until(taken_over, timeout_s=30), assignments(rest)
        produce(bs, topic, 6, 60, start=60)
        assert wait_until(lambda: sum(len(m.values) for m in members) >= 120, timeout_s=20)
        seen = sorted(v for m in members for v in m.values)
        assert set(seen) == set(range(120))
    finally:
        for m in members:
            m.stop_flag.set()
        for m in members:
            m.join(15)


def test_restarted_group_resumes_exactly_after_last_commit(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    topic, group, first = subscribed(bs, 3, 60, "resume", **{"enable.auto.commit": False})
    done: list[int] = []
    deadline = time.monotonic() + 20
    while len(done) < 25 and time.monotonic() < deadline:
        m = first.poll(0.2)
        if m is None or m.error():
            continue
        done.append(int(m.value()))
        # Processed: commit exactly this record's successor, synchronously.
        first.commit(message=m, asynchronous=False)
    first.close()
    assert len(done) == 25
    second = consumer(bs, group)
    second.subscribe([topic])
    rest = drain(second, 60 - len(done))
    second.close()
    assert not set(done) & set(rest), "re-delivered after the commit"
    assert sorted(done + rest) == list(range(60)), "skipped"


def test_static_member_rejoins_without_rebalance(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    topic = new_topic(bs, 4)
    group = f"static-{uuid.uuid4().hex[:6]}"
    a = Member(bs, group, topic, **{"group.instance.id": "inst-a"})
    b = Member(bs, group, topic, **{"group.instance.id": "inst-b"})
    a.start()
    b.start()
    try:
        assert wait_until(lambda: [len(x) for x in assignments([a, b])] == [2, 2], timeout_s=30)
        before_b = set(b.assigned)
        rebalances = gbroker.log_text().count(f"Preparing to rebalance group {group} ")
        revocations = b.revocations
        a.finish()  # a static member does not leave the group on close
        a2 = Member(bs, group, topic, **{"group.instance.id": "inst-a"})
        a2.start()
        try:
            assert wait_until(lambda: len(assignments([a2])[0]) == 2, timeout_s=SESSION_MS / 1000)
            time.sleep(1.0)  # a few heartbeats: still no rebalance
            assert gbroker.log_text().count(f"Preparing to rebalance group {group} ") == rebalances
            assert b.revocations == revocations and b.assigned == before_b
            assert "will not trigger rebalance" in gbroker.log_text()
        finally:
            a2.finish()
    finally:
        a.stop_flag.set()
        b.finish()


# --- wire level: error codes ----------------------------------------------------------------


def find_coordinator(bs: str, group: str, timeout_s: float = 15.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        r = call(bs, 10, 3, {"key": group, "key_type": 0})
        if r.error_code == ErrorCode.none:
            return f"{r.host}:{r.port}"
        assert r.error_code == ErrorCode.coordinator_not_available, r
        assert time.monotonic() < deadline
        time.sleep(0.1)


def retry(fn: Callable[[], Any], ok: Callable[[Any], bool], timeout_s: float = 15.0) -> Any:
    """Repeat a request while the coordinator is still loading."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = fn()
        if ok(r) or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def join_static(
    bs: str, group: str, topic: str, instance: str, rebalance_ms: int = 10_000
) -> tuple[str, int]:
    body = {
        "group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": rebalance_ms,
        "member_id": "", "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": encode_subscription([topic])}],
    }
    r = retry(lambda: call(bs, 11, 5, body),
              lambda r: r.error_code != ErrorCode.coordinator_load_in_progress)
    assert r.error_code == ErrorCode.none, r
    return r.member_id, r.generation_id


def test_wire_errors_leave_group_state_intact(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    topic = new_topic(bs, 1)
    group = f"wire-{uuid.uuid4().hex[:6]}"
    coord = find_coordinator(bs, group)
    assert coord == bs
    member, gen = join_static(bs, group, topic, "w-1")
    assert gen == 1
    s = call(bs, 14, 5, {"group_id": group, "generation_id": gen, "member_id": member,
                         "group_instance_id": "w-1", "protocol_type": "consumer",
                         "protocol_name": "range",
                         "assignments": [{"member_id": member, "assignment": b"A"}]})
    assert (s.error_code, s.assignment) == (ErrorCode.none, b"A")

    def commit(member_id: str, generation: int, metadata: str = "") -> ErrorCode:
        r = call(bs, 8, 8, {
            "group_id": group, "generation_id_or_member_epoch": generation,
            "member_id": member_id, "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": metadata}]}]})
        return ErrorCode(r.topics[0].partitions[0].error_code)

    assert commit("stranger", gen) == ErrorCode.unknown_member_id
    assert commit(member, gen - 1) == ErrorCode.illegal_generation
    assert commit("", -1) == ErrorCode.unknown_member_id  # the group has members
    assert commit(member, gen, "m" * 4097) == ErrorCode.offset_metadata_too_large
    assert commit(member, gen, "fine") == ErrorCode.none

    unknown = {"group_id": f"nope-{uuid.uuid4().hex}", "generation_id": 1, "member_id": "m",
               "group_instance_id": None}
    # (While a partition loads, heartbeats are answered NONE blindly, as in Kafka.)
    hb = retry(lambda: call(bs, 12, 4, unknown), lambda r: r.error_code != ErrorCode.none)
    assert hb.error_code == ErrorCode.unknown_member_id
    hb = call(bs, 12, 4, {"group_id": group, "generation_id": gen + 5, "member_id": member,
                          "group_instance_id": "w-1"})
    assert hb.error_code == ErrorCode.illegal_generation
    hb = call(bs, 12, 4, {"group_id": group, "generation_id": gen, "member_id": "other",
                          "group_instance_id": "w-1"})
    assert hb.error_code == ErrorCode.fenced_instance_id
    j = call(bs, 11, 5, {"group_id": group, "session_timeout": 10, "rebalance_timeout": 1000,
                         "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                         "protocols": [{"name": "range", "metadata": b""}]})
    assert j.error_code == ErrorCode.invalid_session_timeout
    j = call(bs, 11, 5, {"group_id": group, "session_timeout": SESSION_MS,
                         "rebalance_timeout": 1000, "member_id": "", "group_instance_id": None,
                         "protocol_type": "connect", "protocols": [{"name": "x", "metadata": b""}]})
    assert j.error_code == ErrorCode.inconsistent_group_protocol

    # Nothing above changed the group: still Stable, generation 1, the offset committed once.
    hb = call(bs, 12, 4, {"group_id": group, "generation_id": gen, "member_id": member,
                          "group_instance_id": "w-1"})
    assert hb.error_code == ErrorCode.none
    d = call(bs, 15, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
    assert (d.group_state, d.protocol_data, len(d.members)) == ("Stable", "range", 1)
    assert d.members[0].group_instance_id == "w-1" and d.members[0].member_assignment == b"A"
    f = call(bs, 9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": True})
    part = f.groups[0].topics[0].partitions[0]
    assert (part.committed_offset, part.metadata) == (5, "fine")

    # The group only leaves when asked; then it can be deleted.
    lv = call(bs, 13, 4, {"group_id": group, "members": [
        {"member_id": "", "group_instance_id": "w-1"}]})
    assert lv.error_code == ErrorCode.none and lv.members[0].error_code == ErrorCode.none
    deleted = call(bs, 42, 2, {"groups_names": [group, "no-such-group"]})
    assert [r.error_code for r in deleted.results] == [
        ErrorCode.none, ErrorCode.group_id_not_found]


def test_find_coordinator_batched_and_transactions(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    find_coordinator(bs, "warm-up")
    r = call(bs, 10, 4, {"key_type": 0, "coordinator_keys": ["a", "b", "c"]})
    assert [c.key for c in r.coordinators] == ["a", "b", "c"]
    assert all(c.error_code == ErrorCode.none and c.port == gbroker.port for c in r.coordinators)
    # A transactional id: the leader of its __transaction_state partition, once created.
    assert wait_until(lambda: call(bs, 10, 4, {"key_type": 1, "coordinator_keys": ["txn"]})
                      .coordinators[0].error_code == ErrorCode.none, timeout_s=20)
    t = call(bs, 10, 4, {"key_type": 1, "coordinator_keys": ["txn"]})
    assert t.coordinators[0].port == gbroker.port
    md = call(bs, 3, 12, {"topics": [{"name": OFFSETS_TOPIC, "topic_id": None}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    assert md.topics[0].is_internal and len(md.topics[0].partitions) == 10


def test_clients_cannot_produce_to_the_offsets_topic(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    find_coordinator(bs, "warm-up")
    from wherry.protocol.records import build_batch

    r = call(bs, 0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": OFFSETS_TOPIC, "partition_data": [{"index": 0, "records": build_batch(
            [(b"\x00\x02\x00\x01g", b"garbage")])}]}]})
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.invalid_topic_exception


def test_admin_client_lists_describes_and_deletes_groups(gbroker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    bs = gbroker.bootstrap
    topic, group, c = subscribed(bs, 2, 10, "adm")
    assert len(drain(c, 10)) == 10
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert group in {g.group_id for g in listed.valid}
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        assert str(desc.state).endswith("STABLE") and len(desc.members) == 1
        assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}
        refused = admin.delete_consumer_groups([group], request_timeout=10)[group]
        with pytest.raises(Exception, match=r"NON_EMPTY_GROUP|not empty"):
            refused.result()
        c.close()
        offs = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=10)[group].result()
        assert {tp.partition: tp.offset for tp in offs.topic_partitions} == {0: 5, 1: 5}
        admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert committed(bs, group, topic, 2) == {0: -1001, 1: -1001}
    finally:
        del admin


def test_sockets_survive_a_parked_join(gbroker: BrokerProcess) -> None:
    """A JoinGroup parked in the purgatory answers once the rebalance completes."""
    bs = gbroker.bootstrap
    topic = new_topic(bs, 2)
    group = f"park-{uuid.uuid4().hex[:6]}"
    find_coordinator(bs, group)
    _, gen = join_static(bs, group, topic, "p-1", rebalance_ms=1500)
    s = connect(bs)
    try:
        body = {"group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": 1500,
                "member_id": "", "group_instance_id": "p-2", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": encode_subscription([topic])}]}
        started = time.monotonic()
        r = call(s, 11, 5, body)  # waits for p-1 to rejoin, which it never does
        assert r.error_code == ErrorCode.none and r.generation_id == gen + 1
        assert time.monotonic() - started >= 1.4  # the rebalance timeout
    finally:
        s.close()


def test_every_advertised_version_round_trips(gbroker: BrokerProcess) -> None:
    """One group's whole life per JoinGroup version, touring every version of every group API."""
    from wherry.server.handlers import SUPPORTED_VERSIONS

    assert SUPPORTED_VERSIONS[11] == (0, 9) and SUPPORTED_VERSIONS[8] == (2, 10)
    bs = gbroker.bootstrap
    topic = new_topic(bs, 2)
    md = call(bs, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    topic_id = md.topics[0].topic_id
    find_coordinator(bs, "x")
    for fv in range(0, 7):
        key = {"key": "x", "key_type": 0, "coordinator_keys": ["x"]}
        r = call(bs, 10, fv, key)
        assert (r.coordinators[0].error_code if fv >= 4 else r.error_code) == ErrorCode.none
    for jv in range(0, 10):
        group = f"v{jv}-{uuid.uuid4().hex[:6]}"
        join = {"group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": 5000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": encode_subscription([topic])}],
                "reason": "test"}
        r = retry(lambda jv=jv, join=join: call(bs, 11, jv, join),
                  lambda r: r.error_code != ErrorCode.coordinator_load_in_progress)
        if jv >= 4:
            assert r.error_code == ErrorCode.member_id_required, (jv, r)
            r = call(bs, 11, jv, {**join, "member_id": r.member_id})
        assert r.error_code == ErrorCode.none, (jv, r)
        assert (r.generation_id, r.leader, r.protocol_name) == (1, r.member_id, "range")
        member, gen = r.member_id, r.generation_id
        ident = {"group_id": group, "generation_id": gen, "member_id": member,
                 "group_instance_id": None}
        sv, hv, cv, ov = jv % 6, jv % 5, 2 + jv % 9, 1 + jv % 10
        s = call(bs, 14, sv, {**ident, "protocol_type": "consumer", "protocol_name": "range",
                              "assignments": [{"member_id": member, "assignment": b"A"}]})
        assert (s.error_code, s.assignment) == (ErrorCode.none, b"A"), (sv, s)
        assert call(bs, 12, hv, ident).error_code == ErrorCode.none, hv
        c = call(bs, 8, cv, {
            "group_id": group, "generation_id_or_member_epoch": gen, "member_id": member,
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": topic, "topic_id": topic_id, "partitions": [
                {"partition_index": p, "committed_offset": 3 + jv, "committed_leader_epoch": 0,
                 "committed_metadata": "md"} for p in (0, 1)]}]})
        assert [p.error_code for p in c.topics[0].partitions] == [0, 0], (cv, c)
        want = [{"name": topic, "topic_id": topic_id, "partition_indexes": [0]}]
        f = call(bs, 9, ov, {"group_id": group, "topics": want, "require_stable": True,
                             "groups": [{"group_id": group, "topics": want, "member_id": None,
                                         "member_epoch": -1}]})
        topics = f.groups[0].topics if ov >= 8 else f.topics
        p = topics[0].partitions[0]
        assert (p.committed_offset, p.metadata, p.error_code) == (3 + jv, "md", 0), (ov, f)
        d = call(bs, 15, jv % 7, {"groups": [group], "include_authorized_operations": False})
        assert d.groups[0].group_state == "Stable" and len(d.groups[0].members) == 1
        lg = call(bs, 16, jv % 6, {"states_filter": ["Stable"], "types_filter": []})
        assert lg.error_code == ErrorCode.none and group in {g.group_id for g in lg.groups}
        lv = call(bs, 13, jv % 6, {"group_id": group, "member_id": member,
                                   "members": [{"member_id": member, "group_instance_id": None,
                                                "reason": "done"}]})
        assert lv.error_code == ErrorCode.none, lv
        od = call(bs, 47, 0, {"group_id": group, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0}]},
            {"name": "no-such-topic", "partitions": [{"partition_index": 0}]}]})
        assert od.error_code == ErrorCode.none
        assert [t.partitions[0].error_code for t in od.topics] == [
            ErrorCode.none, ErrorCode.unknown_topic_or_partition]
        # (Partition 1's offset keeps the empty group alive: with none left it would be gone.)
        dg = call(bs, 42, jv % 3, {"groups_names": [group]})
        assert dg.results[0].error_code == ErrorCode.none, dg


def test_deleting_a_topic_forgets_its_committed_offsets(gbroker: BrokerProcess) -> None:
    bs = gbroker.bootstrap
    topic = new_topic(bs, 1)
    keep = new_topic(bs, 1)
    group = f"del-{uuid.uuid4().hex[:6]}"
    c = consumer(bs, group)
    c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(keep, 0, 2)],
             asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics([topic], operation_timeout=10)[topic].result(15)

    def offsets() -> dict[str, int]:
        f = call(bs, 9, 8, {"groups": [{"group_id": group, "topics": None}],
                            "require_stable": False})
        return {t.name: t.partitions[0].committed_offset for t in f.groups[0].topics}

    assert wait_until(lambda: offsets() == {keep: 2}, timeout_s=15), offsets()
