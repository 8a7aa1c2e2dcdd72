"""Crash recovery: torn tails, garbage, corrupt or missing indexes, process kills."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, batch, fill, offsets, open_log, read_all

from wherry.log.segment import LogSegment

PART = "topic-0"


def _segment_files(tmp_path: Path, suffix: str) -> list[Path]:
    return sorted((tmp_path / PART).glob(f"*{suffix}"))


def test_crash_with_garbage_tail_and_broken_indexes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=2)
    end = log.log_end_offset
    log.flush(up_to=log.segments[1].base_offset)  # recovery point inside the log
    recovery_point = log.recovery_point
    # crash: no close. Then the tail gets garbage and the active index goes missing,
    # and an older (flushed) segment's index gets corrupted.
    last_log = _segment_files(tmp_path, ".log")[-1]
    with open(last_log, "ab") as f:
        f.write(batch(3)[:50])  # torn batch
    _segment_files(tmp_path, ".index")[-1].unlink()
    first_index = _segment_files(tmp_path, ".index")[0]
    first_index.write_bytes(os.urandom(first_index.stat().st_size // 8 * 8))

    recovered = open_log(tmp_path, recovery_point=recovery_point)
    assert recovered.log_end_offset == end
    assert offsets(read_all(recovered)) == list(range(end))
    for seg in recovered.segments:
        seg.sanity_check(full=True)
    assert last_log.stat().st_size == recovered.active_segment.size
    # lookups through the rebuilt indexes work
    for offset in range(0, end, 7):
        assert offsets(recovered.read(offset, max_bytes=1))[0] in (offset, offset - 1)
    recovered.append_as_leader(batch(), leader_epoch=0, now_ms=T0)
    recovered.check_integrity()
    recovered.close()
    del log


def test_corruption_in_the_middle_truncates_the_rest(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=2)
    segments = log.segments
    victim = segments[2]
    pos = victim.translate_offset(victim.base_offset + 4)
    assert pos is not None
    log.close()
    raw = bytearray(victim.log_path.read_bytes())
    raw[pos.position + 65] ^= 0x55
    victim.log_path.write_bytes(bytes(raw))

    recovered = open_log(tmp_path)  # unclean, recovery point 0
    assert recovered.log_end_offset == pos.base_offset
    assert offsets(read_all(recovered)) == list(range(pos.base_offset))
    assert [s.base_offset for s in recovered.segments] == [s.base_offset for s in segments[:3]]
    assert not segments[3].log_path.exists()
    recovered.close()


def test_garbage_that_looks_like_zeros(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    log.close()
    with open(_segment_files(tmp_path, ".log")[-1], "ab") as f:
        f.write(b"\x00" * 4096)  # e.g. a preallocated or zero-filled tail
    recovered = open_log(tmp_path)
    assert recovered.log_end_offset == 5
    recovered.close()


def test_clean_shutdown_skips_recovery(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=2)
    log.flush()
    log.close()
    with caplog.at_level(logging.INFO, logger="wherry.log.log"):
        reopened = open_log(tmp_path, clean=True, recovery_point=80)
    assert "recovering segment" not in caplog.text
    assert reopened.log_end_offset == 80 and reopened.recovery_point == 80
    reopened.close()
    caplog.clear()
    # a missing index is rebuilt even after a clean shutdown
    _segment_files(tmp_path, ".index")[0].unlink()
    with caplog.at_level(logging.INFO, logger="wherry.log.log"):
        reopened = open_log(tmp_path, clean=True, recovery_point=80)
    assert caplog.text.count("recovering segment") == 1
    assert offsets(read_all(reopened)) == list(range(80))
    reopened.close()


def test_unclean_recovers_only_from_the_recovery_point(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=2)
    bases = [s.base_offset for s in log.segments]
    log.flush(up_to=bases[3])
    log.close()
    with caplog.at_level(logging.INFO, logger="wherry.log.log"):
        reopened = open_log(tmp_path, recovery_point=bases[3])
    assert caplog.text.count("recovering segment") == len(bases) - 3
    assert reopened.recovery_point == bases[3]
    reopened.close()


def test_stale_files_are_cleaned_on_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.close()
    part = tmp_path / PART
    (part / "00000000000000000000.log.deleted").write_bytes(b"x")
    (part / "recovery.tmp").write_bytes(b"x")
    (part / "00000000000000000500.index").write_bytes(b"")  # orphan
    reopened = open_log(tmp_path, clean=True)
    assert not (part / "00000000000000000000.log.deleted").exists()
    assert not (part / "recovery.tmp").exists()
    assert not (part / "00000000000000000500.index").exists()
    reopened.close()


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from logtest_util import SMALL, T0, batch
    from wherry.log.log import Log
    log = Log.open(Path({dir!r}), SMALL, now_ms=T0)
    for seq in range(0, 100, 2):
        log.append_as_leader(
            batch(2, pid=9, epoch=0, seq=seq), leader_epoch=0, now_ms=T0)
    print(log.log_end_offset, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_process_kill_keeps_returned_appends(tmp_path: Path) -> None:
    part = tmp_path / PART
    code = _CHILD.format(tests=str(Path(__file__).parent), dir=str(part))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert int(proc.stdout.strip()) == 100
    # the active segment's indexes live in memory until a flush/roll/close: the files (created
    # with the segment) are still empty
    active_log = sorted(part.glob("*.log"))[-1]
    assert active_log.stat().st_size > 0
    assert active_log.with_suffix(".index").stat().st_size == 0
    assert active_log.with_suffix(".timeindex").stat().st_size == 0
    recovered = open_log(tmp_path)
    assert recovered.log_end_offset == 100
    assert offsets(read_all(recovered)) == list(range(100))
    assert recovered.producer_state.producers[9].last_seq == 99
    info = recovered.append_as_leader(batch(2, pid=9, epoch=0, seq=98), leader_epoch=0, now_ms=T0)
    assert info.duplicate and info.first_offset == 98
    recovered.close()


def test_segment_reopen_after_crash_counts_index_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    seg = log.active_segment
    entries = seg.offset_index.entries
    seg.flush()
    # crash; reopen the segment alone: zero tail of the preallocated index is ignored
    again = LogSegment.open(
        tmp_path / PART,
        seg.base_offset,
        index_interval_bytes=SMALL.index_interval_bytes,
        max_index_bytes=SMALL.segment_index_bytes,
        now_ms=T0,
    )
    assert again.offset_index.entries == entries
    again.sanity_check(full=True)
    again.close()
    log.close()


def test_garbage_after_clean_shutdown_is_recovered(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    log.flush()
    log.close()
    with open(_segment_files(tmp_path, ".log")[-1], "ab") as f:
        f.write(b"\xff" * 100)
    reopened = open_log(tmp_path, clean=True)
    assert reopened.log_end_offset == 5
    reopened.append_as_leader(batch(), leader_epoch=0, now_ms=T0)
    reopened.check_integrity()
    reopened.close()
