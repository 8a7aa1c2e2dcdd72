"""The hand-written codecs (lean Produce reader, lean Fetch v12 answer reader, ApiVersions,
LeaderAndIsr / StopReplica / UpdateMetadata, ControlledShutdown) on damaged frames: huge or
negative counts and lengths, over-long varints, truncation. Each reads the frame, refuses it
with its own error (or, for the lean readers, hands it back to kio), and never raises anything
else."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.protocol.test_fetch_response_lean import _response
from tests.protocol.test_interbroker_codec import LAI_V7, UM_STATE
from wherry.protocol import codec
from wherry.protocol.api_versions_codec import read_request
from wherry.protocol.controlled_shutdown_codec import decode_controlled_shutdown_request
from wherry.protocol.fetch_response import decode_fetch_v12_response
from wherry.protocol.interbroker import (
    BrokerEndpoint,
    ControlledShutdownRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wherry.protocol.interbroker_codec import decode_interbroker_request
from wherry.protocol.produce_request import decode_produce_request
from wherry.protocol.records import build_batch
from wherry.protocol.tolerant import DecodeError

BATCH = build_batch([(b"k", b"v" * 50)] * 5)
PRODUCE = [
    codec.encode_request(
        0,
        v,
        7,
        {
            "transactional_id": "tx" if v % 2 else None,
            "acks": -1,
            "timeout": 1000,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": i, "records": BATCH} for i in range(3)]}
            ],
        },
    )[4:]
    for v in range(3, 12)
]
FETCH = [codec.encode_response(1, 12, 5, _response(random.Random(seed)))[4:] for seed in range(3)]
API_VERSIONS = [
    codec.encode_request(
        18, v, 3, {"client_software_name": "rdkafka", "client_software_version": "2.1"}
    )[4:]
    for v in range(4)
]
STOP = StopReplicaRequest(1, 9, 42, (StopReplicaPartition("a", 0, 4, True),))
UPDATE = UpdateMetadataRequest(
    1, 5, 100, (UM_STATE,), (BrokerEndpoint(1, "h1", 9092, "PLAINTEXT", 0, None),), {}, True
)
INTERBROKER = [
    *(codec.encode_request(4, v, 1, LAI_V7)[4:] for v in (6, 7)),
    *(codec.encode_request(5, v, 1, STOP)[4:] for v in (0, 1, 3, 4)),
    *(codec.encode_request(6, v, 1, UPDATE)[4:] for v in (0, 5, 8)),
]
SHUTDOWN = [codec.encode_request(7, v, 1, ControlledShutdownRequest(2, 5))[4:] for v in range(1, 4)]

PATCHES = st.sampled_from(
    [
        b"\xff\xff\xff\xff\x0f",
        b"\x7f\xff\xff\xff",
        b"\x7f\xff",
        b"\xff\xfe",
        b"\xff\xff\xff\xfe",
        b"\x80\x80\x80\x80\x80\x80",
    ]
) | st.binary(min_size=1, max_size=6)


@st.composite
def damaged(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    out = bytearray(draw(st.sampled_from(frames)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(8, len(out) - 1))
        patch = draw(PATCHES)
        out[at : at + len(patch)] = patch
    return bytes(out[: draw(st.integers(0, len(out)))])


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(damaged(PRODUCE), st.booleans())
def test_lean_produce(frame: bytes, writable: bool) -> None:
    decode_produce_request(memoryview(bytearray(frame)) if writable else frame)


@SETTINGS
@given(damaged(FETCH))
def test_lean_fetch_answer(frame: bytes) -> None:
    try:
        decode_fetch_v12_response(frame)
    except codec.ResponseDecodeError:
        pass


@SETTINGS
@given(damaged(API_VERSIONS))
def test_api_versions(frame: bytes) -> None:
    read_request(frame, (0, 4))


@SETTINGS
@given(damaged(INTERBROKER))
def test_interbroker(frame: bytes) -> None:
    try:
        decode_interbroker_request(frame)
    except DecodeError:
        pass


@SETTINGS
@given(damaged(SHUTDOWN))
def test_controlled_shutdown(frame: bytes) -> None:
    try:
        decode_controlled_shutdown_request(frame)
    except DecodeError:
        pass


@SETTINGS
@given(damaged(PRODUCE + API_VERSIONS + INTERBROKER + SHUTDOWN))
def test_decode_request_refuses_cleanly(frame: bytes) -> None:
    """The broker's entry: a request or RequestDecodeError, whichever codec reads it."""
    supported = {0: (3, 11), 4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3), 18: (0, 4)}
    try:
        codec.decode_request(frame, supported)
    except codec.RequestDecodeError:
        pass
