"""`codec.decode_response`, the client side of the codec: every response a broker reads from
another broker (Fetch, ListOffsets, OffsetForLeaderEpoch, AlterPartition through kio;
LeaderAndIsr, StopReplica, UpdateMetadata through the interbroker codec), round-tripped through
the encoders the broker answers with, and the frames it must refuse."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from wherry.protocol.codec import (
    ResponseDecodeError,
    build_entity,
    decode_response,
    encode_response,
    response_class,
)
from wherry.protocol.interbroker import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)

TOPIC_ID = uuid.UUID(int=0x1234)

FETCH = {
    "throttle_time": 5,
    "error_code": 0,
    "session_id": 0,
    "responses": [
        {
            "topic": "t",
            "partitions": [
                {
                    "partition_index": 1,
                    "error_code": 0,
                    "high_watermark": 10,
                    "last_stable_offset": 10,
                    "log_start_offset": 2,
                    "diverging_epoch": {"epoch": 3, "end_offset": 7},
                    "aborted_transactions": [],
                    "preferred_read_replica": -1,
                    "records": b"\x00\x01\x02",
                }
            ],
        }
    ],
}
LIST_OFFSETS = {
    "topics": [
        {
            "name": "t",
            "partitions": [
                {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 42,
                 "leader_epoch": 3}
            ],
        }
    ]
}
OFFSET_FOR_LEADER_EPOCH = {
    "topics": [
        {
            "topic": "t",
            "partitions": [
                {"error_code": 0, "partition": 0, "leader_epoch": 2, "end_offset": 17}
            ],
        }
    ]
}
ALTER_PARTITION = {
    "error_code": 0,
    "topics": [
        {
            "topic_id": TOPIC_ID,
            "partitions": [
                {"partition_index": 0, "error_code": 0, "leader_id": 1, "leader_epoch": 4,
                 "isr": [1, 2], "leader_recovery_state": 0, "partition_epoch": 9}
            ],
        }
    ],
}
API_VERSIONS = {"error_code": 0, "api_keys": [{"api_key": 1, "min_version": 4,
                                               "max_version": 12}]}

KIO_CASES = [
    pytest.param(1, 12, FETCH, id="fetch-v12"),
    pytest.param(1, 11, FETCH, id="fetch-v11"),
    pytest.param(2, 4, LIST_OFFSETS, id="list-offsets-v4"),
    pytest.param(2, 6, LIST_OFFSETS, id="list-offsets-v6"),
    pytest.param(23, 4, OFFSET_FOR_LEADER_EPOCH, id="offset-for-leader-epoch-v4"),
    pytest.param(23, 3, OFFSET_FOR_LEADER_EPOCH, id="offset-for-leader-epoch-v3"),
    pytest.param(56, 3, ALTER_PARTITION, id="alter-partition-v3"),
    pytest.param(56, 2, ALTER_PARTITION, id="alter-partition-v2"),
    pytest.param(18, 3, API_VERSIONS, id="api-versions-v3"),
    pytest.param(18, 0, API_VERSIONS, id="api-versions-v0"),
]

INTERBROKER_CASES = [
    pytest.param(4, 7, LeaderAndIsrResponse(
        0, (LeaderAndIsrPartitionError("", 0, 0, TOPIC_ID),)), id="leader-and-isr-v7"),
    pytest.param(4, 4, LeaderAndIsrResponse(
        0, (LeaderAndIsrPartitionError("t", 0, 0),)), id="leader-and-isr-v4"),
    pytest.param(4, 1, LeaderAndIsrResponse(
        0, (LeaderAndIsrPartitionError("t", 0, 0),)), id="leader-and-isr-v1"),
    pytest.param(5, 4, StopReplicaResponse(0, (LeaderAndIsrPartitionError("t", 1, 0),)),
                 id="stop-replica-v4"),
    pytest.param(5, 1, StopReplicaResponse(0, (LeaderAndIsrPartitionError("t", 1, 0),)),
                 id="stop-replica-v1"),
    pytest.param(6, 8, UpdateMetadataResponse(0), id="update-metadata-v8"),
    pytest.param(6, 5, UpdateMetadataResponse(ErrorCode.stale_controller_epoch),
                 id="update-metadata-v5"),
]


def frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A response frame without its size prefix, as a connection hands it over."""
    return encode_response(api_key, version, correlation_id, body)[4:]


