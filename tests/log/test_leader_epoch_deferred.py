"""Leader epochs assigned at the log end reach the checkpoint file at the log's next flush or
close; after a crash in between (no close, nothing flushed), recovery from the recovery point
rebuilds them from the batches, so OffsetForLeaderEpoch answers are the same."""

from __future__ import annotations

from pathlib import Path

from logtest_util import T0, batch, open_log

from wherry.log.checkpoint import read_int_pairs


def test_epochs_survive_a_crash_before_the_flush(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 1, 3, 3, 6):
        log.append_as_leader(batch(2), leader_epoch=epoch, now_ms=T0)
    expected = [log.end_offset_for_epoch(e) for e in range(8)]
    assert log.latest_epoch == 6
    checkpoint = tmp_path / "topic-0" / "leader-epoch-checkpoint"
    assert not checkpoint.exists() or read_int_pairs(checkpoint) == []
    # a crash: the process dies without closing or flushing (recovery point 0)
    crashed = open_log(tmp_path, recovery_point=0)
    assert crashed.latest_epoch == 6
    assert [crashed.end_offset_for_epoch(e) for e in range(8)] == expected
    crashed.flush()  # the recovery point moves: the epochs are written first
    assert read_int_pairs(checkpoint) == [(1, 0), (3, 4), (6, 8)]
    crashed.close()
    reopened = open_log(tmp_path, clean=True, recovery_point=10)
    assert [reopened.end_offset_for_epoch(e) for e in range(8)] == expected
    reopened.close()
    log.close()
