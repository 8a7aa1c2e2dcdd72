"""The hand-written ApiVersions codec (the start's early answer) against kio's, byte for byte,
for every version: requests it reads as kio does (or leaves to kio), responses it writes as
`codec.encode_response` does."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wherry.protocol.api_versions_codec import ApiVersionsRequest, encode_response, read_request
from wherry.protocol.codec import (
    Request,
    RequestDecodeError,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
)
from wherry.protocol.codec import encode_response as kio_encode_response
from wherry.server.handlers import SUPPORTED_VERSIONS
from wherry.server.handlers.api_versions import (
    DEFAULT_TRANSACTION_VERSION,
    answer,
    api_keys,
    early_answer,
    features_of,
    unsupported_version_response,
)

RANGE = SUPPORTED_VERSIONS[18]
VERSIONS = range(RANGE[0], RANGE[1] + 1)
KEYS = [(k["api_key"], k["min_version"], k["max_version"]) for k in api_keys()]


def _request(version: int, correlation_id: int, client_id: str | None = "c-1") -> bytes:
    body = (
        {"client_software_name": "wherry-test", "client_software_version": "1.2.3"}
        if version >= 3
        else {}
    )
    return encode_request(18, version, correlation_id, body, client_id=client_id)[4:]


def _kio_answer(frame: bytes) -> bytes | None:
    """What the kio path answers (Broker.handle_frame, started), None if it closes."""
    try:
        req = decode_request(frame, SUPPORTED_VERSIONS)
    except RequestDecodeError:
        return None
    if isinstance(req, UnsupportedVersion):
        return kio_encode_response(18, 0, req.correlation_id, unsupported_version_response())
    assert isinstance(req, Request)
    features = features_of(DEFAULT_TRANSACTION_VERSION)
    return kio_encode_response(
        18, req.api_version, req.correlation_id, answer(features, req.api_version)
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", ["c-1", None, "", "ünï"])
def test_requests_read_as_kio_reads_them(version: int, client_id: str | None) -> None:
    frame = _request(version, 1234567, client_id)
    got = read_request(frame, RANGE)
    req = decode_request(frame, SUPPORTED_VERSIONS)
    assert isinstance(req, Request)
    assert got is not None
    assert (got.api_version, got.correlation_id, got.client_id) == (
        req.api_version,
        req.correlation_id,
        req.client_id,
    )
    if version >= 3:
        assert got.client_software_name == req.body.client_software_name == "wherry-test"
        assert got.client_software_version == req.body.client_software_version == "1.2.3"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("error_code", [0, 35])
def test_responses_are_kios_bytes(version: int, error_code: int) -> None:
    mine = encode_response(version, -7, error_code, KEYS, throttle_time_ms=0)
    body = {"error_code": error_code, "api_keys": api_keys(), "throttle_time": 0}
    assert mine == kio_encode_response(18, version, -7, body)
    _, resp = decode_response(18, version, mine[4:], expect_correlation_id=-7)
    assert int(resp.error_code) == error_code
    assert [(int(k.api_key), k.min_version, k.max_version) for k in resp.api_keys] == KEYS


@pytest.mark.parametrize("version", VERSIONS)
def test_early_answer_is_the_kio_answer(version: int) -> None:
    frame = _request(version, 99)
    assert early_answer(frame) == _kio_answer(frame)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("level", [0, 1, 2])
def test_features_are_written_as_kio_writes_them(version: int, level: int) -> None:
    features = features_of(level)
    frame = _request(version, 42)
    expected = kio_encode_response(18, version, 42, answer(features, version))
    assert early_answer(frame, features) == expected
    _, resp = decode_response(18, version, expected[4:], expect_correlation_id=42)
    if version < 3:
        return
    finalized = {
        f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features
    }
    assert finalized == ({"transaction.version": (level, level)} if level else {})
    assert resp.finalized_features_epoch == 0
    supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    # Before v4, a feature whose range starts at 0 is left out, as Kafka does.
    assert supported == ({"transaction.version": (0, 2)} if version >= 4 else {})


@pytest.mark.parametrize("version", [RANGE[1] + 1, 99, 32767, -1])
def test_unsupported_versions_get_the_v0_error(version: int) -> None:
    frame = struct.pack(">hhi", 18, version, 5) + b"\x00\x01x" + b"\x07" * 9
    assert read_request(frame, RANGE) == ApiVersionsRequest(version, 5, None, "", "")
    answer = early_answer(frame)
    assert answer is not None and answer == _kio_answer(frame)
    _, resp = decode_response(18, 0, answer[4:], expect_correlation_id=5)
    assert int(resp.error_code) == 35
    assert len(resp.api_keys) == len(SUPPORTED_VERSIONS)


def test_tagged_fields_are_skipped_as_kio_skips_them() -> None:
    frame = bytearray(_request(3, 8))
    assert frame[-1] == 0  # the body's empty tag section: one unknown tag 77 of 3 bytes
    frame[-1:] = bytes([1, 77, 3, 1, 2, 3])
    # ... and in the header (after the client id "c-1"): tag 5 of 1 byte
    header_end = 8 + 2 + 3
    assert frame[header_end] == 0
    frame[header_end : header_end + 1] = bytes([1, 5, 1, 9])
    assert early_answer(bytes(frame)) == _kio_answer(bytes(frame)) is not None
    got = read_request(bytes(frame), RANGE)
    assert got is not None and got.client_software_name == "wherry-test"


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x12\x00\x03",  # shorter than the fixed header
        struct.pack(">hhi", 18, 3, 1),  # no client id
        struct.pack(">hhih", 18, 1, 1, 5) + b"ab",  # client id cut short
        struct.pack(">hhih", 18, 1, 1, -2),  # a negative length other than null
        struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe",  # client id not UTF-8
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x00\x00\x02x",  # null software name
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x00\x02x\x02\xff\x00",  # version not UTF-8
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x00\x05x",  # software name cut short
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x05\x09\x00",  # header tag cut short
        struct.pack(">hhih", 18, 4, 1, -1) + b"\x00\x02x\x02y",  # no final tag section
        struct.pack(">hhih", 18, 4, 1, -1) + b"\x00\x02x\x02y\xff\xff\xff\xff\xff\x01",
        struct.pack(">hhih", 3, 12, 1, -1) + b"\x00",  # another API
    ],
)
def test_what_it_cannot_read_exactly_is_left_to_kio(frame: bytes) -> None:
    assert read_request(frame, RANGE) is None
    assert early_answer(frame) is None


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(list(VERSIONS)),
    client_id=st.none() | st.text(max_size=20),
    cut=st.integers(min_value=0, max_value=80),
    junk=st.binary(max_size=8),
)
def test_any_prefix_or_trailing_bytes_agree_with_kio(
    version: int, client_id: str | None, cut: int, junk: bytes
) -> None:
    """Cut short or followed by other bytes: the early answer, when there is one, is kio's."""
    full = _request(version, 3, client_id)
    for frame in (full[:cut], full + junk):
        answer = early_answer(frame)
        if answer is not None:
            assert answer == _kio_answer(frame)


def test_the_default_level_is_the_configs() -> None:
    from wherry.server.config import BrokerConfig

    assert BrokerConfig().transaction_version == DEFAULT_TRANSACTION_VERSION
