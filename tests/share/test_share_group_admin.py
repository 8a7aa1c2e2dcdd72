"""Share groups through the admin APIs, with confluent-kafka's AdminClient and raw requests
against a real `wherry server`: DeleteGroups of a share group deletes its share-partition
state and group configs (a new group of the same name starts afresh) and refuses a group with
members (NON_EMPTY_GROUP); Describe/Alter/DeleteShareGroupOffsets (90-92) over the wire
(no client library sends them yet): start offsets and lag, alter on an empty group only, a
group starting over at an altered offset or afresh after a delete."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.helpers import create_topic
from tests.kafka_wire import call, connect
from tests.share.share_harness import (
    BROKER_OVERRIDES,
    consume_until,
    produce,
    set_group_configs,
    share_consumer,
)

pytestmark = pytest.mark.slow
E = ErrorCode


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-admin"), overrides=BROKER_OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _names() -> tuple[str, str]:
    u = uuid.uuid4().hex[:8]
    return f"adm-t-{u}", f"adm-g-{u}"


def _group_config(admin: AdminClient, group: str) -> dict[str, str]:
    r = ConfigResource(ResourceType.GROUP, group)
    return {k: v.value for k, v in admin.describe_configs([r])[r].result(15).items()}


def test_delete_groups_deletes_share_state_and_configs(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=2)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest",
                                  "share.delivery.count.limit": "3"})
    produce(bs, topic, [b"x%d" % i for i in range(10)], partition=0)
    produce(bs, topic, [b"y%d" % i for i in range(4)], partition=1)
    admin = AdminClient({"bootstrap.servers": bs})
    member = share_consumer(bs, group, topic)
    got: dict[tuple[int, int], int] = {}
    try:
        consume_until(member, lambda: len(got) >= 14,
                      lambda _c, m: got.__setitem__((m.partition(), m.offset()), 1), 30)
        member.commit_sync(15)
        # a group with a member is not deleted
        with pytest.raises(KafkaException) as err:
            admin.delete_consumer_groups([group])[group].result(15)
        assert err.value.args[0].code() == E.non_empty_group
    finally:
        member.close()
    assert len(got) == 14
    assert _group_config(admin, group)["share.delivery.count.limit"] == "3"
    admin.delete_consumer_groups([group])[group].result(15)
    # its configs are gone: the defaults again
    cfg = _group_config(admin, group)
    assert cfg["share.delivery.count.limit"] == "5"
    assert cfg["share.auto.offset.reset"] == "latest"
    with pytest.raises(KafkaException) as gone:
        admin.delete_consumer_groups([group])[group].result(15)
    assert gone.value.args[0].code() == E.group_id_not_found
    # a new group of that name starts afresh: every record again, on a first delivery
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    again: dict[tuple[int, int], int] = {}
    c = share_consumer(bs, group, topic)
    try:
        consume_until(c, lambda: len(again) >= 14,
                      lambda _c, m: again.__setitem__((m.partition(), m.offset()),
                                                      m.delivery_count()), 30)
        c.commit_sync(15)
    finally:
        c.close()
    assert again == {**{(0, o): 1 for o in range(10)}, **{(1, o): 1 for o in range(4)}}
    assert "deleted share group " + group in broker.log_text()


def _describe(bs: str, group: str, topics: list[tuple[str, list[int]]] | None) -> Any:
    r = call(bs, 90, 1, {"groups": [{"group_id": group, "topics": None if topics is None else [
        {"topic_name": t, "partitions": ps} for t, ps in topics]}]})
    return r.groups[0]


def _offsets(group_answer: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    assert group_answer.error_code == E.none, group_answer
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
            for t in group_answer.topics for p in t.partitions}


def _alter(bs: str, group: str, topic: str, offsets: dict[int, int]) -> Any:
    return call(bs, 91, 0, {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
        {"partition_index": p, "start_offset": o} for p, o in offsets.items()]}]})


def _take(bs: str, group: str, topic: str, n: int, wait_s: float = 3) -> dict[tuple[int, int], int]:
    got: dict[tuple[int, int], int] = {}
    c = share_consumer(bs, group, topic)
    try:
        consume_until(c, lambda: len(got) >= n,
                      lambda _c, m: got.__setitem__((m.partition(), m.offset()),
                                                    m.delivery_count()), 30)
        consume_until(c, lambda: False,  # nothing more comes
                      lambda _c, m: got.__setitem__((m.partition(), m.offset()),
                                                    m.delivery_count()), wait_s)
        c.commit_sync(15)
    finally:
        c.close()
    return got


def test_share_group_offsets_describe_alter_delete(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=2)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    produce(bs, topic, [b"x%d" % i for i in range(10)], partition=0)
    produce(bs, topic, [b"y%d" % i for i in range(4)], partition=1)
    assert len(_take(bs, group, topic, 14, wait_s=1)) == 14  # all accepted
    assert _offsets(_describe(bs, group, None)) == {
        (topic, 0): (10, 0, E.none), (topic, 1): (4, 0, E.none)}
    produce(bs, topic, [b"x%d" % i for i in range(10, 12)], partition=0)
    named = _offsets(_describe(bs, group, [(topic, [0, 7]), ("no-such-topic", [0])]))
    assert named == {(topic, 0): (10, 2, E.none),  # two records not yet consumed
                     (topic, 7): (-1, -1, E.unknown_topic_or_partition),
                     ("no-such-topic", 0): (-1, -1, E.unknown_topic_or_partition)}
    assert _describe(bs, "no-such-group", None).error_code == E.group_id_not_found

    # a group with a member is not altered, nor are its offsets deleted
    sock = connect(bs)
    try:
        hb = call(sock, 76, 1, {"group_id": group, "member_id": "m", "member_epoch": 0,
                                "rack_id": None, "subscribed_topic_names": [topic]})
        assert hb.error_code == E.none
        assert _alter(bs, group, topic, {0: 3}).error_code == E.non_empty_group
        assert call(bs, 92, 0, {"group_id": group, "topics": [{"topic_name": topic}]}
                    ).error_code == E.non_empty_group
        call(sock, 76, 1, {"group_id": group, "member_id": "m", "member_epoch": -1,
                           "rack_id": None, "subscribed_topic_names": None})
    finally:
        sock.close()
    r = _alter(bs, group, topic, {0: 3, 9: 0})
    assert r.error_code == E.none
    assert {p.partition_index: p.error_code for p in r.responses[0].partitions} == {
        0: E.none, 9: E.unknown_topic_or_partition}
    assert _offsets(_describe(bs, group, [(topic, [0])]))[(topic, 0)][0] == 3
    # consumers start over at 3 on partition 0 (first deliveries), nothing from partition 1
    assert _take(bs, group, topic, 9) == {(0, o): 1 for o in range(3, 12)}

    d = call(bs, 92, 0, {"group_id": group, "topics": [{"topic_name": topic},
                                                       {"topic_name": "no-such-topic"}]})
    assert d.error_code == E.none
    assert {t.topic_name: t.error_code for t in d.responses} == {
        topic: E.none, "no-such-topic": E.unknown_topic_or_partition}
    assert _offsets(_describe(bs, group, None)) == {}  # no state left
    assert _offsets(_describe(bs, group, [(topic, [0, 1])])) == {
        (topic, 0): (-1, -1, E.none), (topic, 1): (-1, -1, E.none)}
    assert len(_take(bs, group, topic, 16)) == 16  # afresh, from the earliest

    # an unknown group is created by an alter; deleting offsets of an unknown group fails
    fresh = f"{group}-fresh"
    assert _alter(bs, fresh, topic, {0: 10}).error_code == E.none
    assert _take(bs, fresh, topic, 2) == {(0, 10): 1, (0, 11): 1}
    assert call(bs, 92, 0, {"group_id": "no-such-group", "topics": []}
                ).error_code == E.group_id_not_found


@pytest.mark.parametrize("group", [".", ".."])
def test_a_group_named_with_dots_has_configs(broker: BrokerProcess, group: str) -> None:
    """`.` and `..` are group ids like any other (a fuzzed DescribeConfigs of the group `.`
    once failed in the metadata store)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _group_config(admin, group)["share.delivery.count.limit"] == "5"
    set_group_configs(broker.bootstrap, group, {"share.delivery.count.limit": "4"})
    assert _group_config(admin, group)["share.delivery.count.limit"] == "4"
