"""The follower's lean Fetch v12 encoder writes exactly what the generic kio encoder writes."""

from __future__ import annotations

import pytest

from wherry.protocol.codec import decode_request, encode_request
from wherry.protocol.fetch_request import encode_fetch_v12
from wherry.server.handlers import SUPPORTED_VERSIONS


@pytest.mark.parametrize("client_id", ["broker-1-fetcher", None, ""])
@pytest.mark.parametrize(
    ("topics", "forgotten"),
    [
        ([], []),
        ([("t", [(0, 3, 42, 2, 0, 1 << 20)])], []),
        (
            [("a" * 200, [(0, 1, 5, 1, 0, 100), (7, -1, 1 << 40, -1, -1, 1)]), ("ü", [])],
            [("gone", [1, 2, 3]), ("x", [])],
        ),
    ],
)
def test_same_bytes_as_the_generic_encoder(client_id, topics, forgotten) -> None:  # type: ignore[no-untyped-def]
    fields = {"replica_id": 2, "max_wait": 500, "min_bytes": 1, "max_bytes": 10 << 20,
              "isolation_level": 0, "session_id": 123456, "session_epoch": 7}
    body = {**fields, "rack_id": "",
            "topics": [{"topic": t, "partitions": [
                {"partition": p, "current_leader_epoch": e, "fetch_offset": o,
                 "last_fetched_epoch": le, "log_start_offset": ls, "partition_max_bytes": mb}
                for p, e, o, le, ls, mb in ps]} for t, ps in topics],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten]}
    expected = encode_request(1, 12, 99, body, client_id=client_id)
    got = encode_fetch_v12(99, client_id, replica_id=2, max_wait_ms=500, min_bytes=1,
                           max_bytes=10 << 20, isolation_level=0, session_id=123456,
                           session_epoch=7, topics=topics, forgotten=forgotten)
    assert got == expected
    req = decode_request(memoryview(got)[4:], SUPPORTED_VERSIONS)
    assert req.body.session_epoch == 7 and len(req.body.topics) == len(topics)
