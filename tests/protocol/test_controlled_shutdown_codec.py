"""The ControlledShutdown (key 7, v0–v3) wire codec.

Golden frames are written by hand from Kafka 3.9's ControlledShutdownRequest.json /
ControlledShutdownResponse.json with `struct` (tests/golden_bytes.py), not with the codec.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.golden_bytes import carr, cstr, i16, i32, i64, larr, lstr, uv
from wherry.protocol.codec import (
    Request,
    RequestDecodeError,
    ResponseDecodeError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from wherry.protocol.controlled_shutdown_codec import (
    CONTROLLED_SHUTDOWN_VERSIONS,
    DEFAULT_CONTROLLED_SHUTDOWN_VERSION,
    decode_controlled_shutdown_request,
    decode_controlled_shutdown_request_body,
    decode_controlled_shutdown_response,
    decode_controlled_shutdown_response_body,
    encode_controlled_shutdown_request,
    encode_controlled_shutdown_request_body,
    encode_controlled_shutdown_response,
    encode_controlled_shutdown_response_body,
    request_header_version,
    response_header_version,
)
from wherry.protocol.interbroker import (
    CONTROLLED_SHUTDOWN_KEY,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    RemainingPartition,
)
from wherry.protocol.interbroker_codec import InterbrokerEncodeError
from wherry.protocol.tolerant import DecodeError
from wherry.server.handlers import SUPPORTED_VERSIONS

KEY = CONTROLLED_SHUTDOWN_KEY
VERSIONS = list(range(CONTROLLED_SHUTDOWN_VERSIONS[0], CONTROLLED_SHUTDOWN_VERSIONS[1] + 1))
NO_TAGS = b"\x00"
REQUEST = ControlledShutdownRequest(broker_id=2, broker_epoch=0x1_0000_0005)
RESPONSE = ControlledShutdownResponse(
    error_code=0,
    remaining_partitions=(RemainingPartition("foo", 0), RemainingPartition("bär", 7)),
)


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


# --- golden bytes -----------------------------------------------------------------------------

GOLDEN_REQUESTS = {
    # v0: non-standard header without ClientId; no BrokerEpoch.
    0: i16(KEY) + i16(0) + i32(9) + i32(2),
    1: i16(KEY) + i16(1) + i32(9) + lstr("broker-2") + i32(2),
    2: i16(KEY) + i16(2) + i32(9) + lstr("broker-2") + i32(2) + i64(0x1_0000_0005),
    3: i16(KEY) + i16(3) + i32(9) + lstr("broker-2") + NO_TAGS + i32(2) + i64(0x1_0000_0005)
    + NO_TAGS,
}

_LEGACY_RESPONSE = i16(0) + larr(lstr("foo") + i32(0), lstr("bär") + i32(7))
GOLDEN_RESPONSES = {
    0: i32(9) + _LEGACY_RESPONSE,
    1: i32(9) + _LEGACY_RESPONSE,
    2: i32(9) + _LEGACY_RESPONSE,
    3: i32(9) + NO_TAGS + i16(0)
    + carr(cstr("foo") + i32(0) + NO_TAGS, cstr("bär") + i32(7) + NO_TAGS) + NO_TAGS,
}


@pytest.mark.parametrize("version", VERSIONS)
def test_request_golden_frames(version: int) -> None:
    expected = frame(GOLDEN_REQUESTS[version])
    assert encode_request(KEY, version, 9, REQUEST, client_id="broker-2") == expected
    req = decode_request(expected[4:], SUPPORTED_VERSIONS)
    assert isinstance(req, Request)
    assert (req.api_key, req.api_version, req.correlation_id) == (KEY, version, 9)
    assert req.client_id == (None if version == 0 else "broker-2")
    # BrokerEpoch exists from v2; older versions decode Kafka's UNKNOWN_BROKER_EPOCH.
    assert req.body == ControlledShutdownRequest(2, REQUEST.broker_epoch if version >= 2 else -1)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_golden_frames(version: int) -> None:
    expected = frame(GOLDEN_RESPONSES[version])
    assert encode_response(KEY, version, 9, RESPONSE) == expected
    assert decode_response(KEY, version, expected[4:], expect_correlation_id=9) == (9, RESPONSE)


def test_error_answer_from_a_mapping_golden() -> None:
    raw = encode_response(KEY, 1, 3, {"error_code": 41})  # NOT_CONTROLLER, nothing remaining
    assert raw == frame(i32(3) + i16(41) + i32(0))
    mapped = encode_response(
        KEY, 3, 3, {"error_code": 0, "remaining_partitions": [
            {"topic_name": "t", "partition_index": 1}]},
    )
    assert mapped == frame(i32(3) + NO_TAGS + i16(0) + carr(cstr("t") + i32(1) + NO_TAGS)
                           + NO_TAGS)


def test_header_versions() -> None:
    assert [request_header_version(v) for v in VERSIONS] == [0, 1, 1, 2]
    assert [response_header_version(v) for v in VERSIONS] == [0, 0, 0, 1]
    assert DEFAULT_CONTROLLED_SHUTDOWN_VERSION == 3
    assert SUPPORTED_VERSIONS[KEY] == (0, 3)


def test_bodies_alone() -> None:
    assert encode_controlled_shutdown_request_body(2, REQUEST) == i32(2) + i64(REQUEST.broker_epoch)
    assert decode_controlled_shutdown_request_body(3, i32(2) + i64(5) + NO_TAGS) == (
        ControlledShutdownRequest(2, 5)
    )
    body = encode_controlled_shutdown_response_body(0, RESPONSE)
    assert body == _LEGACY_RESPONSE
    assert decode_controlled_shutdown_response_body(0, body) == RESPONSE


def test_unknown_tagged_fields_are_skipped_in_v3() -> None:
    tagged = uv(1) + uv(7) + uv(2) + b"zz"  # one unknown tag (7) of two bytes
    raw = i16(KEY) + i16(3) + i32(1) + lstr(None) + tagged + i32(4) + i64(8) + tagged
    req = decode_request(raw, SUPPORTED_VERSIONS)
    assert isinstance(req, Request) and req.body == ControlledShutdownRequest(4, 8)
    resp = i32(1) + tagged + i16(0) + carr(cstr("t") + i32(0) + tagged) + tagged
    assert decode_response(KEY, 3, resp)[1] == ControlledShutdownResponse(
        0, (RemainingPartition("t", 0),)
    )


# --- round trips ------------------------------------------------------------------------------

names = st.text(min_size=0, max_size=20)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(VERSIONS), int32s, int64s, int32s, st.one_of(st.none(), names))
def test_request_round_trip(
    version: int, broker_id: int, epoch: int, cid: int, client_id: str | None
) -> None:
    body = ControlledShutdownRequest(broker_id, epoch)
    raw = encode_controlled_shutdown_request(version, cid, client_id, body)
    decoded = decode_controlled_shutdown_request(raw[4:])
    assert decoded.api_version == version and decoded.correlation_id == cid
    assert decoded.client_id == (None if version == 0 else client_id)
    assert decoded.body == ControlledShutdownRequest(broker_id, epoch if version >= 2 else -1)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(VERSIONS),
    st.integers(-(2**15), 2**15 - 1),
    st.lists(st.builds(RemainingPartition, names, int32s), max_size=10),
    int32s,
)
def test_response_round_trip(
    version: int, error: int, remaining: list[RemainingPartition], cid: int
) -> None:
    body = ControlledShutdownResponse(error, tuple(remaining))
    raw = encode_controlled_shutdown_response(version, cid, body)
    assert decode_controlled_shutdown_response(version, raw[4:]) == (cid, body)


# --- malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_raises_decode_error(version: int) -> None:
    req, resp = GOLDEN_REQUESTS[version], GOLDEN_RESPONSES[version]
    for cut in range(len(req)):
        with pytest.raises(DecodeError):
            decode_controlled_shutdown_request(req[:cut])
        if cut >= 8:
            with pytest.raises(RequestDecodeError):
                decode_request(req[:cut], SUPPORTED_VERSIONS)
    for cut in range(len(resp)):
        with pytest.raises(DecodeError):
            decode_controlled_shutdown_response(version, resp[:cut])
        with pytest.raises(ResponseDecodeError):
            decode_response(KEY, version, resp[:cut])


@pytest.mark.parametrize("version", VERSIONS)
def test_trailing_bytes_raise(version: int) -> None:
    with pytest.raises(RequestDecodeError, match="unexpected bytes"):
        decode_request(GOLDEN_REQUESTS[version] + b"\x00", SUPPORTED_VERSIONS)
    with pytest.raises(ResponseDecodeError, match="unexpected bytes"):
        decode_response(KEY, version, GOLDEN_RESPONSES[version] + b"\x00")


def test_bad_lengths_strings_and_varints_raise_decode_error() -> None:
    bad_responses = {
        "negative array": (0, i32(1) + i16(0) + i32(-1)),
        "absurd array": (0, i32(1) + i16(0) + i32(0x7FFFFFFF) + lstr("t") + i32(0)),
        "null topic": (0, i32(1) + i16(0) + larr(i16(-1) + i32(0))),
        "negative string": (1, i32(1) + i16(0) + larr(i16(-5) + i32(0))),
        "bad utf-8": (2, i32(1) + i16(0) + larr(i16(2) + b"\xff\xfe" + i32(0))),
        "null compact array": (3, i32(1) + NO_TAGS + i16(0) + uv(0) + NO_TAGS),
        "over-long varint": (3, i32(1) + NO_TAGS + i16(0) + b"\xff\xff\xff\xff\xff\x01"),
        "absurd tag count": (3, i32(1) + NO_TAGS + i16(0) + carr() + uv(100)),
        "tag size past end": (3, i32(1) + NO_TAGS + i16(0) + carr() + uv(1) + uv(0) + uv(9)),
    }
    for what, (version, raw) in bad_responses.items():
        with pytest.raises(DecodeError):
            decode_controlled_shutdown_response(version, raw)
            pytest.fail(what)
    with pytest.raises(DecodeError, match="truncated"):
        decode_controlled_shutdown_request(i16(KEY) + i16(1) + i32(1) + i16(50) + b"abc")
    with pytest.raises(DecodeError, match="not ControlledShutdown"):
        decode_controlled_shutdown_request(i16(6) + i16(1) + i32(1) + i32(0))


def test_unsupported_versions() -> None:
    raw = i16(KEY) + i16(4) + i32(1) + lstr(None) + NO_TAGS + i32(0) + i64(0) + NO_TAGS
    with pytest.raises(RequestDecodeError, match="unsupported version 4"):
        decode_request(raw, SUPPORTED_VERSIONS)
    with pytest.raises(DecodeError, match="not supported"):
        decode_controlled_shutdown_request(raw)
    with pytest.raises(ResponseDecodeError):
        decode_response(KEY, 4, i32(1) + NO_TAGS + i16(0) + carr() + NO_TAGS)
    with pytest.raises(InterbrokerEncodeError):
        encode_request(KEY, -1, 1, REQUEST)
    with pytest.raises(InterbrokerEncodeError):
        encode_response(KEY, 4, 1, RESPONSE)


def test_values_the_wire_cannot_carry_are_refused() -> None:
    with pytest.raises(InterbrokerEncodeError):
        encode_request(KEY, 3, 1, ControlledShutdownRequest(2**31, 0))
    with pytest.raises(InterbrokerEncodeError):
        encode_request(KEY, 2, 1, ControlledShutdownRequest(1, 2**63))
    with pytest.raises(InterbrokerEncodeError):
        encode_request(KEY, 1, 1, {"broker_id": 1})  # not the dataclass
    with pytest.raises(InterbrokerEncodeError):
        encode_response(KEY, 0, 1, ControlledShutdownResponse(2**15))
    with pytest.raises(InterbrokerEncodeError):
        encode_response(KEY, 3, 1, {"error_code": 0, "remaining_partitions": [{"topic": "x"}]})
    with pytest.raises(InterbrokerEncodeError):
        too_long = RemainingPartition("x" * 40000, 0)
        encode_response(KEY, 3, 1, ControlledShutdownResponse(0, (too_long,)))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VERSIONS), st.binary(max_size=60))
def test_garbage_bodies_decode_or_raise_decode_error(version: int, tail: bytes) -> None:
    raw = struct.pack(">hhi", KEY, version, 1) + tail
    try:
        decode_request(raw, SUPPORTED_VERSIONS)
    except RequestDecodeError:
        pass
    try:
        decode_response(KEY, version, struct.pack(">i", 1) + tail)
    except ResponseDecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VERSIONS), st.data())
def test_mutated_frames_decode_or_raise_decode_error(version: int, data: st.DataObject) -> None:
    raw = bytearray(GOLDEN_RESPONSES[version])
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_controlled_shutdown_response(version, bytes(raw))
    except DecodeError:
        pass
