"""`wherry get-offsets` (kafka-get-offsets.sh): the filters and `--time` values as Kafka's
GetOffsetShell reads them, and the offsets of a real `wherry server`'s partitions."""

from __future__ import annotations

import time
import uuid

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from tests.broker_process import wait_until
from tests.helpers import create_topic
from wherry.cli.common import CommandError
from wherry.cli.get_offsets import PartitionFilter, offset_spec, partition_filters, picked
from wherry.cli.main import main

CALL_TIMEOUT_S = 15.0


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["get-offsets", *args], catch_exceptions=False)


# --------------------------------------------------------------------------------------------
# Offline


def test_topic_partition_patterns_as_kafka_reads_them() -> None:
    rules = partition_filters(None, None, "orders:1,events:2-4,logs,:0,x:5-,y:-2")
    assert rules == [
        PartitionFilter("orders", ids=frozenset({1})),
        PartitionFilter("events", 2, 4),
        PartitionFilter("logs"),
        PartitionFilter(".*", ids=frozenset({0})),
        PartitionFilter("x", 5),
        PartitionFilter("y", 0, 2),
    ]
    layout = {"orders": range(3), "events": range(6), "logs": range(2), "x": range(7),
              "y": range(3), "other": range(2)}
    got = picked(layout, rules, exclude_internal=False)
    assert got == [
        ("events", 0), ("events", 2), ("events", 3), ("logs", 0), ("logs", 1), ("orders", 0),
        ("orders", 1), ("other", 0), ("x", 0), ("x", 5), ("x", 6), ("y", 0), ("y", 1)]


def test_kafka_order_is_by_the_topic_partition_text() -> None:
    layout = {"t": range(12), "__consumer_offsets": range(2)}
    got = picked(layout, partition_filters("t", None, None), exclude_internal=False)
    assert [p for _, p in got] == [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    everything = picked(layout, partition_filters(None, None, None), exclude_internal=False)
    assert everything[0] == ("__consumer_offsets", 0)
    assert ("__consumer_offsets", 0) not in picked(layout, partition_filters(None, None, None),
                                                   exclude_internal=True)


def test_topic_regex_and_partition_ids() -> None:
    layout = {"orders": range(3), "orders-dlq": range(1), "events": range(2)}
    got = picked(layout, partition_filters("orders.*,events", "0,2", None), False)
    assert got == [("events", 0), ("orders", 0), ("orders", 2), ("orders-dlq", 0)]


def test_bad_options_are_refused_before_connecting(unreachable_bootstrap: str) -> None:
    cases = {
        ("--topic", "t", "--topic-partitions", "t:0"):
            "--topic-partitions cannot be used with --topic or --partitions",
        ("--partitions", "0,x"): "--partitions expects a comma separated list of numeric "
                                 "partition ids, but received: 0,x",
        ("--topic-partitions", "t:x"): "Invalid rule specification: t:x",
        ("--time", "yesterday"): "Malformed time argument yesterday. Please use -1 or latest / "
                                 "-2 or earliest / -3 or max-timestamp, or a specified long "
                                 "format timestamp",
    }
    for args, message in cases.items():
        started = time.monotonic()
        result = run("--bootstrap-server", unreachable_bootstrap, *args)
        assert result.exit_code == 1, args
        assert result.stderr.strip() == f"Error: {message}", (args, result.stderr)
        assert time.monotonic() - started < 1.0, args
    with pytest.raises(CommandError):
        offset_spec("-1.5")


# --------------------------------------------------------------------------------------------
# Against a broker


def test_offsets_of_a_broker(cli_bootstrap: str) -> None:
    bootstrap = cli_bootstrap
    topic = f"go-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    base = int(time.time() * 1000) - 60_000
    # partition 0: 5 records at base+0..4 s; the 3rd carries the largest timestamp
    stamps = [base, base + 1000, base + 9000, base + 3000, base + 4000]
    for ts in stamps:
        producer.produce(topic, b"v", partition=0, timestamp=ts)
    producer.produce(topic, b"v", partition=1, timestamp=base)
    assert producer.flush(CALL_TIMEOUT_S) == 0

    def lines(*args: str) -> list[str]:
        result = run("--bootstrap-server", bootstrap, *args)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return result.stdout.splitlines()

    assert lines("--topic", topic) == [f"{topic}:0:5", f"{topic}:1:1", f"{topic}:2:0"]
    assert lines("--topic", topic, "--time", "-2") == [f"{topic}:0:0", f"{topic}:1:0",
                                                        f"{topic}:2:0"]
    # the record with the largest timestamp; an empty partition has none: no line
    assert lines("--topic", topic, "--time", "max-timestamp") == [f"{topic}:0:2",
                                                                   f"{topic}:1:0"]
    # the first record at or after a time; after every record: no line
    assert lines("--topic-partitions", f"{topic}:0", "--time", str(base + 2000)) == [
        f"{topic}:0:2"]
    assert lines("--topic-partitions", f"{topic}:0-2", "--time", str(base + 10_000)) == []
    assert lines("--topic", topic, "--partitions", "1,2") == [f"{topic}:1:1", f"{topic}:2:0"]
    # a group's coordinator lookup creates the offsets topic: internal, listed unless excluded
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")])
    assert wait_until(lambda: "__consumer_offsets" in admin.list_topics(timeout=5).topics, 15)
    both = f"__consumer_offsets|{topic}"
    assert "__consumer_offsets:0:0" in lines("--topic", both)
    assert lines("--topic", both, "--exclude-internal-topics") == lines("--topic", topic)

    missing = run("--bootstrap-server", bootstrap, "--topic", "no-such-topic")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == (
        "Error: Could not match any topic-partitions with the specified filters")
