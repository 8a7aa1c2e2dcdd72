"""The parts of a partition log used directly: loader, segment list, retention, validator."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from logtest_util import SMALL, T0, TP, batch, headers, offsets, open_log

from wherry.log.config import LogConfig
from wherry.log.errors import LogOffsetError, OffsetOutOfRangeError
from wherry.log.loader import LoadedLog, LogLoader
from wherry.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from wherry.log.retention import LogRetention, RetentionBounds
from wherry.log.segment import segment_file_name
from wherry.log.validator import (
    assign_offsets,
    parse_batches,
    validate_replicated_batches,
)
from wherry.protocol.records import CorruptRecordError, iter_batches

PART = "topic-0"


def _load(tmp_path: Path, config: LogConfig = SMALL, *, clean: bool = True) -> LoadedLog:
    return LogLoader(
        dir=tmp_path / PART,
        config=config,
        topic_partition=TP,
        recovery_point=0,
        log_start_offset=0,
        now_ms=T0,
        had_clean_shutdown=clean,
        high_watermark=None,
        producer_id_expiration_ms=DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ).load()


def _written_log(tmp_path: Path, config: LogConfig = SMALL, *, batches: int = 40) -> list[int]:
    """A closed log of `batches` two-record batches with timestamps T0, T0+1000, ...; returns
    its segments' base offsets."""
    log = open_log(tmp_path, config)
    for i in range(batches):
        log.append_as_leader(batch(2, ts=T0 + i * 1000), leader_epoch=0, now_ms=T0)
    bases = [s.base_offset for s in log.segments]
    log.flush()
    log.close()
    return bases


def test_loader_settles_offsets_and_producer_state(tmp_path: Path) -> None:
    bases = _written_log(tmp_path)
    loaded = _load(tmp_path)
    assert loaded.log_start_offset == 0 and loaded.log_end_offset == 80
    assert loaded.recovery_point == 80 and loaded.high_watermark == 0
    assert [s.base_offset for s in loaded.segments] == bases
    assert loaded.segments.active.active
    assert loaded.producer_state.map_end_offset == 80
    loaded.segments.close()


def test_loader_completes_an_interrupted_swap(tmp_path: Path) -> None:
    bases = _written_log(tmp_path)
    part = tmp_path / PART
    # A compaction that crashed after writing `<base>.log.swap` (the first two segments'
    # data) and before deleting what it replaces.
    first, second = (part / segment_file_name(b, ".log") for b in bases[:2])
    swap = part / segment_file_name(bases[0], ".log.swap")
    swap.write_bytes(first.read_bytes() + second.read_bytes())
    (part / segment_file_name(bases[0], ".index.swap")).write_bytes(b"")

    loaded = _load(tmp_path, clean=False)
    assert not list(part.glob("*.swap"))
    assert not (part / segment_file_name(bases[1], ".log")).exists()
    assert [s.base_offset for s in loaded.segments] == [bases[0], *bases[2:]]
    assert loaded.log_end_offset == 80
    data = loaded.segments.read(0, max_bytes=1 << 20, upper=None, min_one_message=True)
    assert offsets(data) == list(range(bases[2]))
    loaded.segments.close()


def test_segment_lookups(tmp_path: Path) -> None:
    bases = _written_log(tmp_path)
    segments = _load(tmp_path).segments
    assert [s.base_offset for s in segments.segments_between(bases[1] + 1, bases[3])] == bases[1:3]
    found = [(s.base_offset, h.base_offset) for s, h in segments.iter_batches_from(bases[2] + 3)]
    # from an indexed batch at or before the offset, in the segment holding it, to the end
    assert found[0][0] == bases[2] and bases[2] <= found[0][1] <= bases[2] + 2
    assert [b for _, b in found] == list(range(found[0][1], 80, 2))
    assert found[-1] == (bases[-1], 78)
    # reads stop before `upper`, even inside a segment
    data = segments.read(0, max_bytes=1 << 20, upper=bases[1] - 2, min_one_message=True)
    assert offsets(data) == list(range(bases[1] - 2))
    at = segments.find_offset_by_timestamp(T0 + 10_500, 0)
    assert at is not None and (at.offset, at.timestamp) == (22, T0 + 11_000)
    assert segments.find_offset_by_timestamp(T0 + 10**6, 0) is None
    newest = segments.max_timestamp_offset(0)
    assert newest is not None and (newest.offset, newest.timestamp) == (78, T0 + 39_000)
    segments.check_integrity(80)
    with pytest.raises(LogOffsetError):
        segments.check_integrity(81)
    segments.close()


