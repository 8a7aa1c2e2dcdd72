"""The cleaner's swap of cleaned segments and the log's lock: appends go on while the files
are renamed; reads, flushes and retention wait for the renames to end."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.log.logtest_util import T0, open_log
from tests.log.test_log_cleaner import COMPACT as CLEANER_COMPACT
from wherry.log.cleaner import clean_log
from wherry.log.log import Log
from wherry.protocol.records import RecordSpec, build_batch, iter_batches, iter_records

COMPACT = dataclasses.replace(CLEANER_COMPACT, segment_bytes=1024)
WAIT_S = 30.0  # bounds every wait (a loaded machine); a pass takes milliseconds


def put(log: Log, key: bytes, value: bytes) -> None:
    log.append_as_leader(build_batch([RecordSpec(key, value)], timestamp_ms=T0),
                         leader_epoch=1, now_ms=T0)
    log.update_high_watermark(log.log_end_offset)


def latest(log: Log) -> dict[bytes | None, bytes | None]:
    """Every record, read by offset from the log start to the end: key -> last value."""
    view: dict[bytes | None, bytes | None] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes=1 << 24)
        for pos, header in iter_batches(data):
            for r in iter_records(data, pos):
                view[r.key] = r.value
            offset = header.next_offset
    return view


class Paused:
    """A crash hook that holds the cleaner at `step` until released."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, at: str) -> None:
        if at == self.step:
            self.reached.set()
            assert self.release.wait(WAIT_S)


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # reported by the test
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_appends_go_on_while_the_cleaner_renames_and_reads_wait(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    for r in range(8):
        for k in range(6):
            put(log, f"k{k}".encode(), f"v{r}-{k}".encode() * 4)
    log.roll(now_ms=T0)
    put(log, b"k0", b"tail")
    before = latest(log)
    pause = Paused("after-first-delete")  # old files half renamed, `.swap` not in place yet
    cleaner, result = in_thread(lambda: clean_log(log, None, T0, crash_hook=pause))
    assert pause.reached.wait(WAIT_S)
    # The event loop's work: appends (and the high watermark) need no file but the active one.
    appender, appended = in_thread(lambda: put(log, b"k1", b"during-the-swap"))
    appender.join(WAIT_S)
    assert not appender.is_alive() and appended == [None]
    # Whatever reads or renames other segments' files waits until the names are final.
    reader, read = in_thread(lambda: latest(log))
    flusher, flushed = in_thread(lambda: log.flush(now_ms=T0))
    retention, retained = in_thread(lambda: log.delete_old_segments(T0))
    reader.join(0.3)
    assert reader.is_alive() and flusher.is_alive() and retention.is_alive()
    # ... without holding the lock while they wait: appends still go on
    appender, appended = in_thread(lambda: put(log, b"k2", b"while-they-wait"))
    appender.join(WAIT_S)
    assert not appender.is_alive() and appended == [None]
    pause.release.set()
    for t in (cleaner, reader, flusher, retention):
        t.join(WAIT_S)
        assert not t.is_alive()
    assert result and not isinstance(result[0], BaseException) and not result[0].aborted
    assert flushed == [None] and retained == [0]
    assert read and isinstance(read[0], dict) and read[0][b"k1"] == b"during-the-swap"
    names = os.listdir(tmp_path / "topic-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    log.check_integrity()
    log.close()
    reopened = open_log(tmp_path, COMPACT)
    assert latest(reopened) == {**before, b"k1": b"during-the-swap", b"k2": b"while-they-wait"}
    reopened.close()


def test_old_files_go_after_their_delay_without_the_lock(tmp_path: Path) -> None:
    cfg = dataclasses.replace(COMPACT, file_delete_delay_ms=60_000)
    log = open_log(tmp_path, cfg)
    for r in range(6):
        for k in range(5):
            put(log, f"k{k}".encode(), f"v{r}-{k}".encode() * 4)
    log.roll(now_ms=T0)
    result = clean_log(log, None, T0)
    assert result is not None and not result.aborted
    deleted = [n for n in os.listdir(tmp_path / "topic-0") if n.endswith(".deleted")]
    assert deleted  # kept for file.delete.delay.ms
    assert log.delete_pending_files(T0 + 59_999) == 0
    assert log.delete_pending_files(T0 + 60_000) == result.segments_before
    assert not [n for n in os.listdir(tmp_path / "topic-0") if n.endswith(".deleted")]
    log.close()


def test_the_cleaned_segment_is_opened_without_the_log_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the output reads its indexes: an append on the event loop must not wait."""
    from wherry.log.clean_job import CleanJob

    log = open_log(tmp_path, COMPACT)
    for r in range(6):
        for k in range(5):
            put(log, f"k{k}".encode(), f"v{r}-{k}".encode() * 4)
    log.roll(now_ms=T0)
    held: list[bool] = []
    open_output = CleanJob.open_output

    def watched(job: CleanJob, base: int) -> object:
        held.append(log.lock._is_owned())  # type: ignore[attr-defined]
        return open_output(job, base)

    monkeypatch.setattr(CleanJob, "open_output", watched)
    result = clean_log(log, None, T0)
    assert result is not None and not result.aborted and result.segments_before > 1
    assert held and not any(held)
    log.close()


def test_the_cleaners_record_walk_reads_what_iter_records_decodes() -> None:
    from wherry.log.clean_job import _record_keys
    from wherry.protocol.records import RecordError, parse_header

    specs = [
        RecordSpec(b"k1", b"v" * 300, headers=(("h", b"x"), ("n", None))),
        RecordSpec(None, b"keyless"),
        RecordSpec(b"k2", None),  # a tombstone
        RecordSpec(b"", b""),
        RecordSpec(b"k" * 200, b"long key"),
    ]
    for compression in (0, 1, 4):  # none, gzip, zstd
        data = build_batch(specs, timestamp_ms=T0, compression=compression, base_offset=40)
        header = parse_header(data, 0)
        expected = [(r.offset, r.key, r.value is None) for r in iter_records(data)]
        assert _record_keys(data, header) == expected
        assert expected[2] == (42, b"k2", True) and expected[1][1] is None
    data = build_batch(specs, timestamp_ms=T0)
    header = parse_header(data, 0)
    cut = data[: header.size_in_bytes - 5]  # the last record torn
    with pytest.raises(RecordError):
        _record_keys(cut, header)
    bad = bytearray(data)
    bad[61] = 0x7E  # the first record's length: far past the batch
    with pytest.raises(RecordError):
        _record_keys(bytes(bad), header)


def test_retention_renames_the_files_after_releasing_the_lock(tmp_path: Path) -> None:
    cfg = dataclasses.replace(COMPACT, cleanup_policy=("delete",), retention_ms=10_000,
                              file_delete_delay_ms=60_000)
    log = open_log(tmp_path, cfg)
    for r in range(6):
        for k in range(5):
            put(log, f"k{k}".encode(), f"v{r}-{k}".encode() * 4)
    first = log.segments[0].base_offset
    segments = log._segments
    with log.lock:  # what a retention pass does under the lock
        segments.delete_oldest(1, T0, "test")
    assert os.path.exists(tmp_path / "topic-0" / f"{first:020d}.log")  # not renamed yet
    appender, appended = in_thread(lambda: put(log, b"k9", b"appended"))
    appender.join(WAIT_S)
    assert not appender.is_alive() and appended == [None]
    reader, read = in_thread(lambda: log.read(log.segments[0].base_offset, max_bytes=100))
    reader.join(0.3)
    assert reader.is_alive()  # reads wait for the renames
    segments.rename_deleted()
    reader.join(WAIT_S)
    assert not reader.is_alive() and read and isinstance(read[0], bytes) and read[0]
    names = os.listdir(tmp_path / "topic-0")
    assert f"{first:020d}.log.deleted" in names and f"{first:020d}.log" not in names
    # a whole pass (retention.ms long past), then the purge once file.delete.delay.ms passed
    later = T0 + 3_600_000
    assert log.delete_old_segments(later) > 0
    assert [n for n in os.listdir(tmp_path / "topic-0") if n.endswith(".deleted")]
    log.delete_old_segments(later + 60_000)
    assert not [n for n in os.listdir(tmp_path / "topic-0") if n.endswith(".deleted")]
    log.close()
