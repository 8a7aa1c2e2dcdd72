"""`__transaction_state` keys and values byte for byte as Kafka's TransactionLog schemas lay
them out, and Kafka's placement of transactional ids."""

from __future__ import annotations

import struct

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import build_batch
from wherry.txn.loader import read_partition
from wherry.txn.metadata import TxnState
from wherry.txn.records import (
    RecordFormatError,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)

VALUE = TransactionLogValue(
    producer_id=1000,
    producer_epoch=3,
    timeout_ms=60_000,
    state_id=TxnState.ONGOING.id,
    partitions=frozenset({TopicPartition("t", 2), TopicPartition("t", 0)}),
    last_update_timestamp_ms=1_700_000_000_123,
    start_timestamp_ms=1_700_000_000_000,
)

# TransactionLogValue v0: version, ProducerId, ProducerEpoch, TransactionTimeoutMs,
# TransactionStatus, TransactionPartitions [Topic, PartitionIds], last update, start.
GOLDEN_V0 = (
    bytes.fromhex("0000")
    + bytes.fromhex("00000000000003e8")
    + bytes.fromhex("0003")
    + bytes.fromhex("0000ea60")
    + bytes.fromhex("01")
    + bytes.fromhex("00000001")  # one topic
    + bytes.fromhex("0001") + b"t"
    + bytes.fromhex("00000002") + bytes.fromhex("00000000") + bytes.fromhex("00000002")
    + struct.pack(">q", 1_700_000_000_123)
    + struct.pack(">q", 1_700_000_000_000)
)
# v1 is flexible: compact arrays/strings (length + 1), a tagged-field count per struct.
GOLDEN_V1 = (
    bytes.fromhex("0001")
    + bytes.fromhex("00000000000003e8")
    + bytes.fromhex("0003")
    + bytes.fromhex("0000ea60")
    + bytes.fromhex("01")
    + bytes.fromhex("02")
    + bytes.fromhex("02") + b"t"
    + bytes.fromhex("03") + bytes.fromhex("00000000") + bytes.fromhex("00000002")
    + bytes.fromhex("00")
    + struct.pack(">q", 1_700_000_000_123)
    + struct.pack(">q", 1_700_000_000_000)
    + bytes.fromhex("00")
)


def test_key_layout() -> None:
    assert encode_key("tx") == bytes.fromhex("0000" "0002") + b"tx"
    assert decode_key(encode_key("tx-é")) == "tx-é"
    assert decode_key(bytes.fromhex("0001" "0002") + b"tx") is None  # unknown key version


def test_value_v0_golden_bytes_round_trip() -> None:
    assert encode_value(VALUE) == GOLDEN_V0
    assert decode_value(GOLDEN_V0) == VALUE


def test_value_v1_flexible_round_trip() -> None:
    assert encode_value(VALUE, 1) == GOLDEN_V1
    assert decode_value(GOLDEN_V1) == VALUE


def test_empty_partitions_and_state_ids() -> None:
    v = TransactionLogValue(5, 0, 1000, TxnState.EMPTY.id, frozenset(), 10, -1)
    assert decode_value(encode_value(v)) == v
    assert [s.id for s in TxnState] == list(range(8))
    assert TxnState.from_id(7) is TxnState.PREPARE_EPOCH_FENCE
    assert str(TxnState.PREPARE_COMMIT) == "PrepareCommit"


def test_bad_values_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        decode_value(GOLDEN_V0[:-1])
    with pytest.raises(RecordFormatError):
        decode_value(GOLDEN_V0 + b"\0")
    with pytest.raises(RecordFormatError):
        decode_value(bytes.fromhex("0009") + GOLDEN_V0[2:])


def test_partition_for_is_kafkas_java_hash_placement() -> None:
    # Java: Math.abs("my-txn".hashCode()) % 50; "my-txn".hashCode() == -1061187895
    assert partition_for("my-txn", 50) == 1061187895 % 50
    # Integer.MIN_VALUE hashes map to 0 (Kafka's Utils.abs): "polygenelubricants"
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(f"t{i}", 7) < 7 for i in range(100))


def test_loader_last_value_wins_and_tombstones_remove() -> None:
    other = TransactionLogValue(7, 0, 1000, TxnState.EMPTY.id, frozenset(), 1, -1)
    chunks = [
        build_batch(
            [(encode_key("a"), encode_value(other)), (encode_key("b"), encode_value(other))]
        ),
        build_batch([(encode_key("a"), encode_value(VALUE)), (encode_key("b"), None)]),
    ]
    assert read_partition(chunks) == {"a": VALUE}
