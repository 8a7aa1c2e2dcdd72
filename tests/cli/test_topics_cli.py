"""`wherry topics` against a real broker (plus offline tests of the argument helpers)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Uuid

from wherry.cli.common import CommandError, parse_kv
from wherry.cli.main import main
from wherry.cli.topics import (
    PartitionView,
    _topic_header,
    filter_topics,
    parse_replica_assignment,
)
from wherry.server.config import parse_properties

ERROR_PREFIX = "Error while executing topic command : "


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def topics(bootstrap: str, command: str, *args: str) -> Result:
    return run("topics", command, "--bootstrap-server", bootstrap, *args)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def failed(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith(ERROR_PREFIX), result.stderr
    return result.stderr[len(ERROR_PREFIX):].strip()


HEADER_RE = re.compile(
    r"^Topic: (?P<topic>\S+)\tTopicId: (?P<id>[A-Za-z0-9_-]{22})\tPartitionCount: (?P<n>\d+)"
    r"\tReplicationFactor: (?P<rf>\d+)\tConfigs: (?P<configs>.*)$")
PARTITION_RE = re.compile(
    r"^\tTopic: (?P<topic>\S+)\tPartition: (?P<p>\d+)\tLeader: (?P<leader>\d+|none)"
    r"\tReplicas: (?P<replicas>[\d,]*)\tIsr: (?P<isr>[\d,]*)$")


def describe(bootstrap: str, topic: str, *extra: str) -> tuple[re.Match[str], list[re.Match[str]]]:
    lines = ok(topics(bootstrap, "describe", "--topic", topic, *extra)).splitlines()
    header = HEADER_RE.match(lines[0])
    assert header is not None, lines
    parts = [PARTITION_RE.match(line) for line in lines[1:]]
    assert all(parts), lines
    return header, [p for p in parts if p is not None]


def configs_of(header: re.Match[str]) -> dict[str, str]:
    text = header["configs"]
    return dict(item.split("=", 1) for item in text.split(",")) if text else {}


# -------------------------------------------------------------------------------------------
# Offline


def test_parse_replica_assignment() -> None:
    assert parse_replica_assignment("0:1,1:2") == [[0, 1], [1, 2]]
    assert parse_replica_assignment("3") == [[3]]
    with pytest.raises(CommandError, match="duplicate"):
        parse_replica_assignment("1:1")
    with pytest.raises(CommandError, match="different replication factor"):
        parse_replica_assignment("0:1,2")
    with pytest.raises(CommandError, match="broker ids"):
        parse_replica_assignment("a:b")


def test_parse_kv_and_properties() -> None:
    assert parse_kv(["a=1", " b = x=y "], "config") == {"a": "1", "b": "x=y"}
    with pytest.raises(CommandError, match='"key=val"'):
        parse_kv(["novalue"], "config")
    text = "# comment\n! other\nsecurity.protocol=PLAINTEXT\nclient.id : tool\nlong=a\\\n  b\n"
    assert parse_properties(text) == {"security.protocol": "PLAINTEXT",
                                           "client.id": "tool", "long": "ab"}


def test_filter_topics_is_kafka_include_list() -> None:
    names = ["__consumer_offsets", "a", "a1", "b", "ab"]
    assert filter_topics(names, None, exclude_internal=True) == ["a", "a1", "b", "ab"]
    assert filter_topics(names, "a", exclude_internal=False) == ["a"]
    assert filter_topics(names, "a.*", exclude_internal=False) == ["a", "a1", "ab"]
    assert filter_topics(names, "a,b", exclude_internal=False) == ["a", "b"]
    assert filter_topics(names, "__.*", exclude_internal=True) == []


def test_describe_header_prints_url_safe_topic_id() -> None:
    # confluent-kafka's str(Uuid) is standard base64; Kafka prints URL-safe base64.
    topic_id = Uuid(0x7BFF << 48, 0)
    assert "+" in str(topic_id) or "/" in str(topic_id)
    parts = [PartitionView(0, None, (1, 2), (2,))]
    header = _topic_header("t", topic_id, parts, {})
    match = HEADER_RE.match(header)
    assert match is not None, header
    assert match["id"] == str(topic_id).replace("+", "-").replace("/", "_")
    assert match["rf"] == "2"
    assert parts[0].line("t") == "\tTopic: t\tPartition: 0\tLeader: none\tReplicas: 1,2\tIsr: 2"
    assert _topic_header("t", Uuid(0, 0), parts, {}).startswith("Topic: t\tPartitionCount: 1")


def test_bad_arguments_fail_before_connecting(unreachable_bootstrap: str) -> None:
    # Nothing listens there: each of these must be rejected without contacting a broker.
    bootstrap = unreachable_bootstrap
    assert failed(topics(bootstrap, "create", "--topic", "t", "--partitions", "0")) == (
        "The partitions must be greater than 0")
    assert "replication factor must be between 1" in failed(
        topics(bootstrap, "create", "--topic", "t", "--replication-factor", "0"))
    assert '"key=val"' in failed(topics(bootstrap, "create", "--topic", "t", "--config", "x"))
    assert "can't be used with" in failed(topics(
        bootstrap, "create", "--topic", "t", "--partitions", "2", "--replica-assignment", "0,0"))
    assert "At least one of" in failed(topics(bootstrap, "alter", "--topic", "t"))
    missing = topics(bootstrap, "create")  # click usage error
    assert missing.exit_code == 2
    assert "--topic" in missing.stderr


def test_unreachable_broker_fails_fast_with_clear_message(unreachable_bootstrap: str) -> None:
    bootstrap = unreachable_bootstrap
    start = time.monotonic()
    message = failed(topics(bootstrap, "list", "--timeout-ms", "2000"))
    assert time.monotonic() - start < 10
    assert "Timed out after 2000 ms" in message
    assert bootstrap in message


def test_command_config_file(tmp_path: Path, unreachable_bootstrap: str) -> None:
    bad = tmp_path / "client.properties"
    bad.write_text("no.such.librdkafka.property=1\n")
    message = failed(topics(unreachable_bootstrap, "list", "--command-config", str(bad)))
    assert "Invalid client configuration" in message
    assert "no.such.librdkafka.property" in message


# -------------------------------------------------------------------------------------------
# Against the broker


def test_create_list_describe_delete(cli_bootstrap: str, topic_name: str) -> None:
    out = ok(topics(cli_bootstrap, "create", "--topic", topic_name, "--partitions", "3",
                    "--replication-factor", "1", "--config", "retention.ms=123456",
                    "--config", "max.message.bytes=200000"))
    assert out == f"Created topic {topic_name}.\n"

    listed = ok(topics(cli_bootstrap, "list")).splitlines()
    assert topic_name in listed
    assert listed == sorted(listed)
    assert ok(topics(cli_bootstrap, "list", "--topic", topic_name)) == f"{topic_name}\n"

    header, parts = describe(cli_bootstrap, topic_name)
    assert header["topic"] == topic_name
    assert header["n"] == "3"
    assert header["rf"] == "1"
    assert configs_of(header) == {"max.message.bytes": "200000", "retention.ms": "123456"}
    assert [p["p"] for p in parts] == ["0", "1", "2"]
    for p in parts:
        assert p["topic"] == topic_name
        assert p["leader"] != "none"
        assert p["replicas"] == p["leader"] == p["isr"]

    assert ok(topics(cli_bootstrap, "delete", "--topic", topic_name)) == (
        f"Deleted topic {topic_name}.\n")
    deadline = time.monotonic() + 10
    while topic_name in ok(topics(cli_bootstrap, "list")).splitlines():
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.2)


def test_create_existing_topic(cli_bootstrap: str, topic_name: str) -> None:
    ok(topics(cli_bootstrap, "create", "--topic", topic_name))
    message = failed(topics(cli_bootstrap, "create", "--topic", topic_name))
    assert "already exists" in message
    assert ok(topics(cli_bootstrap, "create", "--topic", topic_name, "--if-not-exists")) == ""


def test_unknown_topic_errors(cli_bootstrap: str, topic_name: str) -> None:
    expected = f"Topic '{topic_name}' does not exist as expected"
    assert failed(topics(cli_bootstrap, "describe", "--topic", topic_name)) == expected
    assert failed(topics(cli_bootstrap, "delete", "--topic", topic_name)) == expected
    assert failed(topics(cli_bootstrap, "alter", "--topic", topic_name,
                         "--partitions", "2")) == expected
    assert ok(topics(cli_bootstrap, "describe", "--topic", topic_name, "--if-exists")) == ""
    assert ok(topics(cli_bootstrap, "delete", "--topic", topic_name, "--if-exists")) == ""


def test_create_with_replica_assignment(cli_bootstrap: str, topic_name: str) -> None:
    # Single-broker test cluster: its id is whatever the broker reports as leader.
    ok(topics(cli_bootstrap, "create", "--topic", f"{topic_name}-probe"))
    _, probe = describe(cli_bootstrap, f"{topic_name}-probe")
    broker_id = probe[0]["leader"]
    ok(topics(cli_bootstrap, "create", "--topic", topic_name,
              "--replica-assignment", f"{broker_id},{broker_id}"))
    header, parts = describe(cli_bootstrap, topic_name)
    assert header["n"] == "2"
    assert [p["replicas"] for p in parts] == [broker_id, broker_id]
    message = failed(topics(cli_bootstrap, "create", "--topic", f"{topic_name}-x",
                            "--replica-assignment", "9999"))
    assert message  # the broker's reason (unknown broker id)


def test_alter_partitions_and_configs(cli_bootstrap: str, topic_name: str) -> None:
    ok(topics(cli_bootstrap, "create", "--topic", topic_name, "--partitions", "1",
              "--config", "retention.ms=1000"))
    assert ok(topics(cli_bootstrap, "alter", "--topic", topic_name, "--partitions", "3")) == ""
    header, parts = describe(cli_bootstrap, topic_name)
    assert header["n"] == "3"
    assert len(parts) == 3

    out = ok(topics(cli_bootstrap, "alter", "--topic", topic_name,
                    "--config", "segment.bytes=1048576", "--delete-config", "retention.ms"))
    assert out == f"Completed updating config for topic {topic_name}.\n"
    header, _ = describe(cli_bootstrap, topic_name)
    assert configs_of(header) == {"segment.bytes": "1048576"}

    message = failed(topics(cli_bootstrap, "alter", "--topic", topic_name, "--partitions", "2"))
    assert message  # cannot shrink: the broker's INVALID_PARTITIONS message
    header, _ = describe(cli_bootstrap, topic_name)
    assert header["n"] == "3"


def test_describe_filters(cli_bootstrap: str, topic_name: str) -> None:
    ok(topics(cli_bootstrap, "create", "--topic", topic_name, "--partitions", "2",
              "--config", "min.insync.replicas=1"))
    # Healthy single-replica partitions: not under-replicated, not unavailable...
    for flag in ("--under-replicated-partitions", "--unavailable-partitions",
                 "--under-min-isr-partitions"):
        assert ok(topics(cli_bootstrap, "describe", "--topic", topic_name, flag)) == ""
    # ...but at min ISR (ISR size 1 == min.insync.replicas 1): partition lines, no header.
    lines = ok(topics(cli_bootstrap, "describe", "--topic", topic_name,
                      "--at-min-isr-partitions")).splitlines()
    assert len(lines) == 2
    assert all(PARTITION_RE.match(line) for line in lines)


def test_describe_all_topics(cli_bootstrap: str, topic_name: str) -> None:
    ok(topics(cli_bootstrap, "create", "--topic", topic_name, "--partitions", "2"))
    lines = ok(topics(cli_bootstrap, "describe")).splitlines()
    headers = [m for m in map(HEADER_RE.match, lines) if m is not None]
    assert topic_name in {h["topic"] for h in headers}
    assert sum(1 for line in lines if line.startswith(f"\tTopic: {topic_name}\t")) == 2
