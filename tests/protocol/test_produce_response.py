"""Produce answers written without kio: byte for byte kio's, on every version, and left to kio
whenever they hold what that writer does not write."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.protocol.kio_samples import kio_response_frame
from wherry.protocol.codec import encode_response
from wherry.protocol.produce_response import encode_produce_body
from wherry.server.handlers import SUPPORTED_VERSIONS

LO, HI = SUPPORTED_VERSIONS[0]
VERSIONS = range(LO, HI + 1)


def _part(index: int, **over: Any) -> dict[str, Any]:
    part: dict[str, Any] = {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": 41 + index,
        "log_append_time": -1,
        "log_start_offset": 0,
        "error_message": None,
        "record_errors": [],
    }
    part.update(over)
    return part


def _answer(topics: list[tuple[str, list[dict[str, Any]]]], version: int) -> dict[str, Any]:
    return {
        "responses": [
            {
                "name": None if version >= 13 else name,
                "topic_id": uuid.uuid5(uuid.NAMESPACE_DNS, name) if version >= 13 else None,
                "partition_responses": parts,
            }
            for name, parts in topics
        ],
        "throttle_time": 0,
    }


def _both(version: int, data: dict[str, Any]) -> bytes:
    frame = encode_response(0, version, 77, data)
    assert frame == kio_response_frame(0, version, 77, data)
    return frame


@pytest.mark.parametrize("version", VERSIONS)
def test_common_answers_written_without_kio_as_kio_writes_them(version: int) -> None:
    answers = [
        _answer([("t", [_part(0)])], version),
        _answer(
            [("t", [_part(0), _part(3, base_offset=2**40)]), ("ü-topic", [_part(1)])], version
        ),
        _answer(
            [("t", [_part(0, log_append_time=1_764_400_000_123, log_start_offset=-1)])], version
        ),
        _answer([("t", [_part(0, error_code=ErrorCode.not_leader_or_follower, base_offset=-1,
                              error_message="not the leader")])], version),
        _answer([("t", [_part(0, error_code=int(ErrorCode.corrupt_message))])], version),
        _answer([("t", [{"index": 2, "error_code": 3, "base_offset": -1}])], version),
        _answer([("t", [])], version),
        _answer([], version),
        {**_answer([("t", [_part(0)])], version), "throttle_time": 250},
    ]
    for data in answers:
        assert encode_produce_body(version, data) is not None
        _both(version, data)


@pytest.mark.parametrize("version", VERSIONS)
def test_random_answers(version: int) -> None:
    rng = random.Random(version)
    codes = [ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.record_list_too_large]
    for _ in range(50):
        topics = [
            (
                "".join(rng.choice("abcé._-") for _ in range(rng.randint(1, 20))),
                [
                    _part(
                        rng.randint(0, 2**31 - 1),
                        error_code=rng.choice(codes),
                        base_offset=rng.randint(-1, 2**62),
                        log_append_time=rng.choice([-1, rng.randint(0, 2**42)]),
                        log_start_offset=rng.randint(-1, 2**62),
                    )
                    for _ in range(rng.randint(0, 4))
                ],
            )
            for _ in range(rng.randint(0, 3))
        ]
        data = _answer(topics, version)
        assert encode_produce_body(version, data) is not None
        _both(version, data)


@pytest.mark.parametrize("version", VERSIONS)
def test_what_only_kio_writes_is_left_to_it(version: int) -> None:
    record_errors = [{"batch_index": 3, "batch_index_error_message": "no key"}]
    leader = {"leader_id": 2, "leader_epoch": 5}
    left = [
        _answer([("t", [_part(0, current_leader=leader)])], version),
        {**_answer([("t", [_part(0)])], version), "node_endpoints": []},
        _answer([("t", [_part(0, log_append_time=1.5)])], version),
        {**_answer([("t", [_part(0)])], version), "throttle_time": 2.0},
    ]
    if version >= 8:
        left.append(_answer([("t", [_part(0, record_errors=record_errors)])], version))
    for data in left:
        assert encode_produce_body(version, data) is None
    for data in left[:2] + left[4:]:
        _both(version, data)  # through kio, as before
    if version < 8:  # not in these versions' answers: written without them
        data = _answer([("t", [_part(0, record_errors=record_errors)])], version)
        assert encode_produce_body(version, data) is not None
        _both(version, data)


def test_unknown_error_code_refused_as_kio_refuses_it() -> None:
    data = _answer([("t", [_part(0, error_code=12345)])], 9)
    with pytest.raises(ValueError):
        encode_response(0, 9, 1, data)
