"""Time the hand-written binary codecs: encode + decode of a LeaderAndIsr v7 and an
UpdateMetadata v8 request with 10,000 partitions, decoding 100,000 `__consumer_offsets`
offset-commit values, and the follower's lean decoder on 1,000 Fetch v12 answers of 20
partitions.

    python -m bench.wire_codecs [--rounds N]

Prints the best of N rounds per row, in CPU time of this process (time.process_time), so runs
on a busy machine compare fairly.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from wherry.group.records import (
    OffsetCommitValue,
    decode_offset_commit_value,
    encode_offset_commit_value,
)
from wherry.protocol.codec import encode_response
from wherry.protocol.fetch_response import decode_fetch_v12_response
from wherry.protocol.interbroker import (
    LEADER_AND_ISR_KEY,
    UPDATE_METADATA_KEY,
    BrokerEndpoint,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wherry.protocol.interbroker_codec import (
    decode_interbroker_request,
    encode_interbroker_request,
)

PARTITIONS = 10_000
TOPICS = 100
VALUES = 100_000


def _leader_and_isr() -> LeaderAndIsrRequest:
    states = tuple(
        LeaderAndIsrPartitionState(
            f"topic-{i % TOPICS}", i // TOPICS, 3, i % 3, 7, (0, 1, 2), 11, (0, 1, 2)
        )
        for i in range(PARTITIONS)
    )
    ids = {f"topic-{t}": uuid.UUID(int=t + 1) for t in range(TOPICS)}
    leaders = tuple(BrokerEndpoint(b, f"broker-{b}", 9092) for b in range(3))
    return LeaderAndIsrRequest(1, 3, 42, states, ids, leaders, is_full=True)


def _update_metadata() -> UpdateMetadataRequest:
    states = tuple(
        UpdateMetadataPartitionState(
            f"topic-{i % TOPICS}", i // TOPICS, 3, i % 3, 7, (0, 1, 2), 11, (0, 1, 2), ()
        )
        for i in range(PARTITIONS)
    )
    ids = {f"topic-{t}": uuid.UUID(int=t + 1) for t in range(TOPICS)}
    brokers = tuple(BrokerEndpoint(b, f"broker-{b}", 9092, rack="r1") for b in range(3))
    return UpdateMetadataRequest(1, 3, 42, states, brokers, ids, is_full=True)


def _best(rounds: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()

    lai = _leader_and_isr()
    um = _update_metadata()

    def lai_round() -> None:
        frame = encode_interbroker_request(LEADER_AND_ISR_KEY, 7, 1, "c", lai)
        decode_interbroker_request(memoryview(frame)[4:])

    def um_round() -> None:
        # A fresh states tuple: the encoder keeps the last arrays it encoded, by identity.
        req = UpdateMetadataRequest(
            um.controller_id, um.controller_epoch, um.broker_epoch,
            tuple(list(um.partition_states)), um.live_brokers, um.topic_ids, is_full=True,
        )
        frame = encode_interbroker_request(UPDATE_METADATA_KEY, 8, 1, "c", req)
        decode_interbroker_request(memoryview(frame)[4:])

    values = [
        encode_offset_commit_value(OffsetCommitValue(i, 5, "meta" if i % 2 else "", i, -1))
        for i in range(VALUES)
    ]

    def offsets_round() -> None:
        for v in values:
            decode_offset_commit_value(v)

    fetch = encode_response(1, 12, 7, {
        "throttle_time": 0, "error_code": 0, "session_id": 1,
        "responses": [{"topic": f"topic-{t}", "partitions": [{
            "partition_index": p, "error_code": 0, "high_watermark": 100, "last_stable_offset": 100,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": bytes(1000),
        } for p in range(5)]} for t in range(4)],
    })[4:]

    def fetch_round() -> None:
        for _ in range(1000):
            decode_fetch_v12_response(fetch, expect_correlation_id=7)

    for name, fn in (
        ("LeaderAndIsr v7 encode+decode, 10k partitions", lai_round),
        ("UpdateMetadata v8 encode+decode, 10k partitions", um_round),
        ("OffsetCommitValue decode x100k", offsets_round),
        ("Fetch v12 answer decode x1000 (20 partitions)", fetch_round),
    ):
        print(f"{name:52s} {_best(args.rounds, fn) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
