"""`wherry delete-records` (kafka-delete-records.sh): the offset JSON file as Kafka's
DeleteRecordsCommand reads it, and deletions on a real `wherry server` with Kafka's output."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers import create_topic, poll_messages
from wherry.cli.common import CommandError
from wherry.cli.main import main
from wherry.cli.reassign_json import parse_offsets_to_delete

CALL_TIMEOUT_S = 15.0


def run(bootstrap: str, plan: Path) -> Result:
    return CliRunner().invoke(main, ["delete-records", "--bootstrap-server", bootstrap,
                                     "--offset-json-file", str(plan)], catch_exceptions=False)


def _plan(tmp_path: Path, partitions: list[dict[str, object]], **extra: object) -> Path:
    path = tmp_path / f"plan-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"version": 1, "partitions": partitions, **extra}))
    return path


def test_the_offset_file_as_kafka_reads_it() -> None:
    text = '{"partitions": [{"topic": "t", "partition": 1, "offset": 5}, ' \
           '{"topic": "u", "partition": 0, "offset": -1}]}'
    assert parse_offsets_to_delete(text) == {("t", 1): 5, ("u", 0): -1}
    refused = {
        "{": "The input string is not a valid JSON",
        '{"version": 2, "partitions": []}': "Not supported version field value 2",
        '{"version": 1}': "Missing partitions field",
        '{"partitions": [{"topic": "t", "partition": 0}]}': "No such field exists: `offset`",
        '{"partitions": [{"topic": "t", "partition": 0, "offset": 1}, '
        '{"topic": "t", "partition": 0, "offset": 2}]}':
            "Offset json file contains duplicate topic partitions: t-0",
    }
    for bad, message in refused.items():
        with pytest.raises(CommandError, match=message):
            parse_offsets_to_delete(bad)


def _first_offset(bootstrap: str, topic: str, partition: int) -> int:
    """The offset of the first record a consumer reads from the start of the partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-probe",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition)])
        (msg,) = poll_messages(consumer, 1, CALL_TIMEOUT_S)
        return int(msg.offset() or 0)
    finally:
        consumer.close()


def test_deleting_records_of_a_broker(cli_bootstrap: str, tmp_path: Path) -> None:
    bootstrap = cli_bootstrap
    topic = f"dr-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition in range(3):
        for i in range(20):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(CALL_TIMEOUT_S) == 0

    plan = _plan(tmp_path, [
        {"topic": topic, "partition": 0, "offset": 7},
        {"topic": topic, "partition": 1, "offset": -1},
        {"topic": topic, "partition": 2, "offset": 21},
        {"topic": "no-such-topic", "partition": 0, "offset": 1},
    ])
    result = run(bootstrap, plan)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 7",
        f"partition: {topic}-1\tlow_watermark: 20",
        f"partition: {topic}-2\terror: org.apache.kafka.common.errors."
        "OffsetOutOfRangeException: The requested offset is not within the range of offsets "
        "maintained by the server.",
        "partition: no-such-topic-0\terror: org.apache.kafka.common.errors."
        "UnknownTopicOrPartitionException: This server does not host this topic-partition.",
    ]
    assert _first_offset(bootstrap, topic, 0) == 7  # the records below 7 are gone
    assert _first_offset(bootstrap, topic, 2) == 0  # a refused deletion deletes nothing

    again = run(bootstrap, _plan(tmp_path, [{"topic": topic, "partition": 2, "offset": 3}]))
    assert again.exit_code == 0, (again.stdout, again.stderr)
    assert again.stdout.splitlines()[-1] == f"partition: {topic}-2\tlow_watermark: 3"
