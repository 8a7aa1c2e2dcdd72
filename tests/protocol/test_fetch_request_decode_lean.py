"""The leader's lean Fetch v12 request decoder gives what kio's reader gives, and leaves every
other shape (tagged fields, nulls, truncated or garbage frames) to kio, errors included."""

from __future__ import annotations

import random
from typing import Any

import pytest

from wherry.protocol.codec import (
    Request,
    RequestDecodeError,
    _read,
    decode_request,
    encode_request,
    load_request_schema,
)
from wherry.protocol.fetch_request import decode_fetch_v12, encode_fetch_v12
from wherry.server.handlers import SUPPORTED_VERSIONS

TOPICS: list[Any] = [
    ([], []),
    ([("t", [(0, 3, 42, 2, 0, 1 << 20)])], []),
    (
        [("a" * 200, [(0, 1, 5, 1, 0, 100), (7, -1, 1 << 40, -1, -1, 1)]), ("ü", [])],
        [("gone", [1, 2, 3]), ("x", [])],
    ),
    ([(f"topic-{i}", [(p, 5, p * 1000, 4, 0, 1 << 20) for p in range(70)]) for i in range(3)],
     [("f", list(range(200)))]),
]


def kio_decode(frame: bytes | memoryview) -> tuple[str | None, Any]:
    """What `decode_request` did for every Fetch v12 before the lean decoder."""
    cls = load_request_schema(1, 12)
    header, used = _read(cls.__header_schema__, frame, 0)
    body, _ = _read(cls, frame, used)
    return header.client_id, body


def follower_frame(client_id: str | None, topics: Any, forgotten: Any, **kw: Any) -> bytes:
    fields: dict[str, Any] = {"replica_id": 2, "max_wait_ms": 500, "min_bytes": 1,
                              "max_bytes": 10 << 20, "isolation_level": 0,
                              "session_id": 123456, "session_epoch": 7}
    fields.update(kw)
    return encode_fetch_v12(99, client_id, topics=topics, forgotten=forgotten, **fields)


@pytest.mark.parametrize("client_id", ["broker-1-fetcher", None, "", "é" * 300])
@pytest.mark.parametrize(("topics", "forgotten"), TOPICS)
def test_equal_to_kio(client_id: str | None, topics: Any, forgotten: Any) -> None:
    frame = memoryview(follower_frame(client_id, topics, forgotten, rack_id="rack-ß"))[4:]
    lean = decode_fetch_v12(frame)
    assert lean is not None
    assert lean == kio_decode(frame)
    req = decode_request(frame, SUPPORTED_VERSIONS)
    assert isinstance(req, Request)
    assert (req.client_id, req.body) == kio_decode(frame)
    assert (req.api_key, req.api_version, req.correlation_id) == (1, 12, 99)


def test_extreme_values_equal_to_kio() -> None:
    frame = follower_frame("c", [("t", [(-(2**31), 2**31 - 1, -(2**63), -1, 2**63 - 1, 0)])],
                           [], replica_id=-1, max_wait_ms=-(2**31), min_bytes=2**31 - 1,
                           isolation_level=1, session_id=-5, session_epoch=-1)[4:]
    assert decode_fetch_v12(frame) == kio_decode(frame)


def test_tagged_fields_and_other_versions_go_to_kio() -> None:
    body = {"replica_id": 1, "max_wait": 10, "min_bytes": 1, "max_bytes": 100,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "cluster_id": "abc",
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 1,
                                                      "partition_max_bytes": 5}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    frame = encode_request(1, 12, 5, body, client_id="x")[4:]
    assert decode_fetch_v12(frame) is None  # cluster_id is a tagged field
    req = decode_request(frame, SUPPORTED_VERSIONS)
    assert isinstance(req, Request) and req.body.cluster_id == "abc"
    assert req.body == kio_decode(frame)[1]
    frame11 = encode_request(1, 11, 5, {**body, "cluster_id": None}, client_id="x")[4:]
    assert decode_fetch_v12(frame11) is None


def _outcome(fn: Any, frame: bytes) -> Any:
    try:
        return ("ok", fn(frame))
    except RequestDecodeError as e:
        return ("error", str(e))


def test_truncated_and_garbage_frames_decode_as_kio_decides() -> None:
    rng = random.Random(15)
    good = follower_frame("broker-2", TOPICS[2][0], TOPICS[2][1])[4:]

    def via_broker(frame: bytes) -> Any:
        req = decode_request(frame, SUPPORTED_VERSIONS)
        assert isinstance(req, Request)
        return (req.client_id, req.body)

    frames = [good[:n] for n in range(len(good))]
    for _ in range(300):
        mutated = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(8, len(mutated))] = rng.randrange(256)
        frames.append(bytes(mutated))
    frames += [good[:8] + bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
               for _ in range(200)]
    errors = 0
    for frame in frames:
        expected = _outcome(kio_decode, frame)
        got = _outcome(via_broker, frame)
        if len(frame) < 8:
            assert got[0] == "error"
            continue
        assert got == expected, frame
        errors += got[0] == "error"
    assert errors > 100  # the corpus does reach kio's errors
