"""`wherry groups` against a real broker (plus offline tests of parsing, planning, rendering).

The broker is this module's own, started with `group.initial.rebalance.delay.ms=0` so that a
consumer joining a new group gets its assignment at once instead of after Kafka's 3 s delay.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, wait_until
from wherry.cli.common import CommandError
from wherry.cli.group_model import GroupView, MemberView, OffsetRow, offset_rows, parse_states
from wherry.cli.group_render import (
    assignment_text,
    render_members,
    render_offsets,
    render_reset,
    render_state,
)
from wherry.cli.group_reset import (
    LogOffsets,
    ResetSpec,
    Scenario,
    parse_datetime_ms,
    parse_duration_ms,
    parse_reset_plan,
    parse_topic_arg,
    plan_reset,
)
from wherry.cli.main import main

CALL_TIMEOUT_S = 15.0
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]


# -------------------------------------------------------------------------------------------
# Helpers


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def groups(bootstrap: str, command: str, *args: str) -> Result:
    return run("groups", command, "--bootstrap-server", bootstrap, *args)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def failed(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert "Error: " in result.stderr, result.stderr
    return result.stderr


def table(text: str, header: list[str]) -> list[dict[str, str]]:
    """Rows of a Kafka-style table whose cells contain no blanks."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and lines[0].split() == header, text
    rows = [dict(zip(header, line.split(), strict=True)) for line in lines[1:]]
    return rows


def offsets_of(bootstrap: str, group: str) -> dict[int, dict[str, str]]:
    out = ok(groups(bootstrap, "describe", "--group", group))
    assert out.startswith("\n")  # Kafka prints an empty line before each table
    return {int(r["PARTITION"]): r for r in table(out, OFFSETS_HEADER)}


def new_offsets(text: str) -> dict[tuple[str, int], int]:
    rows = table(text, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
    return {(r["TOPIC"], int(r["PARTITION"])): int(r["NEW-OFFSET"]) for r in rows}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)],
                                   request_timeout=CALL_TIMEOUT_S).values():
        fut.result(timeout=CALL_TIMEOUT_S)


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=f"v{partition}-{i}".encode(), partition=partition)
    assert producer.flush(CALL_TIMEOUT_S) == 0


def consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": 10_000, "log_level": 0,
    })


def consume_and_commit(bootstrap: str, group: str, topic: str, upto: dict[int, int]) -> None:
    """Join `group`, process the first `upto[p]` records of each partition, commit, close."""
    c = consumer(bootstrap, group, "groups-test")
    c.subscribe([topic])
    processed: dict[int, int] = dict.fromkeys(upto, 0)
    deadline = time.monotonic() + 20.0
    try:
        while any(processed[p] < n for p, n in upto.items()):
            assert time.monotonic() < deadline, f"consumed only {processed}"
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            p = msg.partition()
            assert p is not None
            if processed[p] < upto[p]:
                assert msg.offset() == processed[p]
                processed[p] += 1
        c.commit(offsets=[TopicPartition(topic, p, n) for p, n in upto.items()],
                 asynchronous=False)
    finally:
        c.close()


