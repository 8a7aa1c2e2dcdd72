"""Share groups through the admin APIs, with confluent-kafka's AdminClient and raw requests
against a real `wherry server`: DeleteGroups of a share group deletes its share-partition
state and group configs (a new group of the same name starts afresh) and refuses a group with
members (NON_EMPTY_GROUP)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.helpers import create_topic
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
