"""The kio wrapper: header parsing, unsupported versions, version-neutral responses."""

import io
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from wherry.protocol.codec import (
    Request,
    RequestDecodeError,
    UnsupportedVersion,
    build_entity,
    decode_request,
    encode_response,
)
from wherry.server.handlers import SUPPORTED_VERSIONS


def frame_for(api_key: int, version: int, body: object, correlation_id: int = 42) -> bytes:
    cls = load_request_schema(api_key, version)
    hdr_cls = cls.__header_schema__
    buf = io.BytesIO()
    hdr = hdr_cls(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="test",
    )
    entity_writer(hdr_cls)(buf, hdr)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def test_decode_metadata_v12() -> None:
    cls = load_request_schema(3, 12)
    body = build_entity(
        cls,
        {
            "topics": [{"name": "a", "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": True,
        },
    )
    req = decode_request(frame_for(3, 12, body), SUPPORTED_VERSIONS)
    assert isinstance(req, Request)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (3, 12, 42, "test")
    assert req.body.topics[0].name == "a"


def test_unknown_tagged_field_in_request_is_skipped() -> None:
    cls = load_request_schema(18, 3)
    body = cls(client_software_name="x", client_software_version="1")
    raw = bytearray(frame_for(18, 3, body))
    # Replace the empty top-level tag section (last byte 0) with one unknown tag 77 of 3 bytes.
    assert raw[-1] == 0
    raw[-1:] = bytes([1, 77, 3, 1, 2, 3])
    req = decode_request(bytes(raw), SUPPORTED_VERSIONS)
    assert isinstance(req, Request)
    assert req.body.client_software_name == "x"


def test_unsupported_api_versions_version_is_reported() -> None:
    raw = struct.pack(">hhi", 18, 99, 7) + b"\xff\xff" + b"\x00" * 8
    res = decode_request(raw, SUPPORTED_VERSIONS)
    assert res == UnsupportedVersion(18, 99, 7)


def test_unknown_api_key_and_version_raise() -> None:
    with pytest.raises(RequestDecodeError):
        decode_request(struct.pack(">hhi", 999, 0, 1) + b"\0\0", SUPPORTED_VERSIONS)
    with pytest.raises(RequestDecodeError):
        decode_request(struct.pack(">hhi", 0, 99, 1) + b"\0\0", SUPPORTED_VERSIONS)
    with pytest.raises(RequestDecodeError):
        decode_request(b"\x00\x03", SUPPORTED_VERSIONS)


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_response_every_version_from_one_mapping(version: int) -> None:
    data = {
        "throttle_time": 0,
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "abc",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "topic_id": uuid.uuid4(),
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": ErrorCode.none,
                        "partition_index": 0,
                        "leader_id": 0,
                        "leader_epoch": 3,
                        "replica_nodes": [0],
                        "isr_nodes": [0],
                        "offline_replicas": [],
                    }
                ],
                "topic_authorized_operations": -(2**31),
            }
        ],
        "cluster_authorized_operations": -(2**31),
        "error_code": ErrorCode.none,
    }
    raw = encode_response(3, version, 5, data)
    assert struct.unpack_from(">i", raw)[0] == len(raw) - 4
    cls = load_response_schema(3, version)
    hdr_size = 4 + (1 if cls.__flexible__ else 0)
    assert struct.unpack_from(">i", raw, 4)[0] == 5
    resp, _ = entity_reader(cls)(raw, 4 + hdr_size)
    assert resp.topics[0].name == "t"
    assert resp.topics[0].partitions[0].leader_id == 0


def test_api_versions_response_uses_header_v0() -> None:
    raw = encode_response(18, 3, 9, {"error_code": 0, "api_keys": [], "throttle_time": 0})
    cls = load_response_schema(18, 3)
    resp, _ = entity_reader(cls)(raw, 8)  # size + correlation id, no tag byte
    assert resp.error_code == ErrorCode.none


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(SUPPORTED_VERSIONS)), st.integers(0, 20), st.binary(max_size=200))
def test_fuzz_decoder_only_raises_decode_error(api_key: int, version: int, tail: bytes) -> None:
    raw = struct.pack(">hhi", api_key, version, 1) + tail
    try:
        decode_request(raw, SUPPORTED_VERSIONS)
    except RequestDecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_mutated_valid_requests(data: st.DataObject) -> None:
    cls = load_request_schema(0, 9)
    body = build_entity(
        cls,
        {
            "acks": -1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * 70}]}],
        },
    )
    raw = bytearray(frame_for(0, 9, body))
    for _ in range(data.draw(st.integers(1, 5))):
        i = data.draw(st.integers(8, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(8, len(raw)))
    try:
        decode_request(bytes(raw[:cut]), SUPPORTED_VERSIONS)
    except RequestDecodeError:
        pass


def test_header_versions_match_flexibility() -> None:
    assert load_request_schema(0, 9).__header_schema__ is RequestHeaderV2
    assert load_request_schema(0, 8).__header_schema__ is RequestHeaderV1