class ActiveConsumer:
    """A group member polling in a background thread until the `with` block ends."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        self._consumer = consumer(bootstrap, group, client_id)
        self._topic = topic
        self._stop = threading.Event()
        self.assigned = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
            if partitions:
                self.assigned.set()

        self._consumer.subscribe([self._topic], on_assign=on_assign)
        try:
            while not self._stop.is_set():
                self._consumer.poll(0.1)
        finally:
            self._consumer.close()

    def __enter__(self) -> ActiveConsumer:
        self._thread.start()
        assert self.assigned.wait(20.0), "the consumer got no assignment"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(20.0)
        assert not self._thread.is_alive()


# -------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(tmp_path_factory.mktemp("groups-broker"),
                           overrides=["group.initial.rebalance.delay.ms=0"]).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def topic(bootstrap: str) -> str:
    """A 2-partition topic with 10 records in partition 0 and 6 in partition 1."""
    name = f"grp-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, 2)
    produce(bootstrap, name, {0: 10, 1: 6})
    return name


@pytest.fixture
def group(bootstrap: str, topic: str) -> str:
    """A group that processed 4 records of partition 0 and 2 of partition 1, then left."""
    name = f"g-{uuid.uuid4().hex[:8]}"
    consume_and_commit(bootstrap, name, topic, {0: 4, 1: 2})
    return name


# -------------------------------------------------------------------------------------------
# Offline


def test_parse_topic_arg() -> None:
    assert parse_topic_arg("t") == ("t", None)
    assert parse_topic_arg("t:0,2") == ("t", (0, 2))
    with pytest.raises(CommandError, match="Invalid partition 'x'"):
        parse_topic_arg("t:0,x")
    with pytest.raises(CommandError, match="expected topic name and partitions"):
        parse_topic_arg("t:1:2")


def test_parse_duration_like_java() -> None:
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == 86_400_000 + 7_200_000 + 180_000 + 4_500
    assert parse_duration_ms("pt30m") == 1_800_000
    assert parse_duration_ms("-PT1S") == -1000
    assert parse_duration_ms("PT-0.5S") == -500
    for bad in ("P", "PT", "1H", "PT1X", ""):
        with pytest.raises(CommandError, match="cannot be parsed to a Duration"):
            parse_duration_ms(bad)


def test_parse_datetime() -> None:
    assert parse_datetime_ms("1970-01-01T00:00:01.000Z") == 1000
    assert parse_datetime_ms("1970-01-01T01:00:00.000+01:00") == 0
    local = parse_datetime_ms("2020-06-01T12:00:00.000")  # local time zone, as in Kafka
    assert abs(local - 1_591_012_800_000) <= 14 * 3_600_000
    with pytest.raises(CommandError, match="does not contain a 'T'"):
        parse_datetime_ms("2020-06-01")
    with pytest.raises(CommandError, match="Unparseable date"):
        parse_datetime_ms("2020-13-01T00:00:00")


def test_parse_states() -> None:
    assert {s.name for s in parse_states(["stable,Empty"])} == {"STABLE", "EMPTY"}
    assert parse_states([""]) == set()
    with pytest.raises(CommandError) as info:
        parse_states(["bogus"])
    assert str(info.value) == ("Invalid state list 'bogus'. Valid states are: PreparingRebalance, "
                               "CompletingRebalance, Stable, Dead, Empty")


def test_parse_reset_plan() -> None:
    assert parse_reset_plan("t,0,5\nt,1,7\n", ["g"]) == {"g": {("t", 0): 5, ("t", 1): 7}}
    assert parse_reset_plan("g,t,0,5\nh,t,0,1\n", ["g", "h"]) == {
        "g": {("t", 0): 5}, "h": {("t", 0): 1}}
    with pytest.raises(CommandError, match="Invalid reset plan line 1"):
        parse_reset_plan("t,x,5\n", ["g"])


def test_plan_reset_clamps_like_kafka() -> None:
    a0, a1 = ("a", 0), ("a", 1)
    logs = LogOffsets(earliest={a0: 2, a1: 0}, latest={a0: 10, a1: 6}, committed={a0: 4},
                      by_time={a0: 7, a1: -1})
    plan, warns = plan_reset(ResetSpec(Scenario.TO_OFFSET, 8), "g", [a0, a1], logs)
    assert plan == {a0: 8, a1: 6}
    assert warns == ["New offset (8) is higher than latest offset for topic partition a-1. "
                     "Value will be set to 6."]
    plan, warns = plan_reset(ResetSpec(Scenario.SHIFT_BY, -3), "g", [a0], logs)
    assert plan == {a0: 2} and "lower than earliest offset" in warns[0]
    with pytest.raises(CommandError, match="no current committed offset"):
        plan_reset(ResetSpec(Scenario.SHIFT_BY, 1), "g", [a1], logs)
    assert plan_reset(ResetSpec(Scenario.TO_EARLIEST), "g", [a0, a1], logs)[0] == {a0: 2, a1: 0}
    assert plan_reset(ResetSpec(Scenario.TO_LATEST), "g", [a0, a1], logs)[0] == {a0: 10, a1: 6}
    assert plan_reset(ResetSpec(Scenario.TO_CURRENT), "g", [a0, a1], logs)[0] == {a0: 4, a1: 6}
    plan, warns = plan_reset(ResetSpec(Scenario.TO_DATETIME, 123), "g", [a0, a1], logs)
    assert plan == {a0: 7, a1: 6}
    assert warns == ["Partition 1 from topic a is empty. Falling back to latest known offset."]
    plan, _ = plan_reset(ResetSpec(Scenario.FROM_FILE, plan={"g": {a0: 1}}), "g", [a0], logs)
    assert plan == {a0: 2}


def test_rendering_matches_kafka_layout() -> None:
    member = MemberView("consumer-1-abc", None, "consumer-1", "/127.0.0.1",
                        (("t", 0), ("t", 1), ("u", 3)))
    view = GroupView("g", "Stable", "range", "127.0.0.1:9092  (0)", (member,))
    rows = offset_rows(view, {("t", 0): 3, ("v", 0): 1}, {("t", 0): 5, ("t", 1): 2})
    assert [(r.topic, r.partition, r.current, r.log_end, r.lag, r.consumer_id) for r in rows] == [
        ("t", 0, 3, 5, 2, "consumer-1-abc"), ("t", 1, None, 2, None, "consumer-1-abc"),
        ("u", 3, None, None, None, "consumer-1-abc"), ("v", 0, 1, None, None, "-")]
    text = render_offsets(rows)
    lines = text.split("\n")
    assert lines[0] == "" and text.endswith("\n")
    assert lines[1] == ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  "
                        "LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            "
                        "CLIENT-ID")
    assert lines[3].split() == ["g", "t", "1", "-", "2", "-", "consumer-1-abc", "/127.0.0.1",
                                "consumer-1"]
    assert render_state(view).split("\n")[1:3] == [
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                "
        "#MEMBERS",
        "g               127.0.0.1:9092  (0)       range                Stable               1"]
    members = render_members(view, verbose=True).split("\n")
    assert members[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                  "ASSIGNMENT"]
    assert members[2].endswith("3               t(0,1), u(3)")
    assert assignment_text(()) == "-"
    assert render_reset({"g": {("t", 1): 5, ("t", 0): 4}}).split("\n") == [
        "", "GROUP           TOPIC           PARTITION  NEW-OFFSET",
        "g               t               0          4",
        "g               t               1          5", ""]
    assert OffsetRow("g", "t", 0, -1, 5, None, None, None).lag is None


def test_bad_arguments_fail_before_connecting(unreachable_bootstrap: str) -> None:
    b = unreachable_bootstrap
    cases = {
        ("describe",): "Option [describe] takes one of these options: [all-groups], [group]",
        ("describe", "--group", "g", "--all-groups"): "can't be used with option",
        ("describe", "--group", "g", "--members", "--state"): "takes at most one of",
        ("delete",): "Option [delete] takes one of these options",
        ("reset-offsets", "--group", "g", "--all-topics"): "requires one of the following "
                                                           "scenarios",
        ("reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"):
            'Option "[to-earliest]" can\'t be used with option "[to-latest]"',
        ("reset-offsets", "--group", "g", "--to-earliest"): "One of the reset scopes should be "
                                                            "defined",
        ("reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run",
         "--execute"): "only accepts one of [execute] and [dry-run]",
        ("reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"):
            "Invalid partition 'x'",
        ("reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "1h"):
            "Text cannot be parsed to a Duration",
        ("reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"):
            "does not contain a 'T'",
        ("list", "--state", "sleepy"): "Invalid state list 'sleepy'",
        ("delete-offsets", "--group", "g"): "Option [delete-offsets] takes the following "
                                            "options: [group], [topic]",
        ("delete-offsets", "--group", "g", "--group", "h", "--topic", "t"):
            "Option [delete-offsets] supports only one [group] at a time",
        ("delete-offsets", "--group", "g", "--topic", "t:x"): "Invalid partition 'x'",
    }
    for args, message in cases.items():
        start = time.monotonic()
        err = failed(groups(b, *args))
        assert err.startswith("Error: ") and message in err, (args, err)
        assert time.monotonic() - start < 1.0, args
    usage = groups(b, "reset-offsets", "--to-offset", "x")
    assert usage.exit_code == 2


def test_unreachable_broker_fails_fast(unreachable_bootstrap: str) -> None:
    for args in (("list",), ("describe", "--group", "g")):
        start = time.monotonic()
        err = failed(groups(unreachable_bootstrap, *args, "--timeout-ms", "1000"))
        assert time.monotonic() - start < 8, args
        assert err.startswith("Error: Executing consumer group command failed due to "
                              "Timed out after 1000 ms"), err
        assert unreachable_bootstrap in err


def test_command_config_file(tmp_path: Path, unreachable_bootstrap: str) -> None:
    bad = tmp_path / "client.properties"
    bad.write_text("no.such.librdkafka.property=1\n")
    err = failed(groups(unreachable_bootstrap, "list", "--command-config", str(bad)))
    assert "Invalid client configuration" in err and "no.such.librdkafka.property" in err


# -------------------------------------------------------------------------------------------
# Against the broker


def test_list_and_describe_an_inactive_group(bootstrap: str, topic: str, group: str) -> None:
    assert group in ok(groups(bootstrap, "list")).splitlines()
    states = table(ok(groups(bootstrap, "list", "--state")), ["GROUP", "STATE"])
    assert {"GROUP": group, "STATE": "Empty"} in states
    only_empty = table(ok(groups(bootstrap, "list", "--state", "empty")), ["GROUP", "STATE"])
    assert {r["STATE"] for r in only_empty} == {"Empty"} and group in {r["GROUP"] for r in
                                                                        only_empty}
    stable = table(ok(groups(bootstrap, "list", "--state", "Stable")), ["GROUP", "STATE"])
    assert group not in {r["GROUP"] for r in stable}

    result = groups(bootstrap, "describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in result.stderr
    rows = offsets_of(bootstrap, group)
    assert {p: (r["TOPIC"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"])
            for p, r in rows.items()} == {0: (topic, "4", "10", "6"), 1: (topic, "2", "6", "4")}
    assert all(r["GROUP"] == group and r["CONSUMER-ID"] == r["HOST"] == r["CLIENT-ID"] == "-"
               for r in rows.values())

    # More records arrive: the log end offset and the lag follow.
    produce(bootstrap, topic, {1: 3})
    assert offsets_of(bootstrap, group)[1]["LAG"] == "7"

    # Members and state of a group without members.
    members = groups(bootstrap, "describe", "--group", group, "--members")
    assert members.exit_code == 0 and members.stdout == ""
    assert "has no active members" in members.stderr
    state = ok(groups(bootstrap, "describe", "--group", group, "--state")).splitlines()
    assert state[2].split() == [group, *state[2].split()[1:3], "-", "Empty", "0"]

    everything = ok(groups(bootstrap, "describe", "--all-groups"))
    assert any(line.split()[:2] == [group, topic] for line in everything.splitlines())


def test_reset_offsets(bootstrap: str, topic: str, group: str, tmp_path: Path) -> None:
    def reset(*args: str) -> Result:
        return groups(bootstrap, "reset-offsets", "--group", group, *args)

    def committed() -> dict[int, tuple[str, str]]:
        return {p: (r["CURRENT-OFFSET"], r["LAG"])
                for p, r in offsets_of(bootstrap, group).items()}

    before = committed()
    assert before == {0: ("4", "6"), 1: ("2", "4")}

    # --dry-run shows the plan and changes nothing; no mode at all is a dry run with a warning.
    dry = reset("--all-topics", "--to-earliest", "--dry-run")
    assert new_offsets(ok(dry)) == {(topic, 0): 0, (topic, 1): 0}
    assert dry.stdout.startswith("\nGROUP ")
    default = reset("--topic", topic, "--to-earliest")
    assert new_offsets(ok(default)) == {(topic, 0): 0, (topic, 1): 0}
    assert "WARN: No action will be performed as the --execute option is missing." in (
        default.stderr)
    assert committed() == before

    # --execute commits.
    assert new_offsets(ok(reset("--all-topics", "--to-earliest", "--execute"))) == {
        (topic, 0): 0, (topic, 1): 0}
    assert committed() == {0: ("0", "10"), 1: ("0", "6")}

    # Out-of-range targets are clamped to the log, with Kafka's warning.
    high = reset("--topic", topic, "--to-offset", "100", "--dry-run")
    assert new_offsets(ok(high)) == {(topic, 0): 10, (topic, 1): 6}
    assert ("New offset (100) is higher than latest offset for topic partition "
            f"{topic}-0. Value will be set to 10.") in high.stderr

    # One partition only; shift relative to the committed offset.
    assert new_offsets(ok(reset("--topic", f"{topic}:1", "--shift-by", "5", "--execute"))) == {
        (topic, 1): 5}
    assert committed() == {0: ("0", "10"), 1: ("5", "1")}
    low = reset("--topic", f"{topic}:1", "--shift-by", "-9", "--dry-run")
    assert new_offsets(ok(low)) == {(topic, 1): 0} and "lower than earliest" in low.stderr

    # By time: everything was written within the last hour; nothing after the year 2100.
    assert new_offsets(ok(reset("--topic", topic, "--by-duration", "PT1H", "--dry-run"))) == {
        (topic, 0): 0, (topic, 1): 0}
    future = reset("--topic", topic, "--to-datetime", "2100-01-01T00:00:00.000Z", "--dry-run")
    assert new_offsets(ok(future)) == {(topic, 0): 10, (topic, 1): 6}
    assert f"Partition 0 from topic {topic} is empty. Falling back to latest" in future.stderr

    # --to-latest, then --export / --from-file round trip.
    ok(reset("--all-topics", "--to-latest", "--execute"))
    assert committed() == {0: ("10", "0"), 1: ("6", "0")}
    exported = ok(reset("--all-topics", "--to-offset", "3", "--dry-run", "--export"))
    assert exported.split() == [f"{topic},0,3", f"{topic},1,3"]
    plan = tmp_path / "plan.csv"
    plan.write_text(exported)
    ok(reset("--from-file", str(plan), "--execute"))
    assert committed() == {0: ("3", "7"), 1: ("3", "3")}

    # Unknown partitions and topics are errors, and nothing is committed.
    err = failed(reset("--topic", f"{topic}:7", "--to-earliest", "--execute"))
    assert f'The partitions "{topic}-7" do not exist' in err
    err = failed(reset("--topic", "no-such-topic", "--to-earliest", "--execute"))
    assert "UnknownTopicOrPartitionException" in err
    assert committed() == {0: ("3", "7"), 1: ("3", "3")}


def test_reset_creates_offsets_for_a_new_group(bootstrap: str, topic: str) -> None:
    fresh = f"g-{uuid.uuid4().hex[:8]}"
    ok(groups(bootstrap, "reset-offsets", "--group", fresh, "--topic", f"{topic}:0",
              "--to-offset", "7", "--execute"))
    assert offsets_of(bootstrap, fresh)[0]["CURRENT-OFFSET"] == "7"


def test_active_group(bootstrap: str, topic: str, group: str) -> None:
    client_id = "active-member"
    with ActiveConsumer(bootstrap, group, topic, client_id):
        def stable() -> bool:
            out = groups(bootstrap, "describe", "--group", group, "--state").stdout
            return "Stable" in out
        assert wait_until(stable, timeout_s=10.0)

        state = ok(groups(bootstrap, "describe", "--group", group, "--state")).splitlines()
        assert state[0] == "" and state[1].startswith("GROUP           COORDINATOR (ID)")
        cells = state[2].split()
        host, port = bootstrap.rsplit(":", 1)
        assert cells == [group, f"{host}:{port}", "(0)", "range", "Stable", "1"]

        members = ok(groups(bootstrap, "describe", "--group", group, "--members"))
        rows = table(members, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"])
        assert len(rows) == 1
        member = rows[0]
        assert member["CONSUMER-ID"].startswith(f"{client_id}-")
        assert (member["HOST"], member["CLIENT-ID"], member["#PARTITIONS"]) == (
            "/127.0.0.1", client_id, "2")
        verbose = ok(groups(bootstrap, "describe", "--group", group, "--members", "--verbose"))
        assert verbose.splitlines()[1].split()[-1] == "ASSIGNMENT"
        assert verbose.splitlines()[2].endswith(f"2               {topic}(0,1)")

        rows_by_p = offsets_of(bootstrap, group)
        assert {p: (r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"], r["CLIENT-ID"])
                for p, r in rows_by_p.items()} == {
            0: ("4", "6", member["CONSUMER-ID"], client_id),
            1: ("2", "4", member["CONSUMER-ID"], client_id)}
        assert "has no active members" not in groups(bootstrap, "describe", "--group",
                                                     group).stderr

        refused = groups(bootstrap, "reset-offsets", "--group", group, "--all-topics",
                         "--to-earliest", "--execute")
        assert failed(refused).strip() == (
            f"Error: Assignments can only be reset if the group '{group}' is inactive, but the "
            "current state is Stable.")
        assert refused.stdout == ""

        err = failed(groups(bootstrap, "delete", "--group", group))
        assert err.splitlines() == [
            "Error: Deletion of some consumer groups failed:",
            f"* Group '{group}' could not be deleted due to: "
            "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty."]
        assert {p: r["CURRENT-OFFSET"] for p, r in offsets_of(bootstrap, group).items()} == {
            0: "4", 1: "2"}

        # Offsets of a topic the group consumes stay (Kafka's GROUP_SUBSCRIBED_TO_TOPIC)
        kept = groups(bootstrap, "delete-offsets", "--group", group, "--topic", f"{topic}:0")
        assert failed(kept).strip() == ("Error: Encounter some partition level error, see the "
                                        "follow-up details:")
        assert kept.stdout.splitlines()[-1] == (
            f"{topic:<30} 0               Error: org.apache.kafka.common.errors."
            "GroupSubscribedToTopicException: Deleting offsets of a topic is forbidden while "
            "the consumer group is actively subscribed to it.")
        assert {p: r["CURRENT-OFFSET"] for p, r in offsets_of(bootstrap, group).items()} == {
            0: "4", 1: "2"}

    # The member left: the group is Empty and can be deleted.
    assert wait_until(lambda: "Empty" in groups(bootstrap, "describe", "--group", group,
                                                "--state").stdout, timeout_s=10.0)
    assert ok(groups(bootstrap, "delete", "--group", group)) == (
        f"Deletion of requested consumer groups ('{group}') was successful.\n")
    assert group not in ok(groups(bootstrap, "list")).splitlines()
    err = failed(groups(bootstrap, "describe", "--group", group))
    assert err.strip() == f"Error: Consumer group '{group}' does not exist."


def test_delete_offsets(bootstrap: str, topic: str, group: str) -> None:
    """Kafka's `--delete-offsets`: one partition, then the whole topic beside one the cluster
    does not have (its "Not Provided" row fails the command, the rest is deleted)."""
    one = ok(groups(bootstrap, "delete-offsets", "--group", group, "--topic", f"{topic}:1"))
    assert one.splitlines() == [
        f"Request succeed for deleting offsets with topic {topic}:1 group {group}",
        "",
        "TOPIC                          PARTITION       STATUS",
        f"{topic:<30} 1               Successful"]
    assert {p: r["CURRENT-OFFSET"] for p, r in offsets_of(bootstrap, group).items()} == {0: "4"}

    both = groups(bootstrap, "delete-offsets", "--group", group, "--topic", topic,
                  "--topic", "no-such-topic")
    assert both.exit_code == 1
    assert both.stdout.splitlines() == [
        f"Request succeed for deleting offsets with topic {topic}, no-such-topic group {group}",
        "",
        "TOPIC                          PARTITION       STATUS",
        f"{topic:<30} 0               Successful",
        f"{topic:<30} 1               Successful",
        "no-such-topic                  Not Provided    Error: org.apache.kafka.common.errors."
        "UnknownTopicOrPartitionException: This server does not host this topic-partition."]
    # an Empty group left without offsets is gone, as on Kafka
    err = failed(groups(bootstrap, "describe", "--group", group))
    assert err.strip() == f"Error: Consumer group '{group}' does not exist."

    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    gone = groups(bootstrap, "delete-offsets", "--group", ghost, "--topic", f"{topic}:0")
    assert failed(gone).strip() == f"Error: '{ghost}' does not exist."
    assert gone.stdout.splitlines()[-1] == (
        f"{topic:<30} 0               Error: org.apache.kafka.common.errors."
        "GroupIdNotFoundException: The group id does not exist.")


def test_unknown_groups(bootstrap: str) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    for extra in ((), ("--members",), ("--state",), ("--offsets",)):
        result = groups(bootstrap, "describe", "--group", ghost, *extra)
        assert failed(result).strip() == f"Error: Consumer group '{ghost}' does not exist."
        assert result.stdout == ""
    err = failed(groups(bootstrap, "delete", "--group", ghost))
    assert ("org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not "
            "exist.") in err
