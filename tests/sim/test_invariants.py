"""The simulation's checker on its own: reading logs across segments, and its rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.protocol.records import build_batch, parse_header
from wherry.sim.invariants import History, InvariantViolation, LeaderView, batches_below

TP = TopicPartition("t", 0)


def test_batches_below_reads_every_segment(tmp_path: Path) -> None:
    lm = LogManager([tmp_path], LogConfig(segment_bytes=1024), lambda: 0)
    lm.startup()
    try:
        plog = lm.get_or_create_log(TP)
        crcs: dict[int, int] = {}
        for i in range(100):
            batch = build_batch([(None, b"v%d" % i)], base_offset=i, timestamp_ms=0)
            crcs[i] = parse_header(batch).crc
            plog.append_as_follower(batch)
        assert plog.num_segments > 3
        assert batches_below(plog, 100) == crcs
        assert batches_below(plog, 57) == {i: c for i, c in crcs.items() if i < 57}
    finally:
        lm.shutdown()


def test_two_leaders_in_one_epoch_are_reported() -> None:
    h = History()
    h.check_leaders([LeaderView(1, 1, TP, 3, 0, frozenset({1}))], {})
    with pytest.raises(InvariantViolation, match="two leaders in leader epoch 3"):
        h.check_leaders([LeaderView(2, 1, TP, 3, 0, frozenset({2}))], {})


def test_high_watermark_rules() -> None:
    h = History()
    isr = frozenset({1, 2})
    h.check_leaders([LeaderView(1, 1, TP, 0, 5, isr)], {(1, TP): 9, (2, TP): 5})
    with pytest.raises(InvariantViolation, match="went down"):
        h.check_leaders([LeaderView(1, 1, TP, 0, 4, isr)], {(1, TP): 9, (2, TP): 5})
    h2 = History()
    with pytest.raises(InvariantViolation, match="maximal-ISR member 2"):
        h2.check_leaders([LeaderView(1, 1, TP, 0, 6, isr)], {(1, TP): 9, (2, TP): 5})
    # A restarted process (new incarnation) starts its high watermark over.
    h.check_leaders([LeaderView(1, 2, TP, 0, 1, isr)], {(1, TP): 9, (2, TP): 5})


def test_a_committed_offset_may_never_change() -> None:
    h = History()
    h.record_committed(TP, {0: 11, 1: 12}, "consumer")
    h.record_committed(TP, {1: 12, 2: 13}, "broker 2")
    with pytest.raises(InvariantViolation, match="offset 1, below a high watermark, changed"):
        h.record_committed(TP, {1: 99}, "broker 3")