@pytest.mark.parametrize(("api_key", "version", "body"), KIO_CASES)
def test_kio_responses_round_trip(api_key: int, version: int, body: dict[str, Any]) -> None:
    got_id, got = decode_response(api_key, version, frame(api_key, version, 77, body))
    assert got_id == 77
    assert got == build_entity(response_class(api_key, version), body)


@pytest.mark.parametrize(("api_key", "version", "body"), INTERBROKER_CASES)
def test_interbroker_responses_round_trip(api_key: int, version: int, body: Any) -> None:
    raw = frame(api_key, version, 0x7FFFFFFF, body)
    assert decode_response(api_key, version, raw, expect_correlation_id=0x7FFFFFFF) == (
        0x7FFFFFFF,
        body,
    )


def test_flexible_versions_read_header_v1_except_api_versions() -> None:
    # Fetch v12 is flexible: the header carries an (empty) tagged-field section after the id.
    fetch = frame(1, 12, 9, FETCH)
    assert fetch[4] == 0
    # An unknown tagged field in that header section is skipped.
    tagged = fetch[:4] + bytes([1, 5, 2]) + b"xy" + fetch[5:]
    assert decode_response(1, 12, tagged)[1] == decode_response(1, 12, fetch)[1]
    # ApiVersions v3 is flexible too, but its answer always has header v0: the body follows
    # the correlation id at once (its error code, 0).
    api_versions = frame(18, 3, 9, API_VERSIONS)
    assert api_versions[4:6] == b"\x00\x00"
    assert decode_response(18, 3, api_versions)[0] == 9


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        pytest.param(1, 12, FETCH, id="fetch"),
        pytest.param(56, 3, ALTER_PARTITION, id="alter-partition"),
        pytest.param(6, 8, UpdateMetadataResponse(0), id="update-metadata"),
    ],
)
def test_answer_to_another_request_is_refused(api_key: int, version: int, body: Any) -> None:
    raw = frame(api_key, version, 5, body)
    with pytest.raises(ResponseDecodeError, match="correlation id 5 in the answer to request 6"):
        decode_response(api_key, version, raw, expect_correlation_id=6)
    assert decode_response(api_key, version, raw, expect_correlation_id=5)[0] == 5


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        pytest.param(1, 12, FETCH, id="fetch"),
        pytest.param(2, 4, LIST_OFFSETS, id="list-offsets"),
        pytest.param(23, 4, OFFSET_FOR_LEADER_EPOCH, id="offset-for-leader-epoch"),
        pytest.param(56, 3, ALTER_PARTITION, id="alter-partition"),
        pytest.param(4, 7, LeaderAndIsrResponse(0, (LeaderAndIsrPartitionError(
            "", 0, 0, TOPIC_ID),)), id="leader-and-isr"),
        pytest.param(5, 4, StopReplicaResponse(0), id="stop-replica"),
    ],
)
def test_truncated_frames_are_refused(api_key: int, version: int, body: Any) -> None:
    raw = frame(api_key, version, 1, body)
    for cut in range(len(raw)):
        with pytest.raises(ResponseDecodeError):
            decode_response(api_key, version, raw[:cut])


def test_short_frame_trailing_bytes_and_unknown_versions_are_refused() -> None:
    with pytest.raises(ResponseDecodeError, match="shorter than a header"):
        decode_response(1, 12, b"\x00\x01")
    with pytest.raises(ResponseDecodeError, match="bytes after"):
        decode_response(56, 3, frame(56, 3, 1, ALTER_PARTITION) + b"\x00")
    with pytest.raises(ResponseDecodeError):
        decode_response(6, 8, frame(6, 8, 1, UpdateMetadataResponse(0)) + b"\x00")
    with pytest.raises(ResponseDecodeError):
        decode_response(1, 99, struct.pack(">i", 1) + b"\x00" * 16)
    with pytest.raises(ResponseDecodeError):
        decode_response(4, 99, struct.pack(">i", 1) + b"\x00" * 16)
