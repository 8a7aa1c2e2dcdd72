"""Log: appends, reads, rolling, retention, truncation, timestamps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logtest_util import SMALL, T0, TP, batch, fill, headers, offsets, open_log, read_all

from wherry.log.errors import LogOffsetError, OffsetOutOfRangeError
from wherry.log.log import InvalidTimestampError, RecordBatchTooLargeError
from wherry.protocol.records import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    build_batch,
    build_control_batch,
    patch_batch,
)


def test_append_and_read_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    infos = [log.append_as_leader(batch(3), leader_epoch=7, now_ms=T0) for _ in range(40)]
    assert [(i.first_offset, i.last_offset) for i in infos[:3]] == [(0, 2), (3, 5), (6, 8)]
    assert all(i.log_append_time_ms == -1 and not i.duplicate for i in infos)
    assert infos[-1].record_count == 3 and infos[-1].size_in_bytes == len(batch(3))
    assert log.log_end_offset == 120
    assert log.num_segments > 3
    assert all(s.size <= SMALL.segment_bytes for s in log.segments)
    data = read_all(log)
    assert offsets(data) == list(range(120))
    assert {h.partition_leader_epoch for h in headers(data)} == {7}
    # reads starting mid-batch return the whole batch; each read stays within one segment
    part = log.read(61, max_bytes=1)
    assert [h.base_offset for h in headers(part)] == [60]
    assert log.read(61, max_bytes=1, min_one_message=False) == b""
    for seg in log.segments[1:]:
        first = log.read(seg.base_offset, max_bytes=1 << 20)
        assert headers(first)[0].base_offset == seg.base_offset
    log.check_integrity()
    log.close()
    reopened = open_log(tmp_path, clean=True)
    assert reopened.log_end_offset == 120
    assert offsets(read_all(reopened)) == list(range(120))
    assert reopened.latest_epoch == 7
    reopened.close()


def test_read_out_of_range_and_at_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5, records=2)
    assert log.read(10, max_bytes=1000) == b""  # at the log end: empty
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(11, max_bytes=1000)
    assert info.value.error_code == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, max_bytes=1000)
    log.close()


def test_max_offset_bounds_reads(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 30, records=2)
    assert log.update_high_watermark(31) == 31  # mid-batch: that batch is not readable
    data = log.read(0, max_bytes=1 << 20, max_offset=31)
    assert headers(data)[-1].next_offset <= 30
    out = bytearray()
    offset = 0
    while True:
        chunk = log.read(offset, max_bytes=1 << 20, max_offset=log.high_watermark)
        if not chunk:
            break
        out += chunk
        offset = headers(chunk)[-1].next_offset
    assert offsets(bytes(out)) == list(range(30))
    assert log.read(30, max_bytes=1000, max_offset=30) == b""
    assert log.read(45, max_bytes=1000, max_offset=30) == b""  # above the HW: empty, no error
    assert log.read(0, max_bytes=1000, max_offset=0) == b""
    log.close()


def test_roll_by_segment_ms(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, segment_bytes=1 << 20, segment_ms=1000)
    log = open_log(tmp_path, config)
    log.append_as_leader(batch(ts=T0), leader_epoch=0, now_ms=T0)
    log.append_as_leader(batch(ts=T0 + 1000), leader_epoch=0, now_ms=T0 + 1000)
    assert log.num_segments == 1
    log.append_as_leader(batch(ts=T0 + 1001), leader_epoch=0, now_ms=T0 + 1001)
    assert log.num_segments == 2
    assert log.active_segment.base_offset == 2
    # an idle log does not roll by itself; the next append does
    log.append_as_leader(batch(ts=T0 + 5000), leader_epoch=0, now_ms=T0 + 5000)
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    log.close()


def test_roll_by_wall_clock_when_no_timestamps(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, segment_bytes=1 << 20, segment_ms=1000)
    log = open_log(tmp_path, config, now_ms=T0)
    log.append_as_leader(batch(ts=-1), leader_epoch=0, now_ms=T0)
    log.append_as_leader(batch(ts=-1), leader_epoch=0, now_ms=T0 + 1001)
    assert log.num_segments == 2
    log.close()


def test_roll_when_index_full(tmp_path: Path) -> None:
    config = dataclasses.replace(
        SMALL, segment_bytes=1 << 20, index_interval_bytes=1, segment_index_bytes=8 * 4
    )
    log = open_log(tmp_path, config)
    fill(log, 20)
    assert log.num_segments >= 3
    assert offsets(read_all(log)) == list(range(20))
    log.close()


def test_retention_by_time(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=10_000, file_delete_delay_ms=0)
    log = open_log(tmp_path, config)
    for i in range(30):
        log.append_as_leader(batch(2, ts=T0 + i * 1000), leader_epoch=0, now_ms=T0 + i * 1000)
    segments = log.segments
    assert len(segments) >= 4
    # nothing is deleted above the high watermark
    assert log.delete_old_segments(T0 + 10**9) == 0
    log.update_high_watermark(log.log_end_offset)
    now = T0 + 29_000 + 1
    deleted = log.delete_old_segments(now)
    expected = [s for s in segments if now - s.max_timestamp_so_far > 10_000]
    assert deleted == len(expected) > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0
    for seg in expected:
        assert not seg.log_path.exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, max_bytes=100)
    assert offsets(read_all(log))[0] == log.log_start_offset
    # everything expires: the active segment is rolled so all data can go
    deleted = log.delete_old_segments(T0 + 10**9)
    assert log.num_segments == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 60
    assert log.read(60, max_bytes=100) == b""
    fill(log, 1)
    assert log.log_end_offset == 61
    log.close()


def test_retention_by_size(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_bytes=2500, retention_ms=-1)
    log = open_log(tmp_path, config)
    fill(log, 40, records=2)
    log.update_high_watermark(log.log_end_offset)
    total = log.size_in_bytes
    deleted = log.delete_old_segments(T0)
    assert deleted > 0
    # Kafka: delete the oldest segments while the log stays >= retention.bytes without them
    assert log.size_in_bytes < total
    assert log.size_in_bytes - log.segments[0].size < 2500
    # deleted segments are renamed and removed after file.delete.delay.ms
    deleted_files = list((tmp_path / "topic-0").glob("*.deleted"))
    assert len(deleted_files) == 3 * deleted
    assert log.delete_pending_files(T0 + 59_999) == 0
    assert log.delete_pending_files(T0 + 60_000) == deleted
    assert not list((tmp_path / "topic-0").glob("*.deleted"))
    log.close()


def test_log_start_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=2)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(10)  # above the high watermark (0)
    log.update_high_watermark(60)
    assert log.maybe_increment_log_start_offset(25, "DeleteRecords")
    assert not log.maybe_increment_log_start_offset(20)
    assert log.log_start_offset == 25
    with pytest.raises(OffsetOutOfRangeError):
        log.read(24, max_bytes=100)
    assert offsets(log.read(25, max_bytes=1))[0] == 24  # the batch containing 25
    assert log.offset_for_timestamp(-2) == (25, -1)
    before = log.num_segments
    assert log.delete_old_segments(T0) >= 1  # segments wholly below 25 go even without retention
    assert log.num_segments < before
    assert log.segments[0].base_offset <= 25
    assert log.log_start_offset == 25
    log.close()
    reopened = open_log(tmp_path, clean=True, log_start_offset=25, high_watermark=60)
    assert reopened.log_start_offset == 25 and reopened.high_watermark == 60
    reopened.close()


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 40, records=2)
    log.update_high_watermark(80)
    assert not log.truncate_to(80)
    assert log.truncate_to(41)  # mid batch: removes the whole batch 40-41
    assert log.log_end_offset == 40
    assert log.high_watermark == 40
    assert offsets(read_all(log)) == list(range(40))
    info = log.append_as_leader(batch(2), leader_epoch=1, now_ms=T0)
    assert info.first_offset == 40
    assert log.truncate_to(0)
    assert log.log_end_offset == 0 and log.num_segments == 1
    log.close()


def test_truncate_at_the_log_end_drops_an_epoch_that_starts_there(tmp_path: Path) -> None:
    """A replica that led an epoch without appending anything has that epoch starting at its
    log end. Truncating to (or past) the log end removes no data but drops such entries, as
    Kafka's truncateTo does: else, as a follower, it keeps asking the leader about an epoch
    the leader never had and never finishes truncating (sim seed 577)."""
    log = open_log(tmp_path)
    fill(log, 3, records=2)  # epoch 0 (fill's), offsets 0-5
    log.leader_epoch_cache.assign(2, 6)  # led epoch 2 from offset 6, wrote nothing
    assert log.latest_epoch == 2
    assert not log.truncate_to(6)  # at the end: no data removed, the empty epoch goes
    assert log.log_end_offset == 6 and log.latest_epoch == 0
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [0]
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 20, records=2)
    log.truncate_fully_and_start_at(1000)
    assert log.log_start_offset == log.log_end_offset == 1000
    assert [s.base_offset for s in log.segments] == [1000]
    assert log.append_as_leader(batch(), leader_epoch=0, now_ms=T0).first_offset == 1000
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, max_bytes=10)
    log.close()
    reopened = open_log(tmp_path, clean=True)
    assert reopened.log_start_offset == 1000 and reopened.log_end_offset == 1001
    reopened.close()


def test_append_as_follower(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = bytearray()
    for base, epoch in ((0, 1), (3, 1), (6, 2)):
        b = bytearray(batch(3))
        patch_batch(b, 0, base_offset=base, partition_leader_epoch=epoch)
        data += b
    info = log.append_as_follower(bytes(data))
    assert (info.first_offset, info.last_offset) == (0, 8)
    assert log.log_end_offset == 9
    assert [tuple(e) for e in log.leader_epoch_cache.entries] == [(1, 0), (2, 6)]
    assert log.end_offset_for_epoch(1) == (1, 6)
    with pytest.raises(LogOffsetError):
        log.append_as_follower(bytes(data[: len(batch(3))]))  # offset 0 again
    torn = bytes(data[:-5])
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(torn)
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, message_timestamp_type="LogAppendTime")
    log = open_log(tmp_path, config)
    info = log.append_as_leader(batch(2, ts=5), leader_epoch=0, now_ms=T0 + 42)
    assert info.log_append_time_ms == T0 + 42
    (h,) = headers(log.read(0, max_bytes=1000))
    assert h.timestamp_type == 1 and h.max_timestamp == T0 + 42
    log.check_integrity()  # CRC was recomputed
    assert log.offset_for_timestamp(T0 + 42) == (0, T0 + 42)
    log.close()


def test_timestamp_bounds(tmp_path: Path) -> None:
    config = dataclasses.replace(
        SMALL, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500
    )
    log = open_log(tmp_path, config)
    log.append_as_leader(batch(ts=T0 - 1000), leader_epoch=0, now_ms=T0)
    with pytest.raises(InvalidTimestampError) as info:
        log.append_as_leader(batch(ts=T0 - 1001), leader_epoch=0, now_ms=T0)
    assert info.value.error_code == 32
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(ts=T0 + 501), leader_epoch=0, now_ms=T0)
    assert log.log_end_offset == 1
    log.close()


def test_invalid_appends(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, max_message_bytes=500)
    log = open_log(tmp_path, config)
    good = bytearray(batch(2))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bad_crc, leader_epoch=0, now_ms=T0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good[:-3], leader_epoch=0, now_ms=T0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"", leader_epoch=0, now_ms=T0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(1, value=b"x" * 600), leader_epoch=0, now_ms=T0)
    control = build_control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(control, leader_epoch=0, now_ms=T0)
    no_seq = build_batch([(None, b"x")], producer_id=5, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(no_seq, leader_epoch=0, now_ms=T0)
    log.close()
    big = dataclasses.replace(SMALL, segment_bytes=300, max_message_bytes=10_000)
    log = open_log(tmp_path / "x", big)
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(batch(1, value=b"x" * 400), leader_epoch=0, now_ms=T0)
    assert log.log_end_offset == 0
    log.close()


def test_flush_messages_and_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, flush_messages=1))
    fill(log, 3)
    assert log.recovery_point == log.log_end_offset == 3
    log.close()
    log = open_log(tmp_path / "b")
    fill(log, 30)
    assert log.recovery_point == 0
    assert log.flush_if_needed(T0)  # flushes the segments rolled so far
    assert 0 < log.recovery_point == log.active_segment.base_offset
    log.flush()
    assert log.recovery_point == 30 and log.unflushed_messages == 0
    log.close()


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(30):
        log.append_as_leader(batch(2, ts=T0 + i * 10), leader_epoch=0, now_ms=T0)
    assert log.offset_for_timestamp(T0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 95) == (20, T0 + 100)
    assert log.offset_for_timestamp(T0 + 290) == (58, T0 + 290)
    assert log.offset_for_timestamp(T0 + 291) is None
    assert log.offset_for_timestamp(-1) == (60, -1)
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-3) == (58, T0 + 290)
    # out-of-order timestamps: first record with ts >= target, by offset
    log.append_as_leader(batch(1, ts=T0 + 5), leader_epoch=0, now_ms=T0)
    assert log.offset_for_timestamp(T0 + 1) == (2, T0 + 10)
    assert log.topic_partition == TP
    log.close()


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5)),
        st.tuples(st.just("truncate"), st.integers(0, 120)),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("roll"), st.just(0)),
    ),
    max_size=30,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_random_operations_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    root = tmp_path_factory.mktemp("model")
    log = open_log(root)
    model: list[tuple[int, int]] = []  # (first, last) of each batch
    for op, arg in ops:
        end = model[-1][1] + 1 if model else 0
        if op == "append":
            info = log.append_as_leader(batch(arg), leader_epoch=0, now_ms=T0)
            assert info.first_offset == end
            model.append((info.first_offset, info.last_offset))
        elif op == "truncate":
            log.truncate_to(arg)
            if arg < end:  # the batch containing `arg` goes entirely
                model = [(f, last) for f, last in model if last < arg]
        elif op == "roll":
            log.roll(now_ms=T0)
        else:
            log.flush()
            log.close()
            log = open_log(root, clean=bool(arg))
        expected = [o for f, last in model for o in range(f, last + 1)]
        assert log.log_end_offset == (model[-1][1] + 1 if model else 0)
        assert offsets(read_all(log)) == expected
    log.check_integrity()
    log.close()


def test_roll_jitter_is_bounded(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, segment_ms=1000, segment_jitter_ms=5000)
    log = open_log(tmp_path, config)
    for i in range(20):
        log.append_as_leader(batch(ts=T0 + i * 2000), leader_epoch=0, now_ms=T0 + i * 2000)
    assert log.num_segments == 20  # 2 s apart > segment.ms: every append rolls
    assert all(0 <= s.roll_jitter_ms < 1000 for s in log.segments)
    log.close()
