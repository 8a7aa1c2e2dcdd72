"""The simulation's checker on its own: reading logs across segments, and its rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.protocol.records import build_batch, parse_header
from wherry.sim.invariants import (
    History,
    InvariantViolation,
    LeaderView,
    ReassignmentLedger,
    batches_below,
    check_reassignments_settled,
)

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


# --- reassignments -------------------------------------------------------------------------------
def _settled(ledger: ReassignmentLedger, **overrides: object) -> None:
    args: dict[str, object] = {
        "topic": "t",
        "stored": {0: [2, 3]},
        "adding": {},
        "removing": {},
        "ongoing": [],
        "online": {0: {2, 3}},
        "on_disk": {0: {2, 3}},
        "ledger": ledger,
    }
    args.update(overrides)
    check_reassignments_settled(**args)  # type: ignore[arg-type]


def test_ledger_outcomes_follow_the_last_acknowledged_request() -> None:
    ledger = ReassignmentLedger(initial={"t": {0: (1, 2, 3)}})
    assert ledger.possible("t", 0) == [((1, 2, 3), False)]
    first = ledger.start("t", 0, [2, 3], 10)
    lost = ledger.start("t", 0, [3], 20)  # its answer never came: it may have happened
    assert [r for r, _ in ledger.possible("t", 0)] == [(1, 2, 3), (2, 3), (3,)]
    first.answer = "ok"
    assert [r for r, _ in ledger.possible("t", 0)] == [(2, 3), (3,)]
    lost.answer = "error"
    assert [r for r, _ in ledger.possible("t", 0)] == [(2, 3)]
    # A cancel sent while 2 -> [2, 3] + adding 3 ran restores the original (or, if that one
    # completed meanwhile and another started, its target); order does not count.
    cancel = ledger.cancel("t", 0, [4, 2, 3], adding=[4], removing=[2, 3], now_ms=30)
    cancel.answer = "ok"
    assert ledger.possible("t", 0) == [((2, 3), True), ((4,), True)]


def test_settled_reassignments_pass_and_each_leftover_is_reported() -> None:
    ledger = ReassignmentLedger(initial={"t": {0: (1, 2, 3)}})
    ledger.start("t", 0, [2, 3], 10).answer = "ok"
    _settled(ledger)
    with pytest.raises(InvariantViolation, match="still shows a reassignment"):
        _settled(ledger, stored={0: [2, 3, 1]}, removing={0: [1]})
    with pytest.raises(InvariantViolation, match="neither a requested target"):
        _settled(ledger, stored={0: [3, 2]})
    with pytest.raises(InvariantViolation, match=r"replicas \[3\] of \[2, 3\] do not host it"):
        _settled(ledger, online={0: {2}})
    with pytest.raises(InvariantViolation, match=r"brokers \[1\] outside .* still host it"):
        _settled(ledger, online={0: {1, 2, 3}})
    with pytest.raises(InvariantViolation, match=r"brokers \[1\] outside .* still have its log"):
        _settled(ledger, on_disk={0: {1, 2, 3}})
    with pytest.raises(InvariantViolation, match="still lists reassignments"):
        _settled(ledger, ongoing=[("t", 0)])
    with pytest.raises(InvariantViolation, match="no controller answers"):
        _settled(ledger, ongoing=None)


def test_a_stale_leader_is_not_bound_by_a_member_at_a_newer_epoch() -> None:
    h = History()
    isr = frozenset({1, 2})
    # Member 2 was removed, deleted and added back (empty log, newer epoch): leader 1 is stale.
    h.check_leaders([LeaderView(1, 1, TP, 0, 14, isr)], {(1, TP): 20, (2, TP): 0}, {(2, TP): 8})
    with pytest.raises(InvariantViolation, match="maximal-ISR member 2"):
        h.check_leaders([LeaderView(1, 1, TP, 0, 14, isr)], {(1, TP): 20, (2, TP): 0}, {(2, TP): 0})
