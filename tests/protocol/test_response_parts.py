"""`encode_response_parts`: a Fetch response with file regions, joined back together (the
regions read), is byte for byte the frame `encode_response` makes from the same bytes, in
every Fetch version, flexible or not; other responses are unchanged frames."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from wherry.log.file_region import FileRegion
from wherry.protocol.codec import encode_response
from wherry.protocol.response_parts import encode_response_parts
from wherry.server.handlers import SUPPORTED_VERSIONS


def _body(records: list[Any]) -> dict[str, Any]:
    parts = [
        {
            "partition_index": i,
            "error_code": 0,
            "high_watermark": 10 * i,
            "last_stable_offset": 10 * i,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": r,
        }
        for i, r in enumerate(records)
    ]
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {"topic": "t", "topic_id": uuid.UUID(int=7), "partitions": parts[:2]},
            {"topic": "u", "topic_id": uuid.UUID(int=8), "partitions": parts[2:]},
        ],
    }


@pytest.mark.parametrize("version", range(SUPPORTED_VERSIONS[1][0], SUPPORTED_VERSIONS[1][1] + 1))
def test_joined_parts_are_the_plain_frame(tmp_path: Path, version: int) -> None:
    path = tmp_path / "file"
    content = os.urandom(300_000)
    path.write_bytes(content)
    spans = [(0, 200), (1000, 0), (5000, 150_000), (290_000, 10_000)]
    fd = os.open(path, os.O_RDONLY)
    try:
        regions = [FileRegion.of(fd, p, n) if n else b"" for p, n in spans]
    finally:
        os.close(fd)
    plain = encode_response(1, version, 42, _body([content[p : p + n] for p, n in spans]))
    parts = encode_response_parts(1, version, 42, _body(regions))
    assert isinstance(parts, list)
    assert [p for p in parts if isinstance(p, FileRegion)] == [r for r in regions if r]
    joined = b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)  # type: ignore[arg-type]
    assert joined == plain
    for r in regions:
        if isinstance(r, FileRegion):
            r.close()


def test_responses_without_regions_are_plain_frames() -> None:
    body = _body([b"", None, b"abc", b""])
    assert encode_response_parts(1, 12, 5, body) == encode_response(
        1, 12, 5, _body([b"", None, b"abc", b""])
    )
    api = {"error_code": 0, "api_keys": [], "throttle_time": 0}
    assert encode_response_parts(18, 3, 5, api) == encode_response(18, 3, 5, api)
