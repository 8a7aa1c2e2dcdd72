"""Records read back from the coordinators' logs, damaged: whatever the bytes of a key or a
value, loading `__consumer_offsets` (classic, consumer and share groups),
`__transaction_state` and `__share_group_state` skips the record with a log line and goes on;
it never raises, never allocates what a count claims, and keeps the records that are intact."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wherry.common.topic_partition import TopicPartition
from wherry.group import consumer_group_records as cgr
from wherry.group import share_group_records as sgr
from wherry.group.loader import read_partition as read_group_partition
from wherry.group.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_offset_commit_value,
    group_metadata_key,
    offset_commit_key,
)
from wherry.protocol.records import build_batch
from wherry.share.partition import StateBatch
from wherry.share.state import ShareKey, ShareState, ShareStateStore
from wherry.share.state import encode_key as share_state_key
from wherry.share.state import encode_value as share_state_value
from wherry.txn.loader import read_partition as read_txn_partition
from wherry.txn.records import TransactionLogValue
from wherry.txn.records import encode_key as txn_key
from wherry.txn.records import encode_value as txn_value

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
MEMBER = MemberMetadataValue("m-1", "inst-1", "cid", "/127.0.0.1", 30000, 10000, b"\0\1", b"\2")

GROUP_RECORDS: list[tuple[bytes, bytes]] = [
    (offset_commit_key("g", "t", 0), encode_offset_commit_value(OffsetCommitValue(42, 5, "m", 9))),
    (
        group_metadata_key("g"),
        encode_group_metadata_value(
            GroupMetadataValue("consumer", 4, "range", "m-1", 5, (MEMBER,))
        ),
    ),
    (cgr.group_metadata_key("c"), cgr.encode_epoch_value(3)),
    (
        cgr.partition_metadata_key("c"),
        cgr.encode_partition_metadata(3, (cgr.TopicMetadataValue(T1, "t", 6),)),
    ),
    (
        cgr.member_metadata_key("c", "m"),
        cgr.encode_member_metadata(
            cgr.MemberMetadataValue("i", None, "c", "/h", ("a", "b"), "x.*", 300_000, "range")
        ),
    ),
    (cgr.target_member_key("c", "m"), cgr.encode_target_member({T1: frozenset({3})})),
    (
        cgr.current_assignment_key("c", "m"),
        cgr.encode_current_assignment(
            cgr.CurrentAssignmentValue(5, 4, 1, {T1: frozenset({1, 2})}, {T2: frozenset({0})})
        ),
    ),
    (sgr.group_metadata_key("s"), sgr.encode_group_metadata(2, 77)),
    (
        sgr.member_metadata_key("s", "m"),
        sgr.encode_member_metadata(sgr.ShareMemberValue(None, "c", "/h", ("a",))),
    ),
    (
        sgr.current_assignment_key("s", "m"),
        sgr.encode_current_assignment(sgr.ShareCurrentAssignment(3, 2, 0, {T1: frozenset({0})})),
    ),
    (
        sgr.state_metadata_key("s"),
        sgr.encode_state_metadata([sgr.StateTopic(T1, "a", frozenset({0, 2}), 123)], deleting=[]),
    ),
]
TXN_VALUE = TransactionLogValue(
    1000, 3, 60_000, 1, frozenset({TopicPartition("t", 0)}), 1_700_000_000_123, 1_700_000_000_000
)
TXN_RECORDS = [(txn_key("tx"), txn_value(TXN_VALUE)), (txn_key("tx2"), txn_value(TXN_VALUE, 0))]
SHARE_KEY = ShareKey("g", T1, 3)
SHARE_RECORDS = [
    (
        share_state_key(SHARE_KEY),
        share_state_value(ShareState(1, 2, 10, (StateBatch(10, 12, 0, 1),))),
    )
]

HOSTILE_PATCHES = st.sampled_from(
    [
        b"\xff\xff\xff\xff\x0f",
        b"\x7f\xff\xff\xff",
        b"\x7f\xff",
        b"\xff\xfe",
        b"\x80\x80\x80\x80\x80",
    ]
) | st.binary(min_size=1, max_size=6)


@st.composite
def damaged(draw: st.DrawFn, raw: bytes) -> bytes:
    out = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(0, len(out) - 1)))
        patch = draw(HOSTILE_PATCHES)
        out[at : at + len(patch)] = patch
    return bytes(out[: draw(st.integers(0, len(out)))])


def _batches(records: list[tuple[bytes | None, bytes | None]]) -> list[bytes]:
    return [build_batch([r]) for r in records]


def test_intact_records_load() -> None:
    snap = read_group_partition(_batches(GROUP_RECORDS))  # type: ignore[arg-type]
    assert snap.skipped == 0 and snap.records == len(GROUP_RECORDS)
    assert set(read_txn_partition(_batches(TXN_RECORDS))) == {"tx", "tx2"}  # type: ignore[arg-type]
    store = ShareStateStore()
    assert store.load(0, SHARE_RECORDS) == 1


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(GROUP_RECORDS) - 1), st.booleans(), st.data())
def test_damaged_group_record_is_skipped(index: int, in_key: bool, data: st.DataObject) -> None:
    key, value = GROUP_RECORDS[index]
    if in_key:
        key = data.draw(damaged(key))
    else:
        value = data.draw(damaged(value))
    snap = read_group_partition(_batches([(key, value), *GROUP_RECORDS]))  # type: ignore[arg-type]
    assert snap.records == len(GROUP_RECORDS) + 1
    assert snap.skipped <= 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(TXN_RECORDS) - 1), st.booleans(), st.data())
def test_damaged_txn_record_is_skipped(index: int, in_key: bool, data: st.DataObject) -> None:
    key, value = TXN_RECORDS[index]
    if in_key:
        key = data.draw(damaged(key))
    else:
        value = data.draw(damaged(value))
    loaded = read_txn_partition(_batches([(key, value), *TXN_RECORDS]))  # type: ignore[arg-type]
    assert loaded["tx"] == TXN_VALUE


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.data())
def test_damaged_share_state_is_skipped(in_key: bool, data: st.DataObject) -> None:
    key, value = SHARE_RECORDS[0]
    if in_key:
        key = data.draw(damaged(key))
    else:
        value = data.draw(damaged(value))
    store = ShareStateStore()
    store.load(0, [(key, value), *SHARE_RECORDS])
    assert SHARE_KEY in store.states


def test_huge_counts_are_refused_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """A count of two billion in a 30-byte value fails at the count, with one log line."""
    key, value = GROUP_RECORDS[2 + 1]  # consumer-group partition metadata: an array first
    huge = value[:6] + b"\xff\xff\xff\xff\x07" + value[7:]
    with caplog.at_level(logging.ERROR):
        snap = read_group_partition(_batches([(key, huge)]))  # type: ignore[arg-type]
    assert snap.skipped == 1
    assert any("Skipping unreadable record" in r.message for r in caplog.records)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x05ab"])
def test_short_share_state_records_are_value_errors(data: bytes) -> None:
    from wherry.share.state import decode_key, decode_value

    with pytest.raises(ValueError):
        decode_key(data)
    with pytest.raises(ValueError):
        decode_value(data)
