"""`wherry consume --group`: joins a consumer group on a real DevCluster and commits the offsets
of what it printed, so a second run with the same group continues where the first stopped."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from wherry.cli.main import main
from wherry.testing.cluster import DevCluster


def run(*args: str, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


@pytest.mark.slow
def test_second_run_with_the_same_group_continues(wherry_broker: DevCluster) -> None:
    b = wherry_broker.bootstrap
    t, g = f"cg-{uuid.uuid4().hex[:8]}", f"grp-{uuid.uuid4().hex[:8]}"
    r = run("topics", "create", "--bootstrap-server", b, "--topic", t, "--partitions", "2")
    assert r.exit_code == 0, r.stderr
    lines = [f"v{i}" for i in range(10)]
    r = run("produce", "--bootstrap-server", b, "--topic", t,
            stdin=("\n".join(lines) + "\n").encode())
    assert r.exit_code == 0, r.stderr
    common = ["consume", "--bootstrap-server", b, "--topic", t, "--group", g, "--timeout-ms",
              "8000"]
    first = run(*common, "--from-beginning", "--max-messages", "4")
    assert first.exit_code == 0, first.stderr
    got1 = first.stdout.split()
    assert len(got1) == 4
    admin = AdminClient({"bootstrap.servers": b})
    fut = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(g, [TopicPartition(t, 0), TopicPartition(t, 1)])])
    committed = fut[g].result(20).topic_partitions
    assert sum(tp.offset for tp in committed if tp.offset > 0) == 4
    # --from-beginning only matters where the group has no committed offset (as in Kafka).
    second = run(*common, "--from-beginning", "--max-messages", "6")
    assert second.exit_code == 0, second.stderr
    got2 = second.stdout.split()
    assert sorted(got1 + got2) == sorted(lines)  # nothing twice, nothing lost
    third = run(*common[:-1], "3000", "--from-beginning")
    assert third.exit_code == 0 and third.stdout == ""  # all committed: nothing left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partition", "0"],
         "ERROR Options group and partition cannot be specified together."),
        (["--offset", "0"], "ERROR Options group and offset cannot be specified together."),
    ],
)
def test_group_option_errors(args: list[str], message: str) -> None:
    r = CliRunner().invoke(main, ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t",
                                  "--group", "g", *args])
    assert r.exit_code == 1
    assert message in r.stderr