def test_segment_roll_truncation_and_reset(tmp_path: Path) -> None:
    bases = _written_log(tmp_path)
    loaded = _load(tmp_path)
    segments = loaded.segments
    rolled = segments.roll(80, T0)
    assert rolled.base_offset == 80 and segments.active is rolled
    assert segments.pending_flush_offset == 80
    assert loaded.producer_state.latest_snapshot_offset() == 80
    assert segments.roll(80, T0) is rolled  # empty and already at the log end: no-op

    end = segments.truncate_to(bases[2] + 1, T0)
    assert end == bases[2]  # the batch containing the offset goes whole
    assert segments.active.base_offset == bases[2] and len(segments) == 3
    assert segments.pending_flush_offset == bases[2]  # lowered with the log end
    segments.mark_flushed(bases[2])
    assert segments.pending_flush_offset is None

    segments.reset(500, T0)
    assert [s.base_offset for s in segments] == [500]
    assert segments.active.active and segments.active.size == 0
    assert len(list((tmp_path / PART).glob("*.log.deleted"))) == len(bases) + 1
    assert segments.delete_pending_files(T0 + SMALL.file_delete_delay_ms) == len(bases) + 1
    assert not list((tmp_path / PART).glob("*.deleted"))
    segments.close()


def test_retention_moves_the_log_start_offset(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=10_000, file_delete_delay_ms=0)
    bases = _written_log(tmp_path, config)
    loaded = _load(tmp_path, config)
    segments = loaded.segments
    retention = LogRetention(
        segments,
        leader_epoch_cache=loaded.leader_epoch_cache,
        producer_state=loaded.producer_state,
        log_start_offset=loaded.log_start_offset,
    )
    with pytest.raises(OffsetOutOfRangeError):
        retention.maybe_increment_log_start_offset(10, high_watermark=5, reason="test")
    assert retention.maybe_increment_log_start_offset(bases[1] + 1, high_watermark=80, reason="")
    assert not retention.maybe_increment_log_start_offset(bases[1], high_watermark=80, reason="")

    # nothing above the high watermark goes
    assert retention.delete_log_start_offset_breached_segments(T0, RetentionBounds(0, 80)) == 0
    assert retention.delete_log_start_offset_breached_segments(T0, RetentionBounds(80, 80)) == 1
    assert segments.first.base_offset == bases[1]
    assert retention.log_start_offset == bases[1] + 1

    # retention.ms: segments whose newest record is older than 10 s before now
    now = T0 + 39_000
    deleted = retention.delete_old_segments(now, RetentionBounds(80, 80))
    assert deleted > 0
    assert retention.log_start_offset == segments.first.base_offset
    assert now - segments.first.largest_timestamp <= 10_000
    assert all(s.base_offset >= retention.log_start_offset for s in segments)

    # everything expired: the active segment is rolled first, the log keeps an empty one
    retention.delete_old_segments(T0 + 10**9, RetentionBounds(80, 80))
    assert [s.base_offset for s in segments] == [80] and segments.active.size == 0
    assert retention.log_start_offset == 80
    retention.truncated_to(70)
    assert retention.log_start_offset == 70
    segments.close()


def test_validator_checks_and_offsets() -> None:
    two = batch(2) + batch(3)
    with pytest.raises(CorruptRecordError):
        parse_batches(two[:-5])
    buf = bytearray(two)
    assigned = [
        h
        for _, h in assign_offsets(
            buf, parse_batches(buf), first_offset=100, leader_epoch=4, log_append_time_ms=T0 + 7
        )
    ]
    assert [(h.base_offset, h.last_offset) for h in assigned] == [(100, 101), (102, 104)]
    assert [h.base_offset for h in headers(bytes(buf))] == [100, 102]
    assert {h.partition_leader_epoch for _, h in iter_batches(buf)} == {4}
    assert {h.max_timestamp for h in assigned} == {T0 + 7}
    batches = parse_batches(buf)
    validate_replicated_batches(buf, batches, SMALL, topic_partition=TP, log_end_offset=100)
    with pytest.raises(LogOffsetError):
        validate_replicated_batches(buf, batches, SMALL, topic_partition=TP, log_end_offset=101)
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        validate_replicated_batches(buf, batches, SMALL, topic_partition=TP, log_end_offset=100)

