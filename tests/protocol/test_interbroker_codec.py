"""The LeaderAndIsr / StopReplica / UpdateMetadata wire codec.

Golden frames here are written by hand from Kafka 3.9's message schemas with `struct`, not with
the codec, so a codec that only agrees with itself fails them.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.golden_bytes import carr, cstr, i8, i16, i32, i64, larr, lstr, uv
from wherry.protocol.codec import (
    Request,
    RequestDecodeError,
    decode_request,
    encode_request,
    encode_response,
)
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_codec import (
    DEFAULT_INTERBROKER_VERSIONS,
    INTERBROKER_VERSIONS,
    DecodeError,
    InterbrokerEncodeError,
    decode_interbroker_request,
    decode_interbroker_request_body,
    decode_interbroker_response,
    decode_interbroker_response_body,
    encode_interbroker_request,
    encode_interbroker_request_body,
    encode_interbroker_response,
    encode_interbroker_response_body,
    request_header_version,
    response_header_version,
    with_topic_ids,
)

ZERO = uuid.UUID(int=0)
TID = uuid.UUID("0123456789abcdef0123456789abcdef")
ALL_VERSIONS = [(k, v) for k, (lo, hi) in INTERBROKER_VERSIONS.items() for v in range(lo, hi + 1)]
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


# --- hand encoders for golden bytes (independent of the codec) --------------------------------


def lints(*xs: int) -> bytes:
    return larr(*(i32(x) for x in xs))


def cints(*xs: int) -> bytes:
    return carr(*(i32(x) for x in xs))


NO_TAGS = b"\x00"


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


def req_header(api_key: int, version: int, cid: int, client: str | None, flexible: bool) -> bytes:
    return i16(api_key) + i16(version) + i32(cid) + lstr(client) + (NO_TAGS if flexible else b"")


# --- golden: LeaderAndIsr ---------------------------------------------------------------------


LAI_STATE_FOO_0 = LeaderAndIsrPartitionState(
    topic_name="foo",
    partition_index=0,
    controller_epoch=5,
    leader=1,
    leader_epoch=3,
    isr=(1, 2),
    partition_epoch=7,
    replicas=(1, 2, 3),
    adding_replicas=(3,),
    removing_replicas=(),
    is_new=True,
    leader_recovery_state=1,
)
LAI_STATE_FOO_1 = LeaderAndIsrPartitionState("foo", 1, 5, 2, 0, (2,), 0, (2,))
LAI_V7 = LeaderAndIsrRequest(
    controller_id=1,
    controller_epoch=5,
    broker_epoch=100,
    partition_states=(LAI_STATE_FOO_0, LAI_STATE_FOO_1),
    topic_ids={"foo": TID},
    live_leaders=(BrokerEndpoint(1, "h1", 9092), BrokerEndpoint(2, "h2", 9093)),
    is_full=True,
)


def test_leader_and_isr_v7_golden_frame() -> None:
    flexible_state_0 = (
        i32(0)
        + i32(5)
        + i32(1)
        + i32(3)
        + cints(1, 2)
        + i32(7)
        + cints(1, 2, 3)
        + cints(3)
        + cints()
        + i8(1)  # IsNew
        + i8(1)  # LeaderRecoveryState
        + NO_TAGS
    )
    flexible_state_1 = (
        (i32(1) + i32(5) + i32(2) + i32(0) + cints(2) + i32(0) + cints(2) + cints() + cints())
        + i8(0)
        + i8(0)
        + NO_TAGS
    )
    body = (
        i32(1)  # ControllerId
        + i8(0)  # isKRaftController
        + i32(5)  # ControllerEpoch
        + i64(100)  # BrokerEpoch
        + i8(2)  # Type = FULL
        + carr(cstr("foo") + TID.bytes + carr(flexible_state_0, flexible_state_1) + NO_TAGS)
        + carr(
            i32(1) + cstr("h1") + i32(9092) + NO_TAGS,
            i32(2) + cstr("h2") + i32(9093) + NO_TAGS,
        )
        + NO_TAGS
    )
    expected = frame(req_header(4, 7, 0x01020304, "ctl", True) + body)
    assert encode_interbroker_request(4, 7, 0x01020304, "ctl", LAI_V7) == expected
    decoded = decode_interbroker_request(expected[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (4, 7, 0x01020304)
    assert decoded.client_id == "ctl"
    assert decoded.body == LAI_V7


def test_leader_and_isr_v1_golden_body_is_ungrouped() -> None:
    req = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=5,
        broker_epoch=-1,
        partition_states=(
            LAI_STATE_FOO_1,
            LeaderAndIsrPartitionState("b", 4, 5, 1, 2, (1,), 3, (1,)),
        ),
        topic_ids={},
        live_leaders=(BrokerEndpoint(1, "h1", 9092),),
    )
    body = (
        i32(1)
        + i32(5)
        + larr(
            lstr("foo") + i32(1) + i32(5) + i32(2) + i32(0) + lints(2) + i32(0) + lints(2) + i8(0),
            lstr("b") + i32(4) + i32(5) + i32(1) + i32(2) + lints(1) + i32(3) + lints(1) + i8(0),
        )
        + larr(i32(1) + lstr("h1") + i32(9092))
    )
    assert encode_interbroker_request_body(4, 1, req) == body
    assert decode_interbroker_request_body(4, 1, body) == req


def test_leader_and_isr_v3_golden_body_groups_by_topic() -> None:
    state = LeaderAndIsrPartitionState("t", 0, 1, 1, 1, (1,), 1, (1,), (2,), (3,), False)
    req = LeaderAndIsrRequest(1, 2, 3, (state,), {}, ())
    body = (
        i32(1)
        + i32(2)
        + i64(3)
        + larr(
            lstr("t")
            + larr(
                i32(0) + i32(1) + i32(1) + i32(1) + lints(1) + i32(1) + lints(1)
                + lints(2) + lints(3) + i8(0)
            )
        )
        + larr()
    )  # fmt: skip
    assert encode_interbroker_request_body(4, 3, req) == body
    assert decode_interbroker_request_body(4, 3, body) == req


def test_leader_and_isr_response_goldens() -> None:
    v0 = LeaderAndIsrResponse(0, (LeaderAndIsrPartitionError("foo", 1, 6),))
    body_v0 = i16(0) + larr(lstr("foo") + i32(1) + i16(6))
    assert encode_interbroker_response_body(4, 0, v0) == body_v0
    assert decode_interbroker_response_body(4, 0, body_v0) == v0

    v5 = LeaderAndIsrResponse(
        0,
        (
            LeaderAndIsrPartitionError("", 0, 0, TID),
            LeaderAndIsrPartitionError("", 1, 6, TID),
        ),
    )
    expected = frame(
        i32(77)
        + NO_TAGS  # response header v1
        + i16(0)
        + carr(TID.bytes + carr(i32(0) + i16(0) + NO_TAGS, i32(1) + i16(6) + NO_TAGS) + NO_TAGS)
        + NO_TAGS
    )
    assert encode_interbroker_response(4, 5, 77, v5) == expected
    assert decode_interbroker_response(4, 5, expected[4:]) == (77, v5)


def test_with_topic_ids_fills_ids_for_v5_responses() -> None:
    resp = LeaderAndIsrResponse(0, (LeaderAndIsrPartitionError("foo", 0, 0),))
    filled = with_topic_ids(resp, {"foo": TID})
    assert filled.partition_errors[0].topic_id == TID
    _, decoded = decode_interbroker_response(4, 7, encode_interbroker_response(4, 7, 1, filled)[4:])
    assert decoded == LeaderAndIsrResponse(0, (LeaderAndIsrPartitionError("", 0, 0, TID),))
    # Without an id the topic goes out as the zero UUID, as Kafka does for unknown ids.
    _, decoded = decode_interbroker_response(4, 7, encode_interbroker_response(4, 7, 1, resp)[4:])
    assert isinstance(decoded, LeaderAndIsrResponse)
    assert decoded.partition_errors[0].topic_id == ZERO


# --- golden: StopReplica ----------------------------------------------------------------------


def test_stop_replica_v4_golden_frame() -> None:
    req = StopReplicaRequest(
        controller_id=1,
        controller_epoch=9,
        broker_epoch=42,
        partitions=(
            StopReplicaPartition("a", 0, 4, True),
            StopReplicaPartition("a", 2, -1, False),
            StopReplicaPartition("bb", 1, 7, True),
        ),
    )
    body = (
        i32(1)
        + i8(0)  # isKRaftController
        + i32(9)
        + i64(42)
        + carr(
            cstr("a")
            + carr(i32(0) + i32(4) + i8(1) + NO_TAGS, i32(2) + i32(-1) + i8(0) + NO_TAGS)
            + NO_TAGS,
            cstr("bb") + carr(i32(1) + i32(7) + i8(1) + NO_TAGS) + NO_TAGS,
        )
        + NO_TAGS
    )
    expected = frame(req_header(5, 4, 3, None, True) + body)
    assert encode_interbroker_request(5, 4, 3, None, req) == expected
    decoded = decode_interbroker_request(expected[4:])
    assert decoded.client_id is None
    assert decoded.body == req


def test_stop_replica_v1_and_v0_golden_bodies() -> None:
    req = StopReplicaRequest(
        1, 9, 42, (StopReplicaPartition("a", 0, -1, True), StopReplicaPartition("a", 3, -1, True))
    )
    body_v1 = i32(1) + i32(9) + i64(42) + i8(1) + larr(lstr("a") + lints(0, 3))
    assert encode_interbroker_request_body(5, 1, req) == body_v1
    assert decode_interbroker_request_body(5, 1, body_v1) == req

    req_v0 = StopReplicaRequest(1, 9, -1, (StopReplicaPartition("a", 0, -1, False),))
    body_v0 = i32(1) + i32(9) + i8(0) + larr(lstr("a") + i32(0))
    assert encode_interbroker_request_body(5, 0, req_v0) == body_v0
    assert decode_interbroker_request_body(5, 0, body_v0) == req_v0


def test_stop_replica_response_golden() -> None:
    resp = StopReplicaResponse(0, (LeaderAndIsrPartitionError("a", 0, 0),))
    expected = frame(
        i32(5) + NO_TAGS + i16(0) + carr(cstr("a") + i32(0) + i16(0) + NO_TAGS) + NO_TAGS
    )
    assert encode_interbroker_response(5, 3, 5, resp) == expected
    assert decode_interbroker_response(5, 3, expected[4:]) == (5, resp)
    body_v1 = i16(0) + larr(lstr("a") + i32(0) + i16(0))
    assert encode_interbroker_response_body(5, 1, resp) == body_v1


# --- golden: UpdateMetadata -------------------------------------------------------------------


UM_STATE = UpdateMetadataPartitionState("foo", 0, 5, 1, 3, (1, 2), 7, (1, 2), (2,))


def test_update_metadata_v8_golden_frame() -> None:
    req = UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=5,
        broker_epoch=100,
        partition_states=(UM_STATE,),
        live_brokers=(
            BrokerEndpoint(1, "h1", 9092, "PLAINTEXT", 0, None),
            BrokerEndpoint(1, "h1", 9093, "INTERNAL", 1, None),
            BrokerEndpoint(2, "h2", 9092, "PLAINTEXT", 0, "r2"),
        ),
        topic_ids={"foo": TID},
        is_full=True,
    )
    partition = (
        i32(0) + i32(5) + i32(1) + i32(3) + cints(1, 2) + i32(7) + cints(1, 2) + cints(2) + NO_TAGS
    )
    body = (
        i32(1)
        + i8(0)  # isKRaftController
        + i32(5)
        + i64(100)
        + carr(cstr("foo") + TID.bytes + carr(partition) + NO_TAGS)
        + carr(
            i32(1)
            + carr(
                i32(9092) + cstr("h1") + cstr("PLAINTEXT") + i16(0) + NO_TAGS,
                i32(9093) + cstr("h1") + cstr("INTERNAL") + i16(1) + NO_TAGS,
            )
            + cstr(None)  # Rack
            + NO_TAGS,
            i32(2)
            + carr(i32(9092) + cstr("h2") + cstr("PLAINTEXT") + i16(0) + NO_TAGS)
            + cstr("r2")
            + NO_TAGS,
        )
        + uv(1)  # one tagged field
        + uv(0)  # tag 0: Type
        + uv(1)  # of one byte
        + i8(2)  # FULL
    )
    expected = frame(req_header(6, 8, 11, "ctl", True) + body)
    assert encode_interbroker_request(6, 8, 11, "ctl", req) == expected
    assert decode_interbroker_request(expected[4:]).body == req


def test_update_metadata_v8_incremental_type_is_not_full_and_v7_ignores_tag_0() -> None:
    base = i32(1) + i32(5) + i64(100) + carr() + carr()
    incremental = decode_interbroker_request_body(
        6, 8, i32(1) + i8(0) + base[4:] + b"\x01\x00\x01\x01"
    )
    assert incremental == UpdateMetadataRequest(1, 5, 100, (), ())
    # v7 has no Type: tag 0 is an unknown tagged field there and skipped, whatever its size.
    v7 = decode_interbroker_request_body(6, 7, base + b"\x01\x00\x03\x02\x02\x02")
    assert v7 == UpdateMetadataRequest(1, 5, 100, (), ())


def test_update_metadata_old_version_golden_bodies() -> None:
    req = UpdateMetadataRequest(
        1, 5, -1, (UM_STATE,), (BrokerEndpoint(1, "h1", 9092, "PLAINTEXT", 0, None),)
    )
    state_v4 = lstr("foo") + i32(0) + i32(5) + i32(1) + i32(3) + lints(1, 2) + i32(7) + lints(1, 2)
    body_v0 = i32(1) + i32(5) + larr(state_v4) + larr(i32(1) + lstr("h1") + i32(9092))
    req_v0 = UpdateMetadataRequest(
        1,
        5,
        -1,
        (UpdateMetadataPartitionState("foo", 0, 5, 1, 3, (1, 2), 7, (1, 2)),),
        req.live_brokers,
    )
    assert encode_interbroker_request_body(6, 0, req_v0) == body_v0
    assert decode_interbroker_request_body(6, 0, body_v0) == req_v0

    body_v4 = (
        i32(1)
        + i32(5)
        + larr(state_v4 + lints(2))
        + larr(i32(1) + larr(i32(9092) + lstr("h1") + lstr("PLAINTEXT") + i16(0)) + lstr(None))
    )
    assert encode_interbroker_request_body(6, 4, req) == body_v4
    assert decode_interbroker_request_body(6, 4, body_v4) == req

    # v1: endpoints without listener names (named for their security protocol), no rack.
    ssl = UpdateMetadataRequest(1, 5, -1, (), (BrokerEndpoint(3, "h3", 9094, "SSL", 1),))
    body_v1 = i32(1) + i32(5) + larr() + larr(i32(3) + larr(i32(9094) + lstr("h3") + i16(1)))
    assert encode_interbroker_request_body(6, 1, ssl) == body_v1
    assert decode_interbroker_request_body(6, 1, body_v1) == ssl


def test_update_metadata_response_goldens() -> None:
    assert encode_interbroker_response(6, 0, 3, UpdateMetadataResponse(35)) == frame(
        i32(3) + i16(35)
    )
    flexible = frame(i32(3) + NO_TAGS + i16(0) + NO_TAGS)
    assert encode_interbroker_response(6, 8, 3, UpdateMetadataResponse(0)) == flexible
    assert decode_interbroker_response(6, 8, flexible[4:]) == (3, UpdateMetadataResponse(0))


def test_header_versions_follow_flexible_versions() -> None:
    assert [request_header_version(4, v) for v in range(8)] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert [response_header_version(5, v) for v in range(5)] == [0, 0, 1, 1, 1]
    assert [request_header_version(6, v) for v in range(9)] == [1] * 6 + [2] * 3
    assert DEFAULT_INTERBROKER_VERSIONS == {4: 7, 5: 4, 6: 8}


def test_first_flexible_versions_golden_bodies() -> None:
    """LeaderAndIsr v4, StopReplica v2, UpdateMetadata v6: compact everything, no new fields."""
    lai = LeaderAndIsrRequest(
        1, 2, 3, (LAI_STATE_FOO_1,), {"foo": TID}, (BrokerEndpoint(1, "h", 1),), is_full=True
    )
    lai_v4 = (
        i32(1)
        + i32(2)
        + i64(3)  # no Type before v5
        + carr(  # no TopicId before v5
            cstr("foo")
            + carr(
                i32(1) + i32(5) + i32(2) + i32(0) + cints(2) + i32(0) + cints(2)
                + cints() + cints() + i8(0) + NO_TAGS  # no LeaderRecoveryState before v6
            )
            + NO_TAGS
        )
        + carr(i32(1) + cstr("h") + i32(1) + NO_TAGS)
        + NO_TAGS
    )  # fmt: skip
    assert encode_interbroker_request_body(4, 4, lai) == lai_v4
    assert decode_interbroker_request_body(4, 4, lai_v4) == LeaderAndIsrRequest(
        1, 2, 3, (LAI_STATE_FOO_1,), {}, (BrokerEndpoint(1, "h", 1),)
    )

    sr = StopReplicaRequest(1, 2, 3, (StopReplicaPartition("a", 5, -1, False),))
    sr_v2 = i32(1) + i32(2) + i64(3) + i8(0) + carr(cstr("a") + cints(5) + NO_TAGS) + NO_TAGS
    assert encode_interbroker_request_body(5, 2, sr) == sr_v2
    assert decode_interbroker_request_body(5, 2, sr_v2) == sr

    um = UpdateMetadataRequest(
        1, 2, 3, (UM_STATE,), (BrokerEndpoint(1, "h", 1, "L", 0, "r"),), {"foo": TID}
    )
    um_v6 = (
        i32(1)
        + i32(2)
        + i64(3)
        + carr(  # no TopicId before v7
            cstr("foo")
            + carr(
                i32(0) + i32(5) + i32(1) + i32(3) + cints(1, 2) + i32(7) + cints(1, 2)
                + cints(2) + NO_TAGS
            )
            + NO_TAGS
        )
        + carr(
            i32(1) + carr(i32(1) + cstr("h") + cstr("L") + i16(0) + NO_TAGS) + cstr("r") + NO_TAGS
        )
        + NO_TAGS
    )  # fmt: skip
    assert encode_interbroker_request_body(6, 6, um) == um_v6
    assert decode_interbroker_request_body(6, 6, um_v6) == UpdateMetadataRequest(
        1, 2, 3, (UM_STATE,), (BrokerEndpoint(1, "h", 1, "L", 0, "r"),)
    )


def test_unknown_tagged_fields_are_skipped() -> None:
    req = LeaderAndIsrRequest(1, 5, 100, (LAI_STATE_FOO_1,), {}, ())
    body = bytearray(encode_interbroker_request_body(4, 7, req))
    assert body[-1] == 0
    body[-1:] = b"\x02" + b"\x05\x02ab" + b"\xe7\x07\x00"  # tags 5 (2 bytes) and 999 (empty)
    assert decode_interbroker_request_body(4, 7, bytes(body)) == req


# --- encode refusals --------------------------------------------------------------------------


def test_values_a_version_cannot_carry_are_refused() -> None:
    mixed = StopReplicaRequest(
        1, 1, 1, (StopReplicaPartition("a", 0, -1, True), StopReplicaPartition("a", 1, -1, False))
    )
    for v in (0, 1, 2):
        with pytest.raises(InterbrokerEncodeError, match="DeletePartitions"):
            encode_interbroker_request_body(5, v, mixed)
    assert (
        decode_interbroker_request_body(5, 3, encode_interbroker_request_body(5, 3, mixed)) == mixed
    )

    with pytest.raises(InterbrokerEncodeError, match="leader_recovery_state"):
        encode_interbroker_request_body(4, 5, LAI_V7)
    kraft = LeaderAndIsrRequest(1, 1, 1, (), {}, (), is_kraft_controller=True)
    with pytest.raises(InterbrokerEncodeError, match="isKRaftController"):
        encode_interbroker_request_body(4, 6, kraft)
    ssl = UpdateMetadataRequest(1, 1, 1, (), (BrokerEndpoint(1, "h", 1, "SSL", 1),))
    with pytest.raises(InterbrokerEncodeError, match="PLAINTEXT"):
        encode_interbroker_request_body(6, 0, ssl)
    custom = UpdateMetadataRequest(1, 1, 1, (), (BrokerEndpoint(1, "h", 1, "INTERNAL", 0),))
    with pytest.raises(InterbrokerEncodeError, match="listener"):
        encode_interbroker_request_body(6, 2, custom)
    with pytest.raises(InterbrokerEncodeError, match="needs a LeaderAndIsrRequest"):
        encode_interbroker_request_body(4, 7, mixed)
    with pytest.raises(InterbrokerEncodeError, match="not supported"):
        encode_interbroker_request_body(4, 8, LAI_V7)
    too_big = LeaderAndIsrRequest(2**31, 1, 1, (), {}, ())
    with pytest.raises(InterbrokerEncodeError):
        encode_interbroker_request_body(4, 7, too_big)


# --- malformed input --------------------------------------------------------------------------


def test_malformed_lengths_and_varints_raise_decode_error() -> None:
    prefix_v7 = i32(1) + i8(0) + i32(5) + i64(100) + i8(0)
    cases = [
        prefix_v7 + b"\xff\xff\xff\xff\x0f",  # compact array of 2^32 - 2 topics
        prefix_v7 + b"\x80\x80\x80\x80\x80\x01",  # varint longer than 5 bytes
        prefix_v7 + b"\xff\xff\xff\xff\x7f",  # varint above 32 bits
        prefix_v7 + b"\x00",  # null (non-nullable) topic array
        prefix_v7 + carr(uv(0)),  # null topic name
        prefix_v7 + carr(b"\x03\xff\xfe"),  # topic name that is not UTF-8
        prefix_v7 + carr() + carr() + b"\x7f",  # 127 tagged fields in 0 bytes
        prefix_v7 + carr() + carr() + b"\x01\x01\x05ab",  # tagged field overruns
        prefix_v7 + carr() + carr() + NO_TAGS + b"junk",  # trailing bytes
    ]
    for body in cases:
        with pytest.raises(DecodeError):
            decode_interbroker_request_body(4, 7, body)
    legacy = i32(1) + i32(5)
    for body in (
        legacy + i32(-5),  # negative array length
        legacy + i32(2**31 - 1),  # absurd array length
        legacy + larr(i16(-2)),  # negative string length
        legacy + larr(lstr("t") + i32(0) * 4 + i32(1_000_000)),  # ISR longer than the buffer
    ):
        with pytest.raises(DecodeError):
            decode_interbroker_request_body(4, 0, body)
    with pytest.raises(DecodeError):
        decode_interbroker_request_body(4, 9, b"")
    with pytest.raises(DecodeError):
        decode_interbroker_request(i16(4) + i16(99) + i32(1) + lstr(None))
    with pytest.raises(DecodeError, match="security protocol"):
        decode_interbroker_request_body(
            6, 1, i32(1) + i32(5) + larr() + larr(i32(3) + larr(i32(1) + lstr("h") + i16(9)))
        )


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(DecodeError, ValueError)


# --- round trips (hypothesis) -----------------------------------------------------------------

int8s = st.integers(-(2**7), 2**7 - 1)
int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=10)
int32_tuples = st.lists(int32s, max_size=4).map(tuple)
nonzero_uuids = st.uuids().filter(lambda u: u != ZERO)


def topics_strategy() -> st.SearchStrategy[list[str]]:
    return st.lists(names, unique=True, max_size=3)


@st.composite
def lai_states(draw: st.DrawFn, v: int, topic: str) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(
        topic_name=topic,
        partition_index=draw(int32s),
        controller_epoch=draw(int32s),
        leader=draw(int32s),
        leader_epoch=draw(int32s),
        isr=draw(int32_tuples),
        partition_epoch=draw(int32s),
        replicas=draw(int32_tuples),
        adding_replicas=draw(int32_tuples) if v >= 3 else (),
        removing_replicas=draw(int32_tuples) if v >= 3 else (),
        is_new=draw(st.booleans()) if v >= 1 else False,
        leader_recovery_state=draw(int8s) if v >= 6 else 0,
    )


@st.composite
def lai_requests(draw: st.DrawFn, v: int) -> LeaderAndIsrRequest:
    states: list[LeaderAndIsrPartitionState] = []
    topic_ids: dict[str, uuid.UUID] = {}
    for topic in draw(topics_strategy()):
        parts = draw(st.lists(lai_states(v, topic), min_size=1, max_size=3))
        states.extend(parts)
        if v >= 5 and draw(st.booleans()):
            topic_ids[topic] = draw(nonzero_uuids)
    leaders = draw(
        st.lists(st.builds(BrokerEndpoint, int32s, names, int32s), max_size=3).map(tuple)
    )
    return LeaderAndIsrRequest(
        controller_id=draw(int32s),
        controller_epoch=draw(int32s),
        broker_epoch=draw(int64s) if v >= 2 else -1,
        partition_states=tuple(states),
        topic_ids=topic_ids,
        live_leaders=leaders,
        is_full=draw(st.booleans()) if v >= 5 else False,
        is_kraft_controller=draw(st.booleans()) if v >= 7 else False,
    )


@st.composite
def partition_errors(draw: st.DrawFn, by_id: bool) -> tuple[LeaderAndIsrPartitionError, ...]:
    out: list[LeaderAndIsrPartitionError] = []
    if by_id:
        for topic_id in draw(st.lists(st.uuids(), unique=True, max_size=3)):
            for _ in range(draw(st.integers(1, 3))):
                out.append(LeaderAndIsrPartitionError("", draw(int32s), draw(int16s), topic_id))
    else:
        for _ in range(draw(st.integers(0, 4))):
            out.append(LeaderAndIsrPartitionError(draw(names), draw(int32s), draw(int16s)))
    return tuple(out)


@st.composite
def stop_replica_requests(draw: st.DrawFn, v: int) -> StopReplicaRequest:
    delete_all = draw(st.booleans())
    parts: list[StopReplicaPartition] = []
    for topic in draw(topics_strategy()):
        for _ in range(draw(st.integers(1, 3))):
            if v >= 3:
                parts.append(
                    StopReplicaPartition(topic, draw(int32s), draw(int32s), draw(st.booleans()))
                )
            else:
                parts.append(StopReplicaPartition(topic, draw(int32s), -1, delete_all))
    return StopReplicaRequest(
        controller_id=draw(int32s),
        controller_epoch=draw(int32s),
        broker_epoch=draw(int64s) if v >= 1 else -1,
        partitions=tuple(parts),
        is_kraft_controller=draw(st.booleans()) if v >= 4 else False,
    )


@st.composite
def um_brokers(draw: st.DrawFn, v: int) -> tuple[BrokerEndpoint, ...]:
    out: list[BrokerEndpoint] = []
    for broker_id in draw(st.lists(int32s, unique=True, max_size=3)):
        rack = draw(st.none() | names) if v >= 2 else None
        if v == 0:
            out.append(BrokerEndpoint(broker_id, draw(names), draw(int32s), "PLAINTEXT", 0, None))
            continue
        for _ in range(draw(st.integers(1, 3))):
            if v >= 3:
                listener, protocol = draw(names), draw(int16s)
            else:
                protocol = draw(st.sampled_from(sorted(SECURITY_PROTOCOLS)))
                listener = SECURITY_PROTOCOLS[protocol]
            out.append(
                BrokerEndpoint(broker_id, draw(names), draw(int32s), listener, protocol, rack)
            )
    return tuple(out)


@st.composite
def um_requests(draw: st.DrawFn, v: int) -> UpdateMetadataRequest:
    states: list[UpdateMetadataPartitionState] = []
    topic_ids: dict[str, uuid.UUID] = {}
    for topic in draw(topics_strategy()):
        for _ in range(draw(st.integers(1, 3))):
            states.append(
                UpdateMetadataPartitionState(
                    topic,
                    draw(int32s),
                    draw(int32s),
                    draw(int32s),
                    draw(int32s),
                    draw(int32_tuples),
                    draw(int32s),
                    draw(int32_tuples),
                    draw(int32_tuples) if v >= 4 else (),
                )
            )
        if v >= 7 and draw(st.booleans()):
            topic_ids[topic] = draw(nonzero_uuids)
    return UpdateMetadataRequest(
        controller_id=draw(int32s),
        controller_epoch=draw(int32s),
        broker_epoch=draw(int64s) if v >= 5 else -1,
        partition_states=tuple(states),
        live_brokers=draw(um_brokers(v)),
        topic_ids=topic_ids,
        is_full=draw(st.booleans()) if v >= 8 else False,
        is_kraft_controller=draw(st.booleans()) if v >= 8 else False,
    )


def request_strategy(api_key: int, v: int) -> st.SearchStrategy[Any]:
    if api_key == 4:
        return lai_requests(v)
    if api_key == 5:
        return stop_replica_requests(v)
    return um_requests(v)


def response_strategy(api_key: int, v: int) -> st.SearchStrategy[Any]:
    if api_key == 4:
        return st.builds(LeaderAndIsrResponse, int16s, partition_errors(by_id=v >= 5))
    if api_key == 5:
        return st.builds(StopReplicaResponse, int16s, partition_errors(by_id=False))
    return st.builds(UpdateMetadataResponse, int16s)


ROUND_TRIP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@ROUND_TRIP
@given(data=st.data(), cid=int32s, client=st.none() | names)
def test_request_round_trip(
    api_key: int, version: int, data: st.DataObject, cid: int, client: str | None
) -> None:
    body = data.draw(request_strategy(api_key, version))
    raw = encode_interbroker_request(api_key, version, cid, client, body)
    assert struct.unpack_from(">i", raw)[0] == len(raw) - 4
    decoded = decode_interbroker_request(memoryview(raw)[4:])
    assert (decoded.api_key, decoded.api_version) == (api_key, version)
    assert (decoded.correlation_id, decoded.client_id) == (cid, client)
    assert decoded.body == body
    # Re-encoding what was decoded gives the same bytes.
    assert encode_interbroker_request(api_key, version, cid, client, decoded.body) == raw


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@ROUND_TRIP
@given(data=st.data(), cid=int32s)
def test_response_round_trip(api_key: int, version: int, data: st.DataObject, cid: int) -> None:
    body = data.draw(response_strategy(api_key, version))
    raw = encode_interbroker_response(api_key, version, cid, body)
    assert struct.unpack_from(">i", raw)[0] == len(raw) - 4
    assert decode_interbroker_response(api_key, version, raw[4:]) == (cid, body)


# --- fuzzing ----------------------------------------------------------------------------------

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(key_version=st.sampled_from(ALL_VERSIONS), raw=st.binary(max_size=300))
def test_random_bodies_decode_or_raise_decode_error(
    key_version: tuple[int, int], raw: bytes
) -> None:
    api_key, version = key_version
    for decode in (decode_interbroker_request_body, decode_interbroker_response_body):
        try:
            decode(api_key, version, raw)
        except DecodeError:
            pass


@FUZZ
@given(data=st.data(), key_version=st.sampled_from(ALL_VERSIONS))
def test_truncated_extended_and_mutated_frames(
    data: st.DataObject, key_version: tuple[int, int]
) -> None:
    api_key, version = key_version
    body = data.draw(request_strategy(api_key, version))
    raw = encode_interbroker_request(api_key, version, 1, "c", body)[4:]
    # Every strict prefix is truncated; anything appended is trailing garbage.
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(DecodeError):
        decode_interbroker_request(raw[:cut])
    extra = data.draw(st.binary(min_size=1, max_size=8))
    with pytest.raises(DecodeError):
        decode_interbroker_request(raw + extra)
    # Flipped bytes either still parse or raise DecodeError (and decode_request wraps it).
    mutated = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(mutated) - 1))
        mutated[pos] = data.draw(st.integers(0, 255))
    try:
        decode_interbroker_request(bytes(mutated))
    except DecodeError:
        pass
    try:
        decode_request(memoryview(bytes(mutated)), INTERBROKER_VERSIONS)
    except RequestDecodeError:
        pass


# --- integration with codec.py ----------------------------------------------------------------


def test_decode_request_returns_the_dataclass_for_leader_and_isr_v7() -> None:
    raw = encode_interbroker_request(4, 7, 99, "controller-1", LAI_V7)
    req = decode_request(memoryview(raw)[4:], {4: (0, 7)})
    assert isinstance(req, Request)
    assert (req.api_key, req.api_version, req.correlation_id) == (4, 7, 99)
    assert req.client_id == "controller-1"
    assert req.body == LAI_V7
    assert req.size_bytes == len(raw) - 4
    # Same bytes through codec.encode_request.
    assert encode_request(4, 7, 99, LAI_V7, client_id="controller-1") == raw


def test_decode_request_version_checks_and_malformed_bodies() -> None:
    raw = encode_interbroker_request(4, 7, 99, None, LAI_V7)[4:]
    with pytest.raises(RequestDecodeError, match="unsupported version"):
        decode_request(raw, {4: (0, 6)})
    with pytest.raises(RequestDecodeError, match="unsupported API key"):
        decode_request(raw, {5: (0, 4)})
    with pytest.raises(RequestDecodeError, match="not supported"):  # wider than the codec
        decode_request(i16(4) + i16(8) + raw[4:], {4: (0, 8)})
    with pytest.raises(RequestDecodeError, match="truncated"):
        decode_request(raw[:-3], {4: (0, 7)})


def test_encode_response_dispatches_interbroker_keys() -> None:
    resp = StopReplicaResponse(0, (LeaderAndIsrPartitionError("a", 0, 0),))
    assert encode_response(5, 4, 8, resp) == encode_interbroker_response(5, 4, 8, resp)
    # A plain mapping of the dataclass's fields works too (error answers).
    assert encode_response(6, 8, 8, {"error_code": 35}) == encode_interbroker_response(
        6, 8, 8, UpdateMetadataResponse(35)
    )
    from_mapping = encode_response(
        4,
        3,
        8,
        {
            "error_code": 0,
            "partition_errors": [{"topic_name": "a", "partition_index": 1, "error_code": 6}],
        },
    )
    assert decode_interbroker_response(4, 3, from_mapping[4:]) == (
        8,
        LeaderAndIsrResponse(0, (LeaderAndIsrPartitionError("a", 1, 6),)),
    )
    with pytest.raises(InterbrokerEncodeError):
        encode_response(4, 7, 8, UpdateMetadataResponse(0))


def test_big_update_metadata_states_encoded_once_for_every_broker_and_never_confused() -> None:
    """The controller sends the same states tuple to every broker: the array is encoded once
    (`_um_states_bytes` keeps it), and a request differing in version, ids or states tuple
    (even an equal one) is encoded from its own states."""
    states = tuple(
        UpdateMetadataPartitionState("big", p, 5, p % 3, 1, (p % 3, 2), 1, (p % 3, 2))
        for p in range(150)
    )

    def req(broker_epoch: int, st: tuple[UpdateMetadataPartitionState, ...],
            ids: dict[str, uuid.UUID]) -> UpdateMetadataRequest:
        return UpdateMetadataRequest(1, 5, broker_epoch, st, (BrokerEndpoint(1, "h1", 9092),),
                                     ids)

    for version in (8, 7, 5):
        a = encode_interbroker_request_body(6, version, req(100, states, {"big": TID}))
        b = encode_interbroker_request_body(6, version, req(200, states, {"big": TID}))
        assert a != b  # the broker epochs differ ...
        back = decode_interbroker_request_body(6, version, b)
        assert back.partition_states == states and back.broker_epoch == 200
        assert back.topic_ids == ({"big": TID} if version >= 7 else {})
        other = tuple(dataclasses.replace(s, leader=9) for s in states)
        c = decode_interbroker_request_body(6, version, encode_interbroker_request_body(
            6, version, req(200, other, {"big": TID})))
        assert c.partition_states == other  # ... and another tuple is not taken for the cached
        if version >= 7:
            d = decode_interbroker_request_body(6, version, encode_interbroker_request_body(
                6, version, req(200, other, {"big": uuid.UUID(int=5)})))
            assert d.topic_ids == {"big": uuid.UUID(int=5)}
