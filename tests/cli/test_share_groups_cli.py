"""`wherry share-groups` (kafka-share-groups.sh) against a real `wherry server`: a group that
confluent-kafka's ShareConsumer consumed with listed, its offsets and lag described, a member
joined through ShareGroupHeartbeat described, the group's deletion refused while it has one and
done once it left."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

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
from wherry.cli.main import main

pytestmark = pytest.mark.timeout(120)
SHARE_GROUP_HEARTBEAT = 76


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    b = BrokerProcess(tmp_path_factory.mktemp("share-groups-cli"), overrides=BROKER_OVERRIDES)
    b.start()
    try:
        yield b.bootstrap
    finally:
        b.stop()


def tool(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["share-groups", *args, "--bootstrap-server", bootstrap],
                              catch_exceptions=False)


def test_arguments_refused_before_connecting(unreachable_bootstrap: str) -> None:
    for args, message in {
        ("describe",): "Option [describe] takes one of these options: [all-groups], [group]",
        ("describe", "--group", "g", "--all-groups"): "can't be used with option",
        ("describe", "--group", "g", "--members", "--state"): "takes at most one of",
        ("delete",): "Option [delete] takes one of these options",
        ("list", "--state", "sleepy"): "Invalid state list 'sleepy'. Valid states are: Empty, "
                                       "Stable, Dead",
    }.items():
        result = tool(unreachable_bootstrap, *args)
        assert result.exit_code == 1, args
        assert result.stderr.startswith("Error: ") and message in result.stderr, result.stderr


def test_a_share_group_listed_described_and_deleted(bootstrap: str) -> None:
    u = uuid.uuid4().hex[:8]
    topic, group = f"sg-t-{u}", f"sg-g-{u}"
    create_topic(bootstrap, topic)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, topic, [b"v%d" % i for i in range(6)])
    got: list[int] = []
    consumer = share_consumer(bootstrap, group, topic)
    try:
        consume_until(consumer, lambda: len(got) >= 6, lambda _c, m: got.append(m.offset()), 30)
        consumer.commit_sync(15)
    finally:
        consumer.close()
    assert sorted(got) == list(range(6))
    produce(bootstrap, topic, [b"later"])  # one record left to deliver

    assert group in tool(bootstrap, "list").stdout.splitlines()
    assert f"{group:<15} Empty" in tool(bootstrap, "list", "--state").stdout.splitlines()
    assert group not in tool(bootstrap, "list", "--state", "Stable").stdout

    offsets = tool(bootstrap, "describe", "--group", group)
    assert offsets.exit_code == 0, offsets.stderr
    assert f"Share group '{group}' has no active members." in offsets.stderr
    assert offsets.stdout.splitlines() == [
        "",
        f"{'GROUP':<{max(15, len(group))}} {'TOPIC':<{max(15, len(topic))}} PARTITION  "
        "START-OFFSET  LAG",
        f"{group:<15} {topic:<15} 0          6             1",
    ]

    sock = connect(bootstrap)
    try:  # a member, as a share consumer's first heartbeat makes it
        hb = call(sock, SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": "member-one", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": [topic]})
        assert hb.error_code == 0
        state = tool(bootstrap, "describe", "--group", group, "--state").stdout.splitlines()
        assert state[1].split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
        assert state[2].split()[-2:] == ["Stable", "1"]
        members = tool(bootstrap, "describe", "--group", group, "--members").stdout
        (row,) = members.splitlines()[2:]
        assert row.split()[0] == group and row.split()[-2:] == ["1", f"{topic}:0"]
        refused = tool(bootstrap, "delete", "--group", group)
        assert refused.exit_code == 1
        assert refused.stderr.splitlines() == [
            "Error: Deletion of some share groups failed:",
            f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors."
            f"GroupNotEmptyException: Share group '{group}' is not EMPTY."]
        call(sock, SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": "member-one", "member_epoch": -1, "rack_id": None,
            "subscribed_topic_names": None})
    finally:
        sock.close()

    deleted = tool(bootstrap, "delete", "--group", group)
    assert deleted.stdout == f"Deletion of requested share groups ('{group}') was successful.\n"
    gone = tool(bootstrap, "describe", "--group", group)
    assert gone.exit_code == 1
    assert gone.stderr.strip() == f"Error: Share group '{group}' does not exist."


def _consumed(bootstrap: str, n: int) -> tuple[str, str]:
    """A topic with `n` + 1 records and a group that consumed the first `n`, then left."""
    u = uuid.uuid4().hex[:8]
    topic, group = f"sg-t-{u}", f"sg-g-{u}"
    create_topic(bootstrap, topic)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, topic, [b"v%d" % i for i in range(n)])
    got: list[int] = []
    consumer = share_consumer(bootstrap, group, topic)
    try:
        consume_until(consumer, lambda: len(got) >= n, lambda _c, m: got.append(m.offset()), 30)
        consumer.commit_sync(15)
    finally:
        consumer.close()
    produce(bootstrap, topic, [b"later"])
    return topic, group


def _start_and_lag(bootstrap: str, group: str) -> list[tuple[str, str]]:
    out = tool(bootstrap, "describe", "--group", group).stdout.splitlines()[2:]
    return [(line.split()[3], line.split()[4]) for line in out]


def test_reset_and_delete_offsets(bootstrap: str) -> None:
    topic, group = _consumed(bootstrap, 4)
    assert _start_and_lag(bootstrap, group) == [("4", "1")]

    dry = tool(bootstrap, "reset-offsets", "--group", group, "--all-topics", "--to-earliest")
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.splitlines()[1:] == [
        "GROUP           TOPIC           PARTITION  NEW-OFFSET",
        f"{group:<15} {topic:<15} 0          0"]
    assert _start_and_lag(bootstrap, group) == [("4", "1")]  # a dry run changes nothing
    done = tool(bootstrap, "reset-offsets", "--group", group, "--topic", f"{topic}:0",
                "--to-latest", "--execute")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"{group:<15} {topic:<15} 0          5"
    assert _start_and_lag(bootstrap, group) == [("5", "0")]
    refused = tool(bootstrap, "reset-offsets", "--group", group, "--all-topics")
    assert refused.stderr.strip() == ("Error: Option [reset-offsets] requires one of the "
                                      "following scenarios: [to-datetime, to-earliest, "
                                      "to-latest]")

    gone = tool(bootstrap, "delete-offsets", "--group", group, "--topic", topic,
                "--topic", "no-such-topic")
    assert gone.exit_code == 1
    assert gone.stdout.splitlines()[1:] == [
        "TOPIC           STATUS",
        "no-such-topic   Error: This server does not host this topic-partition.",
        f"{topic:<15} Successful"]
    assert _start_and_lag(bootstrap, group) == []  # no state of the topic left
    unknown = tool(bootstrap, "delete-offsets", "--group", f"{group}-none", "--topic", topic)
    assert unknown.exit_code == 1 and unknown.stderr.startswith("Error: ")
