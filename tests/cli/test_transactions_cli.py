"""`wherry transactions` (kafka-transactions.sh) against a real `wherry server`: list and
describe what a confluent-kafka transactional producer left, and a hanging transaction -- a
transactional batch no coordinator knows of, written with partition verification off, as an
old client could -- found by `find-hanging`, holding back the last stable offset until `abort`
writes its marker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from tests.broker_process import BrokerProcess
from tests.helpers import create_topic
from wherry.cli.main import main
from wherry.cli.transactions import pretty_table
from wherry.protocol.records import build_batch

TIMEOUT_S = 15.0
LIST_OFFSETS = 2

pytestmark = pytest.mark.timeout(120)


def test_tables_are_padded_as_kafka_pads_them() -> None:
    assert pretty_table(["A", "Longer"], [["wide-cell", "1"], ["x", "22"]]).splitlines() == [
        "A        \tLonger",
        "wide-cell\t1",
        "x        \t22",
    ]
    assert pretty_table(["Only", "Headers"], []) == "Only\tHeaders"


def test_the_arguments_kafka_requires(unreachable_bootstrap: str) -> None:
    def err(*args: str) -> str:
        result = CliRunner().invoke(main, ["transactions", *args, "--bootstrap-server",
                                           unreachable_bootstrap], catch_exceptions=False)
        assert result.exit_code == 1, result.stdout
        return result.stderr.strip()

    assert err("find-hanging") == ("Error: The `find-hanging` command requires either --topic "
                                   "or --broker-id to limit the scope of the search")
    assert err("find-hanging", "--partition", "0", "--broker-id", "1") == (
        "Error: The --partition argument requires --topic to be provided")
    assert err("abort", "--topic", "t", "--partition", "0").startswith(
        "Error: The transaction to abort must be identified either with --start-offset")
    assert err("abort", "--topic", "t", "--partition", "0", "--producer-id", "5") == (
        "Error: Missing required argument --producer-epoch")


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(
        Path(tmp_path_factory.mktemp("transactions-cli")),
        overrides=["transaction.state.log.replication.factor=1",
                   "transaction.state.log.min.isr=1",
                   # a leader that takes a transactional batch on the producer's word, as
                   # brokers before transactions v2 did: how transactions come to hang
                   "transaction.partition.verification.enable=false"],
    ).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def tool(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["transactions", *args, "--bootstrap-server", bootstrap],
                              catch_exceptions=False)


def rows(result: Result) -> list[list[str]]:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return [[cell.strip() for cell in line.split("\t")] for line in result.stdout.splitlines()]


def test_list_and_describe(bootstrap: str) -> None:
    topic, tid = f"tx-{uuid.uuid4().hex[:8]}", f"app-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "linger.ms": 0})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"v", partition=0)
    producer.commit_transaction(TIMEOUT_S)

    listed = rows(tool(bootstrap, "list"))
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    (mine,) = [r for r in listed[1:] if r[0] == tid]
    assert (mine[1], mine[3]) == ("0", "CompleteCommit")

    (header, row) = rows(tool(bootstrap, "describe", "--transactional-id", tid))
    assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                      "TransactionState", "TransactionTimeoutMs",
                      "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"]
    assert row[:5] == ["0", tid, mine[2], "0", "CompleteCommit"]
    assert row[5] == "60000" and int(row[6]) > 0 and int(row[7]) >= 0

    unknown = tool(bootstrap, "describe", "--transactional-id", "never-used")
    assert unknown.exit_code == 1
    assert unknown.stderr.strip() == (
        "Error: Failed to describe transaction state of transactional-id `never-used`: The "
        "transactionalId could not be found.")


def _last_stable_offset(bootstrap: str, topic: str) -> int:
    resp = kafka_wire.call(bootstrap, LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 1,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(resp.topics[0].partitions[0].offset)


def test_a_hanging_transaction_found_and_aborted(bootstrap: str) -> None:
    topic = f"hang-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    plain = build_batch([(None, b"before")])
    kafka_wire.call(bootstrap, 0, 9, kafka_wire.produce_body(topic, plain))
    # a transactional batch of a producer id no coordinator gave out
    stray = build_batch([(None, b"stray")], producer_id=424_242, producer_epoch=3,
                        base_sequence=0, is_transactional=True)
    body = {**kafka_wire.produce_body(topic, stray), "transactional_id": "ghost"}
    resp = kafka_wire.call(bootstrap, 0, 9, body)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    kafka_wire.call(bootstrap, 0, 9, kafka_wire.produce_body(topic, plain))
    assert _last_stable_offset(bootstrap, topic) == 1  # held at the stray record

    producers = rows(tool(bootstrap, "describe-producers", "--topic", topic, "--partition", "0"))
    assert producers[1] == ["424242", "3", "-1", "0", producers[1][4], "1"]

    time.sleep(0.05)
    hanging = rows(tool(bootstrap, "find-hanging", "--topic", topic,
                        "--max-transaction-timeout", "0"))
    assert hanging[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                          "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]
    assert hanging[1][:6] == [topic, "0", "424242", "3", "-1", "1"]
    assert len(hanging) == 2
    # within the default 15 minutes it is not old enough to be a candidate
    assert rows(tool(bootstrap, "find-hanging", "--topic", topic)) == hanging[:1]

    missing = tool(bootstrap, "abort", "--topic", topic, "--partition", "0",
                   "--start-offset", "2")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == (f"Error: Could not find any open transactions starting "
                                      f"at offset 2 on partition {topic}-0")
    aborted = tool(bootstrap, "abort", "--topic", topic, "--partition", "0",
                   "--start-offset", "1")
    assert aborted.exit_code == 0, aborted.stderr
    assert _last_stable_offset(bootstrap, topic) == 4  # past the marker: nothing held back
    after = rows(tool(bootstrap, "describe-producers", "--topic", topic, "--partition", "0"))
    assert after[1][0] == "424242" and after[1][5] == "None"
    assert rows(tool(bootstrap, "find-hanging", "--topic", topic,
                     "--max-transaction-timeout", "0")) == hanging[:1]
