"""`__consumer_offsets` records against byte vectors written out from Kafka's message schemas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.golden_bytes import cstr, i16, i32, i64, lstr
from wherry.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_offset_commit_value,
    encode_subscription,
    group_metadata_key,
    java_string_hash,
    offset_commit_key,
    parse_subscription_topics,
    partition_for,
)

# --- keys ------------------------------------------------------------------------------------


def test_offset_commit_key_bytes() -> None:
    raw = offset_commit_key("grp", "topic", 7)
    assert raw == i16(1) + lstr("grp") + lstr("topic") + i32(7)
    assert decode_key(raw) == OffsetCommitKey("grp", "topic", 7)
    # Key version 0 has the same layout (written by Kafka before 2.x).
    assert decode_key(i16(0) + lstr("g") + lstr("t") + i32(0)) == OffsetCommitKey("g", "t", 0)


def test_group_metadata_key_bytes() -> None:
    raw = group_metadata_key("my-group")
    assert raw == i16(2) + lstr("my-group")
    assert decode_key(raw) == GroupMetadataKey("my-group")


def test_unknown_key_versions_are_reported_not_failed() -> None:
    # KIP-848 consumer-group records use key versions 3+; the classic coordinator skips them.
    assert decode_key(i16(3) + lstr("g")) == UnknownKey(3)


def test_truncated_key_is_an_error() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(i16(1) + lstr("grp") + b"\x00")


# --- offset commit values ----------------------------------------------------------------------


def test_offset_commit_value_v3_bytes() -> None:
    v = OffsetCommitValue(offset=42, leader_epoch=5, metadata="meta", commit_timestamp_ms=1000)
    raw = encode_offset_commit_value(v)
    assert raw == i16(3) + i64(42) + i32(5) + lstr("meta") + i64(1000)
    assert decode_offset_commit_value(raw) == v


def test_offset_commit_value_v1_with_expire_timestamp() -> None:
    v = OffsetCommitValue(9, -1, "", 1000, expire_timestamp_ms=5000)
    raw = encode_offset_commit_value(v)
    assert raw == i16(1) + i64(9) + lstr("") + i64(1000) + i64(5000)
    assert decode_offset_commit_value(raw) == v


def test_offset_commit_value_old_versions_decode() -> None:
    v0 = i16(0) + i64(3) + lstr("x") + i64(77)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(3, -1, "x", 77, -1)
    v2 = i16(2) + i64(3) + lstr("x") + i64(77)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(3, -1, "x", 77, -1)


def test_offset_commit_value_v4_flexible_decodes() -> None:
    # v4: compact string metadata, then a tagged-field section (here: one unknown tag).
    raw = i16(4) + i64(100) + i32(2) + cstr("md") + i64(123) + b"\x01" + b"\x05\x02ab"
    assert decode_offset_commit_value(raw) == OffsetCommitValue(100, 2, "md", 123, -1)
    assert decode_offset_commit_value(i16(4) + i64(1) + i32(-1) + cstr("") + i64(2) + b"\x00") == (
        OffsetCommitValue(1, -1, "", 2, -1))


def test_offset_commit_value_unknown_version() -> None:
    with pytest.raises(RecordFormatError, match="Unknown offset message version"):
        decode_offset_commit_value(i16(5) + i64(1))


# --- group metadata values -----------------------------------------------------------------------

MEMBER = MemberMetadataValue(
    member_id="m-1",
    group_instance_id="inst-1",
    client_id="cid",
    client_host="/127.0.0.1",
    rebalance_timeout_ms=30000,
    session_timeout_ms=10000,
    subscription=b"\x00\x01",
    assignment=b"\x02",
)


def member_bytes_v3(m: MemberMetadataValue) -> bytes:
    return (lstr(m.member_id) + lstr(m.group_instance_id) + lstr(m.client_id) + lstr(m.client_host)
            + i32(m.rebalance_timeout_ms) + i32(m.session_timeout_ms)
            + i32(len(m.subscription)) + m.subscription + i32(len(m.assignment)) + m.assignment)


def test_group_metadata_value_v3_bytes() -> None:
    v = GroupMetadataValue("consumer", 4, "range", "m-1", 1234, (MEMBER,))
    raw = encode_group_metadata_value(v)
    assert raw == (i16(3) + lstr("consumer") + i32(4) + lstr("range") + lstr("m-1") + i64(1234)
                   + i32(1) + member_bytes_v3(MEMBER))
    assert decode_group_metadata_value(raw) == v


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    v = GroupMetadataValue("consumer", 2, None, None, 99, ())
    raw = encode_group_metadata_value(v)
    assert raw == i16(3) + lstr("consumer") + i32(2) + lstr(None) + lstr(None) + i64(99) + i32(0)
    assert decode_group_metadata_value(raw) == v


def test_group_metadata_value_v0_to_v2_decode() -> None:
    m = MEMBER
    v0 = (i16(0) + lstr("consumer") + i32(1) + lstr("range") + lstr("m-1") + i32(1)
          + lstr(m.member_id) + lstr(m.client_id) + lstr(m.client_host) + i32(m.session_timeout_ms)
          + i32(2) + m.subscription + i32(1) + m.assignment)
    got = decode_group_metadata_value(v0)
    assert got.current_state_timestamp_ms == -1
    # v0 had no rebalance timeout: it equals the session timeout.
    assert got.members[0].rebalance_timeout_ms == m.session_timeout_ms
    assert got.members[0].group_instance_id is None
    v2 = encode_group_metadata_value(GroupMetadataValue("c", 1, "p", "m-1", 5, (MEMBER,)), 2)
    got2 = decode_group_metadata_value(v2)
    assert got2.current_state_timestamp_ms == 5
    assert got2.members[0].rebalance_timeout_ms == 30000
    assert got2.members[0].group_instance_id is None  # v2 has no instance id


def test_group_metadata_value_v4_flexible_decodes() -> None:
    m = MEMBER
    member = (cstr(m.member_id) + cstr(m.group_instance_id) + cstr(m.client_id)
              + cstr(m.client_host) + i32(m.rebalance_timeout_ms) + i32(m.session_timeout_ms)
              + bytes([len(m.subscription) + 1]) + m.subscription
              + bytes([len(m.assignment) + 1]) + m.assignment + b"\x00")
    raw = (i16(4) + cstr("consumer") + i32(4) + cstr("range") + cstr(None) + i64(7)
           + b"\x02" + member + b"\x00")
    assert decode_group_metadata_value(raw) == GroupMetadataValue(
        "consumer", 4, "range", None, 7, (MEMBER,))


@given(
    st.text(max_size=20), st.integers(-(2**31), 2**31 - 1), st.none() | st.text(max_size=10),
    st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3),
)
def test_group_metadata_value_round_trip(
    ptype: str, gen: int, proto: str | None, members: list[tuple[str, bytes]]
) -> None:
    v = GroupMetadataValue(ptype, gen, proto, proto, 1, tuple(
        MemberMetadataValue(mid, None, "c", "h", 1, 2, data, data[::-1]) for mid, data in members))
    assert decode_group_metadata_value(encode_group_metadata_value(v)) == v


# --- placement -------------------------------------------------------------------------------


@pytest.mark.parametrize("s,h", [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
    ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair hashes as two UTF-16 units
])
def test_java_string_hash(s: str, h: int) -> None:
    assert java_string_hash(s) == h


def test_partition_for_is_kafkas() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    neg = "test-group-with-negative-hash"
    h = java_string_hash(neg)
    assert partition_for(neg, 50) == abs(h) % 50


# --- consumer protocol -------------------------------------------------------------------------


def test_subscription_topics() -> None:
    assert parse_subscription_topics(encode_subscription(["a", "b"], b"ud")) == ["a", "b"]
    # A later version (v1+) only appends fields; v0 is its prefix.
    v1 = i16(1) + i32(1) + lstr("t") + i32(-1) + i32(0)
    assert parse_subscription_topics(v1) == ["t"]
    with pytest.raises(RecordFormatError):
        parse_subscription_topics(b"\x00")
