"""The follower's lean Fetch v12 answer decoder (`protocol/fetch_response.py`) reads what kio's
decoder reads from the same frames, hands records out as views of the frame (no copy), and
refuses truncated, padded or mismatched frames with ResponseDecodeError."""

from __future__ import annotations

import random
from typing import Any

import pytest

from wherry.protocol.codec import ResponseDecodeError, decode_response, encode_response
from wherry.protocol.fetch_response import decode_fetch_v12_response
from wherry.protocol.records import build_batch


def _partition(rng: random.Random, index: int) -> dict[str, Any]:
    records: bytes | None
    kind = rng.randrange(4)
    if kind == 0:
        records = None
    elif kind == 1:
        records = b""
    else:
        values = [(None, rng.randbytes(rng.randrange(1, 300))) for _ in range(rng.randrange(1, 9))]
        records = build_batch(values, base_offset=rng.randrange(1000), timestamp_ms=1)
    part: dict[str, Any] = {
        "partition_index": index,
        "error_code": rng.choice((0, 0, 0, 6, 74)),
        "high_watermark": rng.randrange(-1, 1 << 40),
        "last_stable_offset": rng.randrange(-1, 1 << 40),
        "log_start_offset": rng.randrange(-1, 1 << 40),
        "aborted_transactions": rng.choice(
            (
                None,
                [],
                [{"producer_id": 7, "first_offset": 3}, {"producer_id": 9, "first_offset": 1}],
            )
        ),
        "preferred_read_replica": rng.choice((-1, 2)),
        "records": records,
    }
    if rng.random() < 0.3:
        part["diverging_epoch"] = {
            "epoch": rng.randrange(0, 50),
            "end_offset": rng.randrange(0, 900),
        }
    if rng.random() < 0.2:
        part["current_leader"] = {"leader_id": 3, "leader_epoch": 4}
    return part


def _response(rng: random.Random) -> dict[str, Any]:
    return {
        "throttle_time": rng.randrange(0, 100),
        "error_code": rng.choice((0, 0, 70)),
        "session_id": rng.randrange(0, 1 << 31),
        "responses": [
            {
                "topic": f"topic-{t}-é",
                "partitions": [_partition(rng, p) for p in range(rng.randrange(0, 4))],
            }
            for t in range(rng.randrange(0, 4))
        ],
    }


@pytest.mark.parametrize("seed", range(40))
def test_lean_decoder_reads_what_kio_reads(seed: int) -> None:
    rng = random.Random(seed)
    frame = encode_response(1, 12, 1000 + seed, _response(rng))[4:]
    cid, lean = decode_fetch_v12_response(frame, expect_correlation_id=1000 + seed)
    _, kio = decode_response(1, 12, frame, expect_correlation_id=1000 + seed)
    assert cid == 1000 + seed
    assert (lean.throttle_time_ms, lean.error_code, lean.session_id) == (
        int(kio.throttle_time.total_seconds() * 1000),
        int(kio.error_code),
        int(kio.session_id),
    )
    assert len(lean.responses) == len(kio.responses)
    for (topic, parts), kt in zip(lean.responses, kio.responses, strict=True):
        assert topic == kt.topic
        assert len(parts) == len(kt.partitions)
        for p, kp in zip(parts, kt.partitions, strict=True):
            assert (p.partition_index, p.error_code, p.high_watermark) == (
                kp.partition_index,
                int(kp.error_code),
                kp.high_watermark,
            )
            assert (p.last_stable_offset, p.log_start_offset, p.preferred_read_replica) == (
                kp.last_stable_offset,
                kp.log_start_offset,
                kp.preferred_read_replica,
            )
            if kp.aborted_transactions is None:
                assert p.aborted_transactions is None
            else:
                assert p.aborted_transactions == [
                    (a.producer_id, a.first_offset) for a in kp.aborted_transactions
                ]
            div = kp.diverging_epoch
            if p.diverging_epoch is None:
                assert (div.epoch, div.end_offset) == (-1, -1)
            else:
                assert p.diverging_epoch == (div.epoch, div.end_offset)
            if kp.records is None:
                assert p.records is None
            else:
                assert p.records is not None and bytes(p.records) == bytes(kp.records)


def test_records_are_views_of_the_frame() -> None:
    batch = build_batch([(None, b"x" * 5000)], timestamp_ms=1)
    body = {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 5,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 1,
                        "records": batch,
                        "aborted_transactions": None,
                    }
                ],
            }
        ],
    }
    frame = bytearray(encode_response(1, 12, 1, body)[4:])
    _, answer = decode_fetch_v12_response(frame)
    records = answer.responses[0][1][0].records
    assert records is not None and bytes(records) == batch
    at = bytes(frame).index(batch)
    frame[at + 100] ^= 0xFF  # the view sees the frame's bytes: nothing was copied
    assert bytes(records) != batch


def test_malformed_frames_are_refused() -> None:
    rng = random.Random(7)
    body = _response(rng)
    body["responses"] = body["responses"] or [{"topic": "t", "partitions": [_partition(rng, 0)]}]
    frame = encode_response(1, 12, 42, body)[4:]
    decode_fetch_v12_response(frame, expect_correlation_id=42)
    with pytest.raises(ResponseDecodeError, match="correlation id"):
        decode_fetch_v12_response(frame, expect_correlation_id=43)
    for cut in range(len(frame)):  # every truncation, whatever field it ends in
        with pytest.raises(ResponseDecodeError):
            decode_fetch_v12_response(frame[:cut])
    with pytest.raises(ResponseDecodeError, match="after the Fetch answer"):
        decode_fetch_v12_response(frame + b"\x00")
