"""Online migration of a consumer group with real confluent-kafka consumers on a real broker:
two classic consumers (JoinGroup/SyncGroup, eager `range` or `cooperative-sticky`) form a
classic group; a consumer of the KIP-848 protocol (`group.protocol=consumer`) joins and the
group becomes a consumer group with the classic members inside; the three consume 600 records
once each, every record committed synchronously once processed. The classic consumers leave:
the consumer group goes on with the offsets kept. A classic consumer joins again and the
KIP-848 one leaves: the group converts back to a classic group
(`group.consumer.migration.policy=bidirectional`, Kafka's default) with the offsets kept."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess, wait_until
from tests.e2e.test_kip848_consumer_group import PARTITIONS, new_topic, produce
from tests.kafka_wire import call
from tests.kip848_members import EventLog, Member, start_from_committed

OVERRIDES = [
    "offsets.topic.num.partitions=4",
    "group.consumer.heartbeat.interval.ms=300",
    "group.consumer.session.timeout.ms=10000",
    "group.initial.rebalance.delay.ms=500",
    "group.consumer.migration.policy=bidirectional",
]
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("migration"), overrides=OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def split_complete(members: list[Member]) -> bool:
    """Every member has partitions; together, each partition once."""
    owned = [p for m in members for p in m.partitions()]
    return all(m.partitions() for m in members) and sorted(owned) == list(range(PARTITIONS))


def group_type(admin: AdminClient, group: str) -> str:
    listed = admin.list_consumer_groups().result(15)
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1, listed.valid
    return str(getattr(mine[0], "type", "")).rsplit(".", 1)[-1].upper()


def committed(admin: AdminClient, group: str, topic: str) -> list[int]:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(15)
    return [tp.offset for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


def consumed_once(log: EventLog, upto: int) -> bool:
    return sorted(int(v) for v in log.values()) == list(range(upto))


def assert_no_record_twice(log: EventLog) -> None:
    assert log.redelivered_after_commit() == []
    positions = log.deliveries()
    assert len(positions) == len(set(positions)), "a record was delivered twice"


def describe(admin: AdminClient, group: str) -> Any:
    return admin.describe_consumer_groups([group])[group].result(15)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_and_consumer_members_migrate_both_ways(
    kbroker: BrokerProcess, strategy: str
) -> None:
    bs = kbroker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    topic = new_topic(bs, PARTITIONS)
    group = f"mig-{uuid.uuid4().hex[:8]}"
    start_from_committed(bs, group, topic, PARTITIONS)
    log = EventLog()
    members: list[Member] = []
    try:
        # Two classic consumers: a classic group.
        members += [
            Member(
                bs,
                group,
                topic,
                f"classic-{i}",
                log,
                "classic",
                **{"partition.assignment.strategy": strategy},
            )
            for i in (1, 2)
        ]
        assert wait_until(lambda: split_complete(members), timeout_s=60), [
            (m.name, m.partitions(), m.errors) for m in members
        ]
        assert group_type(admin, group) == "CLASSIC"
        # A KIP-848 consumer joins: the group is upgraded, the classic members stay in it.
        modern = Member(bs, group, topic, "modern", log, "consumer")
        members.append(modern)
        assert wait_until(lambda: split_complete(members), timeout_s=90), [
            (m.name, m.partitions(), m.errors) for m in members
        ]
        assert group_type(admin, group) == "CONSUMER"
        assert f"Converted classic group {group} " in kbroker.log_text()
        desc = describe(admin, group)
        assert len(desc.members) == 3
        # ConsumerGroupDescribe v1 tells the two classic members from the consumer one.
        wire = call(bs, 69, 1, {"group_ids": [group], "include_authorized_operations": False})
        [g] = wire.groups
        assert sorted(m.member_type for m in g.members) == [0, 0, 1], g.members
        # 600 records, each consumed once by one of the three, each committed.
        produce(bs, topic, 600)
        assert wait_until(lambda: consumed_once(log, 600), timeout_s=90), len(log.values())
        time.sleep(1.5)  # anything delivered twice would show up now
        assert_no_record_twice(log)
        by_member = {name for _, name, _, _, _ in log.snapshot()}
        assert by_member == {"classic-1", "classic-2", "modern"}
        assert committed(admin, group, topic) == [100] * PARTITIONS
        # The classic consumers leave: a consumer group of the KIP-848 member alone.
        for m in members[:2]:
            m.close()
        members = [modern]
        assert wait_until(lambda: modern.partitions() == list(range(PARTITIONS)), timeout_s=60)
        assert group_type(admin, group) == "CONSUMER"
        assert len(describe(admin, group).members) == 1
        assert committed(admin, group, topic) == [100] * PARTITIONS  # offsets kept
        produce(bs, topic, 60, start=600)
        assert wait_until(lambda: consumed_once(log, 660), timeout_s=60), len(log.values())
        # A classic consumer joins it, then the KIP-848 one leaves: back to a classic group.
        late = Member(
            bs,
            group,
            topic,
            "classic-3",
            log,
            "classic",
            **{"partition.assignment.strategy": strategy},
        )
        members.append(late)
        assert wait_until(lambda: split_complete(members), timeout_s=90), [
            (m.name, m.partitions(), m.errors) for m in members
        ]
        assert group_type(admin, group) == "CONSUMER"
        modern.close()
        members = [late]
        assert wait_until(lambda: group_type(admin, group) == "CLASSIC", timeout_s=30)
        assert f"Converted consumer group {group} to a classic group" in kbroker.log_text()
        assert wait_until(lambda: late.partitions() == list(range(PARTITIONS)), timeout_s=90), (
            late.partitions(),
            late.errors,
        )
        desc = describe(admin, group)
        assert len(desc.members) == 1 and str(desc.state).upper().endswith("STABLE")
        assert committed(admin, group, topic) == [110] * PARTITIONS  # offsets kept
        produce(bs, topic, 60, start=660)
        assert wait_until(lambda: consumed_once(log, 720), timeout_s=60), len(log.values())
        time.sleep(1.5)
        assert_no_record_twice(log)
        assert consumed_once(log, 720)
        assert committed(admin, group, topic) == [120] * PARTITIONS
    finally:
        for m in members:
            m.close()


def test_a_restarted_broker_reloads_the_migrated_group(tmp_path: Path) -> None:
    """The conversions are in `__consumer_offsets`: after a restart the group is still a
    consumer group with its classic member, and after the downgrade a classic group."""
    broker = BrokerProcess(tmp_path, overrides=OVERRIDES).start()
    members: list[Member] = []
    try:
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        topic = new_topic(bs, PARTITIONS)
        group = f"mig-r-{uuid.uuid4().hex[:8]}"
        log = EventLog()
        classic = Member(bs, group, topic, "classic", log, "classic")
        members.append(classic)
        assert wait_until(lambda: split_complete(members), timeout_s=60)
        modern = Member(bs, group, topic, "modern", log, "consumer")
        members.append(modern)
        assert wait_until(lambda: split_complete(members), timeout_s=90)
        produce(bs, topic, 120)
        assert wait_until(lambda: consumed_once(log, 120), timeout_s=60)
        broker.stop()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert wait_until(lambda: group_type(admin, group) == "CONSUMER", timeout_s=60)
        assert "Loaded 1 consumer groups" in broker.log_text()
        produce(bs, topic, 60, start=120)
        assert wait_until(lambda: consumed_once(log, 180), timeout_s=90), len(log.values())
        assert wait_until(lambda: split_complete(members), timeout_s=60)
        # The KIP-848 member leaves: a classic group, which a restart reloads as one.
        modern.close()
        members = [classic]
        assert wait_until(lambda: group_type(admin, group) == "CLASSIC", timeout_s=30)
        assert wait_until(lambda: classic.partitions() == list(range(PARTITIONS)), timeout_s=90)
        broker.stop()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert wait_until(lambda: group_type(admin, group) == "CLASSIC", timeout_s=60)
        produce(bs, topic, 60, start=180)
        assert wait_until(lambda: consumed_once(log, 240), timeout_s=90), len(log.values())
        time.sleep(1.5)
        assert_no_record_twice(log)
        assert committed(admin, group, topic) == [40] * PARTITIONS
    finally:
        for m in members:
            m.close()
        broker.stop()
