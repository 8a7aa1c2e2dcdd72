"""The leader's lean Fetch v12 answer encoder writes what kio writes (through the region
placeholders of `encode_response_parts`), byte for byte, regions at the same places."""

from __future__ import annotations

import copy
import datetime
import os
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from wherry.log.file_region import FileRegion
from wherry.protocol.codec import encode_response
from wherry.protocol.fetch_response import encode_fetch_v12_parts
from wherry.protocol.response_parts import (
    encode_response_parts,
    encode_response_parts_with_kio,
)


def kio_parts(corr: int, data: Any) -> Any:
    """`encode_response_parts` through kio (the lean path left out)."""
    return encode_response_parts_with_kio(1, 12, corr, copy.copy(data))


def flat(parts: Any) -> list[Any]:
    if isinstance(parts, bytes):
        return [parts]
    return [p if isinstance(p, bytes) else ("region", p.position, len(p)) for p in parts]


def part(index: int, records: Any, **kw: Any) -> dict[str, Any]:
    return {"partition_index": index, "error_code": ErrorCode.none, "high_watermark": 10 * index,
            "last_stable_offset": 10 * index, "log_start_offset": 0,
            "aborted_transactions": None, "preferred_read_replica": -1, "records": records, **kw}


def answer(topics: dict[str, list[dict[str, Any]]], **kw: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 77,
            "responses": [{"topic": t, "topic_id": None, "partitions": ps}
                          for t, ps in topics.items()], **kw}


@pytest.fixture
def regions(tmp_path: Path) -> Any:
    f = tmp_path / "seg.log"
    f.write_bytes(os.urandom(5000))
    fd = os.open(f, os.O_RDONLY)
    made: list[FileRegion] = []

    def region(position: int, length: int) -> FileRegion:
        made.append(FileRegion.of(fd, position, length))
        return made[-1]

    yield region
    for r in made:
        r.close()
    os.close(fd)


def test_regions_byte_for_byte(regions: Any) -> None:
    def data() -> dict[str, Any]:
        return answer({
            "t": [part(0, regions(0, 1000)), part(1, None), part(2, regions(1000, 0))],
            "é" * 100: [part(5, regions(7, 300)),
                        part(6, None, error_code=ErrorCode.not_leader_or_follower,
                             high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)],
            "empty": [],
        })

    lean = encode_fetch_v12_parts(3, data())
    assert lean is not None and not isinstance(lean, bytes)
    assert flat(lean) == flat(kio_parts(3, data()))
    assert flat(encode_response_parts(1, 12, 3, data())) == flat(lean)


@pytest.mark.parametrize(
    "data",
    [
        answer({}),
        answer({"t": [part(0, b"\x01" * 300), part(1, b"")]}, throttle_time=5),
        answer({"t": [part(0, None, aborted_transactions=[
            {"producer_id": 5, "first_offset": 9}, {"producer_id": 2**62, "first_offset": 0}])]},
            throttle_time=datetime.timedelta(milliseconds=250)),
        answer({"t": [part(0, None, aborted_transactions=[])]}),
        {"error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0, "responses": [],
         "throttle_time": 0},
        answer({"t": [{"partition_index": 3, "error_code": ErrorCode.unknown_topic_or_partition,
                       "high_watermark": -1, "records": None}]}),
    ],
)
def test_in_memory_answers_byte_for_byte(data: dict[str, Any]) -> None:
    lean = encode_fetch_v12_parts(12345, copy.deepcopy(data))
    assert isinstance(lean, bytes)
    assert lean == encode_response(1, 12, 12345, copy.deepcopy(data))


def test_other_shapes_go_to_kio(regions: Any) -> None:
    tagged = answer({"t": [part(0, None, diverging_epoch={"epoch": 1, "end_offset": 5})]})
    assert encode_fetch_v12_parts(1, tagged) is None
    assert encode_response_parts(1, 12, 1, copy.deepcopy(tagged)) == encode_response(
        1, 12, 1, tagged)
    assert encode_fetch_v12_parts(1, answer({"t": [part(0, None)]}, node_endpoints=[])) is None
    by_id = {"throttle_time": 0, "error_code": 0, "session_id": 0,
             "responses": [{"topic": None, "topic_id": None, "partitions": []}]}
    assert encode_fetch_v12_parts(1, by_id) is None
