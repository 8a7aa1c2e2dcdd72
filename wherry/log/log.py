"""The durable log of one partition (Kafka 3.9's UnifiedLog + LocalLog + LogLoader).

A directory `<topic>-<partition>` holds segments (`<base>.log/.index/.timeindex`), producer
state snapshots (`<offset>.snapshot`) and the `leader-epoch-checkpoint`. The last segment is the
active one and takes appends; the others are read-only.

Offsets the log tracks:

* log_start_offset <= high_watermark <= log_end_offset (LEO = next offset to assign);
* recovery_point: everything below it has been fsynced; after an unclean shutdown segments from
  the one containing the recovery point onward are re-validated.

Every public method takes the log's lock, so the broker may call slow ones (flush, retention)
from an executor thread.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import fsync_dir
from wherry.log.config import LONG_MAX, LogConfig
from wherry.log.errors import (
    CorruptIndexError,
    LogError,
    LogOffsetError,
    OffsetOutOfRangeError,
    StorageError,
)
from wherry.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from wherry.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    SNAPSHOT_SUFFIX,
    ProducerStateManager,
)
from wherry.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    RollParams,
    offset_from_file_name,
    segment_file_name,
)
from wherry.protocol.records import (
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
    check_records_have_keys,
    crc_ok,
    iter_batches,
    iter_records,
    parse_header,
    patch_batch,
    set_log_append_time,
    validate_batch,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "InvalidTimestampError",
    "Log",
    "OffsetAndTimestamp",
    "RecordBatchTooLargeError",
]

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_TEMP_SUFFIXES = (DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX)


class InvalidTimestampError(LogError):
    """A CreateTime record timestamp is outside message.timestamp.{before,after}.max.ms."""

    error_code = ErrorCode.invalid_timestamp


class RecordBatchTooLargeError(LogError):
    """The append is larger than segment.bytes."""

    error_code = ErrorCode.record_list_too_large


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Outcome of an append."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    max_timestamp_ms: int = -1
    record_count: int = 0
    size_in_bytes: int = 0


class OffsetAndTimestamp(NamedTuple):
    """A ListOffsets answer."""

    offset: int
    timestamp: int


class _ReadBound(NamedTuple):
    offset: int
    segment_base: int
    position: int


def _parse_batches(buf: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """All batches of an append buffer; the buffer must be exactly whole batches."""
    if len(buf) == 0:
        raise InvalidRecordError("append has no record batch")
    batches = list(iter_batches(buf))
    end = batches[-1][0] + batches[-1][1].size_in_bytes if batches else 0
    if end != len(buf):
        raise CorruptRecordError(
            f"append of {len(buf)} bytes holds {end} bytes of whole batches (torn batch)"
        )
    return batches


class Log:
    """A partition log. Create with `Log.open`."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        topic_partition: TopicPartition,
        producer_state: ProducerStateManager,
        leader_epoch_cache: LeaderEpochCache,
        segments: list[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        high_watermark: int,
        now_ms: int,
    ) -> None:
        self.dir = dir if isinstance(dir, Path) else Path(dir)
        self.config = config
        self.topic_partition = topic_partition
        self.producer_state = producer_state
        self.leader_epoch_cache = leader_epoch_cache
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._recovery_point = recovery_point
        self._high_watermark = high_watermark
        self._last_now_ms = now_ms
        self._last_flush_ms = now_ms
        self._lock = threading.RLock()
        self._closed = False
        self._dir_needs_flush = False
        self._pending_flush_offset: int | None = None  # rolled segments not yet fsynced
        self._pending_deletes: list[tuple[int, LogSegment]] = []  # (delete at ms, segment)
        self._read_bound: _ReadBound | None = None
        self._truncations = 0  # bumped by every truncation (flush races)

    # ----------------------------------------------------------------------------------
    # Loading
    # ----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        *,
        topic_partition: TopicPartition | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        now_ms: int,
        had_clean_shutdown: bool = False,
        high_watermark: int | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """Open (creating if needed) the log in `dir`, recovering it if needed.

        Without `had_clean_shutdown`, segments from the one containing `recovery_point` onward
        are re-validated batch by batch (length, magic, CRC, offsets), the log is truncated at
        the first invalid batch and their indexes are rebuilt. Segments whose index files are
        missing or fail the sanity check are rebuilt in any case. Producer state is loaded from
        the latest snapshot at or below the log end offset and the rest is replayed.
        """
        dir = dir if isinstance(dir, Path) else Path(dir)
        tp = topic_partition if topic_partition is not None else TopicPartition.parse(dir.name)
        dir.mkdir(parents=True, exist_ok=True)
        cls._remove_temp_files(dir)
        cls._complete_swaps(tp, dir, config, now_ms)
        leader_epochs = LeaderEpochCache(dir / LEADER_EPOCH_CHECKPOINT)

        segments = cls._load_segments(dir, config, now_ms)
        cls._recover_segments(tp, segments, recovery_point, had_clean_shutdown, leader_epochs)
        last_end: int | None = None
        if segments:
            last_end = cls._next_offset_of(tp, segments[-1])
            if log_start_offset > last_end:
                log.warning(
                    "%s: log start offset %d is beyond the log end offset %d; deleting all "
                    "segments",
                    tp,
                    log_start_offset,
                    last_end,
                )
                for segment in segments:
                    segment.delete()
                segments = []
                last_end = None
        if not segments:
            segments.append(
                LogSegment.open(
                    dir,
                    log_start_offset,
                    index_interval_bytes=config.index_interval_bytes,
                    max_index_bytes=config.segment_index_bytes,
                    now_ms=now_ms,
                    roll_jitter_ms=cls._random_jitter(config),
                )
            )
        active = segments[-1]
        active.set_active(True)
        active.resize_indexes(config.segment_index_bytes)
        log_end_offset = last_end if last_end is not None else cls._next_offset_of(tp, active)
        start = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
        recovery = log_end_offset if had_clean_shutdown else min(recovery_point, log_end_offset)
        leader_epochs.truncate_from_end(log_end_offset)
        leader_epochs.truncate_from_start(start)

        producer_state = ProducerStateManager(
            dir, producer_id_expiration_ms=producer_id_expiration_ms
        )
        hw = start if high_watermark is None else high_watermark
        opened = cls(
            dir,
            config,
            topic_partition=tp,
            producer_state=producer_state,
            leader_epoch_cache=leader_epochs,
            segments=segments,
            log_start_offset=start,
            log_end_offset=log_end_offset,
            recovery_point=recovery,
            high_watermark=min(max(hw, start), log_end_offset),
            now_ms=now_ms,
        )
        opened._rebuild_producer_state(now_ms)
        producer_state.remove_stray_snapshots(opened._bases)
        log.info(
            "%s: loaded log with %d segments, log start %d, log end %d, recovery point %d",
            tp,
            len(segments),
            start,
            log_end_offset,
            recovery,
        )
        return opened

    @staticmethod
    def _next_offset_of(tp: TopicPartition, segment: LogSegment) -> int:
        try:
            return segment.read_next_offset()
        except RecordError as exc:
            # Only after a "clean" shutdown whose files were damaged afterwards.
            log.warning("%s: invalid data at the end of the log (%s); recovering", tp, exc)
            segment.recover()
            segment.resize_indexes(segment.max_index_bytes)
            return segment.read_next_offset()

    @staticmethod
    def _random_jitter(config: LogConfig) -> int:
        if config.segment_jitter_ms <= 0:
            return 0
        return random.randrange(min(config.segment_jitter_ms, config.segment_ms))

    @staticmethod
    def _remove_temp_files(dir: Path) -> None:
        for name in os.listdir(dir):
            if name.endswith(_TEMP_SUFFIXES) and (path := dir / name).is_file():
                log.info("deleting leftover file %s", path)
                path.unlink(missing_ok=True)

    @staticmethod
    def _complete_swaps(tp: TopicPartition, dir: Path, config: LogConfig, now_ms: int) -> None:
        """Finish replacements (log compaction) interrupted by a crash (Kafka's LogLoader rule).

        A `<base>.log.swap` was fully written and fsynced before it got that name, so it is
        recovered (indexes rebuilt), every segment whose base offset lies in
        [its base offset, its next offset) is deleted (the segments it replaces, some perhaps
        already gone) and the swap file is renamed into place. Index swap files are dropped:
        the indexes are rebuilt from the data.
        """
        swaps: list[int] = []
        for name in os.listdir(dir):
            if not name.endswith(SWAP_SUFFIX):
                continue
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                try:
                    swaps.append(offset_from_file_name(name))
                    continue
                except ValueError:
                    pass
            log.info("%s: deleting index swap file %s", tp, dir / name)
            (dir / name).unlink(missing_ok=True)
        if not swaps:
            return
        ranges: list[tuple[int, int]] = []
        for base in sorted(swaps):
            segment = LogSegment.open(
                dir,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                now_ms=now_ms,
                suffix=SWAP_SUFFIX,
            )
            try:
                segment.recover()
                ranges.append((base, segment.read_next_offset()))
            finally:
                segment.close()
        for name in os.listdir(dir):
            if name.endswith(SWAP_SUFFIX) or not name.endswith(
                (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
            ):
                continue
            try:
                offset = offset_from_file_name(name)
            except ValueError:
                continue
            if any(lo <= offset < max(hi, lo + 1) for lo, hi in ranges):
                log.info("%s: deleting %s, replaced by a swap segment", tp, dir / name)
                (dir / name).unlink(missing_ok=True)
        for base, _ in ranges:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                swap = dir / segment_file_name(base, suffix + SWAP_SUFFIX)
                if swap.exists():
                    os.replace(swap, dir / segment_file_name(base, suffix))
            log.info("%s: completed the swap of segment %d", tp, base)
        fsync_dir(dir)

    @staticmethod
    def _load_segments(dir: Path, config: LogConfig, now_ms: int) -> list[LogSegment]:
        log_offsets: set[int] = set()
        index_files: list[tuple[int, str]] = []
        for name in os.listdir(dir):
            try:
                if name.endswith(LOG_SUFFIX):
                    log_offsets.add(offset_from_file_name(name))
                elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
                    index_files.append((offset_from_file_name(name), name))
            except ValueError:
                log.warning("ignoring unexpected file %s", dir / name)
        for offset, name in index_files:
            if offset not in log_offsets:
                log.warning("deleting orphaned index file %s", dir / name)
                (dir / name).unlink(missing_ok=True)
        return [
            LogSegment.open(
                dir,
                offset,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                now_ms=now_ms,
            )
            for offset in sorted(log_offsets)
        ]

    @staticmethod
    def _recover_segments(
        tp: TopicPartition,
        segments: list[LogSegment],
        recovery_point: int,
        had_clean_shutdown: bool,
        leader_epochs: LeaderEpochCache,
    ) -> None:
        """Recover (in place) the segments that need it; drop those after a truncation."""
        first_unflushed = len(segments)
        if not had_clean_shutdown:
            bases = [s.base_offset for s in segments]
            first_unflushed = max(0, bisect.bisect_right(bases, recovery_point) - 1)

        def assign_epoch(header: BatchHeader) -> None:
            epoch = header.partition_leader_epoch
            latest = leader_epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                leader_epochs.assign(epoch, header.base_offset)

        i = 0
        while i < len(segments):
            segment = segments[i]
            need = i >= first_unflushed
            if not need:
                try:
                    segment.sanity_check(full=not had_clean_shutdown)
                except CorruptIndexError as exc:
                    log.warning("%s: %s; rebuilding its indexes", tp, exc)
                    need = True
            if need:
                log.info("%s: recovering segment %d", tp, segment.base_offset)
                truncated = segment.recover(on_batch=assign_epoch)
                if truncated > 0 and i + 1 < len(segments):
                    for later in segments[i + 1 :]:
                        log.warning(
                            "%s: deleting segment %d after corruption", tp, later.base_offset
                        )
                        later.delete()
                    del segments[i + 1 :]
            i += 1

    def _rebuild_producer_state(self, now_ms: int | None) -> None:
        """Load the latest snapshot <= LEO and replay batches from there to the LEO."""
        psm = self.producer_state
        psm.truncate_and_reload(self._log_start_offset, self._log_end_offset, now_ms)
        start = psm.map_end_offset
        if start < self._log_end_offset:
            replayed = 0
            for _, header in self._iter_batches_from(start):
                if header.base_offset >= start:
                    psm.update(header)
                    replayed += 1
            log.info(
                "%s: rebuilt producer state from offset %d (%d batches replayed)",
                self.topic_partition,
                start,
                replayed,
            )
        psm.update_map_end_offset(self._log_end_offset)

    def _iter_batches_from(self, offset: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        idx = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[idx:]:
            position = (
                segment.offset_index.lookup(offset).position if segment.base_offset <= offset else 0
            )
            for _, header in segment.iter_batches(position):
                yield segment, header

    # ----------------------------------------------------------------------------------
    # Properties
    # ----------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def lock(self) -> threading.RLock:
        """The log's lock (the cleaner takes it to look at the segment list)."""
        return self._lock

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def segments(self) -> list[LogSegment]:
        """A copy of the segment list (oldest first)."""
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.topic_partition} in {self.dir} is closed")

    def _now(self, now_ms: int | None) -> int:
        if now_ms is not None:
            self._last_now_ms = max(self._last_now_ms, now_ms)
            return now_ms
        return self._last_now_ms

    # ----------------------------------------------------------------------------------
    # Configuration / high watermark
    # ----------------------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log_start_offset, log_end_offset])."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the high watermark to `offset` (clamped); True if it moved."""
        with self._lock:
            new = min(max(offset, self._log_start_offset), self._log_end_offset)
            if new > self._high_watermark:
                self._high_watermark = new
                return True
            return False

    # ----------------------------------------------------------------------------------
    # Append
    # ----------------------------------------------------------------------------------

    def append_as_leader(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        validate: bool = True,
    ) -> AppendInfo:
        """Append a client's record batch (normally exactly one), assigning offsets.

        Validates each batch (`validate_batch`: framing, CRC, records, max.message.bytes; pass
        `validate=False` if the caller already did), rejects control batches and idempotent
        batches without a sequence, checks CreateTime timestamps against
        message.timestamp.{before,after}.max.ms, stamps LogAppendTime if configured, then runs
        the idempotent-producer checks: a retried batch returns its original offsets with
        `duplicate=True` and writes nothing. Rolls the segment first if needed and fsyncs when
        flush.messages is reached. `batch` is modified in place when it is a bytearray.
        """
        buf = batch if isinstance(batch, bytearray) else bytearray(batch)
        with self._lock:
            self._check_open()
            now_ms = self._now(now_ms)
            config = self.config
            batches = _parse_batches(buf)
            view = memoryview(buf)
            for pos, header in batches:
                size = header.size_in_bytes
                if validate:
                    validate_batch(
                        view[pos : pos + size], max_message_bytes=config.max_message_bytes
                    )
                elif size > config.max_message_bytes:
                    # The caller validated the batch (CRC included) against the config it read;
                    # the config may have changed since.
                    raise RecordTooLargeError(
                        f"record batch is {size} bytes, larger than max.message.bytes "
                        f"{config.max_message_bytes}"
                    )
                if header.is_control:
                    raise InvalidRecordError("clients are not allowed to write control records")
                if config.compact:
                    check_records_have_keys(buf, pos)
                if header.has_producer_id and header.base_sequence < 0:
                    raise InvalidRecordError(
                        f"invalid sequence number {header.base_sequence} in record batch with "
                        f"producer id {header.producer_id}"
                    )
            view.release()
            if not config.log_append_time:
                self._validate_timestamps(buf, batches, now_ms)
            if len(buf) > config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"message batch size is {len(buf)} bytes in append to partition "
                    f"{self.topic_partition} which exceeds the maximum configured segment size "
                    f"of {config.segment_bytes}"
                )

            # Assign offsets (and the leader epoch, and LogAppendTime).
            first_offset = self._log_end_offset
            next_offset = first_offset
            headers: list[BatchHeader] = []
            for pos, _ in batches:
                patch_batch(buf, pos, base_offset=next_offset, partition_leader_epoch=leader_epoch)
                if config.log_append_time:
                    set_log_append_time(buf, pos, now_ms)
                patched = parse_header(buf, pos)
                headers.append(patched)
                next_offset = patched.next_offset
            last_offset = next_offset - 1
            log_append_time = now_ms if config.log_append_time else -1

            duplicate = self.producer_state.check_batches(headers)
            if duplicate is not None:
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp if config.log_append_time else -1,
                    self._log_start_offset,
                    duplicate=True,
                    max_timestamp_ms=duplicate.timestamp,
                )

            max_ts = max(h.max_timestamp for h in headers)
            self._append(buf, list(zip((p for p, _ in batches), headers, strict=True)), now_ms)
            return AppendInfo(
                first_offset,
                last_offset,
                log_append_time,
                self._log_start_offset,
                max_timestamp_ms=max_ts,
                record_count=sum(h.record_count for h in headers),
                size_in_bytes=len(buf),
            )

    def _validate_timestamps(
        self, buf: bytearray, batches: Sequence[tuple[int, BatchHeader]], now_ms: int
    ) -> None:
        config = self.config
        before = config.message_timestamp_before_max_ms
        if before == LONG_MAX:
            before = config.message_timestamp_difference_max_ms
        after = config.message_timestamp_after_max_ms
        if after == LONG_MAX:
            after = config.message_timestamp_difference_max_ms
        if before == LONG_MAX and after == LONG_MAX:
            return
        for pos, _ in batches:
            for record in iter_records(buf, pos):
                if record.timestamp < 0:
                    continue
                diff = now_ms - record.timestamp
                if diff > before or -diff > after:
                    raise InvalidTimestampError(
                        f"Timestamp {record.timestamp} of message with offset "
                        f"{record.offset} is out of range. The timestamp should be within "
                        f"[{now_ms - before if before != LONG_MAX else '-inf'}, "
                        f"{now_ms + after if after != LONG_MAX else 'inf'}]"
                    )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, now_ms: int | None = None
    ) -> AppendInfo:
        """Append batches replicated from the leader, keeping their offsets.

        Batches must be whole, CRC-valid and start at or after the log end offset with
        increasing offsets. Producer state and the leader epoch cache follow the batches.
        """
        with self._lock:
            self._check_open()
            now = self._now(now_ms)
            batches = _parse_batches(records)
            expected = self._log_end_offset
            for pos, header in batches:
                if not crc_ok(records, pos, header):
                    raise CorruptRecordError(
                        f"replicated batch at offset {header.base_offset} failed its CRC check"
                    )
                if header.base_offset < expected or header.last_offset_delta < 0:
                    raise LogOffsetError(
                        f"out of order offsets in append to {self.topic_partition}: batch "
                        f"{header.base_offset}..{header.last_offset} after offset {expected - 1}"
                    )
                expected = header.next_offset
            if len(records) > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"replicated batch of {len(records)} bytes exceeds segment.bytes "
                    f"{self.config.segment_bytes}"
                )
            self._append(records, batches, now)
            first, last = batches[0][1], batches[-1][1]
            return AppendInfo(
                first.base_offset,
                last.last_offset,
                -1,
                self._log_start_offset,
                max_timestamp_ms=max(h.max_timestamp for _, h in batches),
                record_count=sum(h.record_count for _, h in batches),
                size_in_bytes=len(records),
            )

    def _append(
        self,
        data: bytes | bytearray | memoryview,
        batches: Sequence[tuple[int, BatchHeader]],
        now_ms: int,
    ) -> None:
        last = batches[-1][1]
        max_ts = max(h.max_timestamp for _, h in batches)
        segment = self._maybe_roll(len(data), max_ts, last.last_offset, now_ms)
        segment.append(data, batches)
        for _, header in batches:
            if header.partition_leader_epoch >= 0:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            self.producer_state.update(header)
        self._log_end_offset = last.next_offset
        self.producer_state.update_map_end_offset(self._log_end_offset)
        if self.unflushed_messages >= self.config.flush_messages:
            self._flush(self._log_end_offset, now_ms)

    # ----------------------------------------------------------------------------------
    # Roll
    # ----------------------------------------------------------------------------------

    def _maybe_roll(
        self, messages_size: int, max_timestamp: int, max_offset: int, now_ms: int
    ) -> LogSegment:
        segment = self._segments[-1]
        params = RollParams(
            max_segment_bytes=self.config.segment_bytes,
            max_segment_ms=self.config.segment_ms,
            max_timestamp_in_messages=max_timestamp,
            max_offset_in_messages=max_offset,
            messages_size=messages_size,
            now_ms=now_ms,
        )
        if segment.should_roll(params):
            log.debug(
                "%s: rolling segment %d (size %d, appending %d bytes)",
                self.topic_partition,
                segment.base_offset,
                segment.size,
                messages_size,
            )
            return self._roll(now_ms)
        return segment

    def roll(self, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._now(now_ms))

    def _roll(self, now_ms: int) -> LogSegment:
        new_offset = self._log_end_offset
        active = self._segments[-1]
        if active.base_offset == new_offset:
            if active.size == 0:
                return active
            raise LogOffsetError(
                f"trying to roll {self.topic_partition} to offset {new_offset} which is the "
                f"base of the non-empty active segment"
            )
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            stale = self.dir / f"{new_offset:020d}{suffix}"
            if stale.exists():
                log.warning(
                    "%s: deleting stale file %s before rolling", self.topic_partition, stale
                )
                stale.unlink()
        active.on_become_inactive()
        self.producer_state.update_map_end_offset(new_offset)
        self.producer_state.take_snapshot(fsync=False)
        segment = LogSegment.open(
            self.dir,
            new_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
            roll_jitter_ms=self._random_jitter(self.config),
        )
        segment.set_active(True)
        self._segments.append(segment)
        self._bases.append(new_offset)
        self._dir_needs_flush = True
        # Like Kafka's asynchronous flush after a roll: done by the next flush_dirty().
        self._pending_flush_offset = new_offset
        return segment

    # ----------------------------------------------------------------------------------
    # Read
    # ----------------------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def _bound_for(self, offset: int) -> _ReadBound:
        """Segment and file position at which reading must stop to stay below `offset`."""
        cached = self._read_bound
        if cached is not None and cached.offset == offset:
            return cached
        idx = self._segment_index_for(offset)
        segment = self._segments[idx]
        found = segment.translate_offset(offset)
        position = segment.size if found is None else found.position
        bound = _ReadBound(offset, segment.base_offset, position)
        self._read_bound = bound
        return bound

    def read(
        self,
        offset: int,
        *,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes:
        """Whole batches starting with the one containing `offset`, up to `max_bytes` (at least
        one batch if `min_one_message`), and only batches below `max_offset` (exclusive bound,
        e.g. the high watermark). Empty at the end.

        Raises OffsetOutOfRangeError unless log_start_offset <= offset <= log_end_offset.
        """
        with self._lock:
            self._check_open()
            end = self._log_end_offset
            if offset < self._log_start_offset or offset > end:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {offset} for partition {self.topic_partition}, "
                    f"but we only have log segments in the range {self._log_start_offset} to "
                    f"{end}."
                )
            upper = end if max_offset is None else min(max_offset, end)
            if offset >= upper:
                return b""
            bound = self._bound_for(upper) if upper < end else None
            for segment in self._segments[self._segment_index_for(offset) :]:
                max_position: int | None = None
                if bound is not None:
                    if segment.base_offset > bound.segment_base:
                        break
                    if segment.base_offset == bound.segment_base:
                        max_position = bound.position
                data = segment.read(offset, max_bytes, max_position, min_one_message)
                if data is not None:
                    return data
            return b""

    def iter_batches(self, start_offset: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(segment base offset, header) of every batch from the one containing `start_offset`.

        A snapshot taken under the lock; for tests and tools, not for hot paths.
        """
        with self._lock:
            start = self._log_start_offset if start_offset is None else start_offset
            items = [
                (seg.base_offset, h)
                for seg, h in self._iter_batches_from(start)
                if h.last_offset >= start
            ]
        yield from items

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first record with timestamp >= `timestamp` (None if none).

        Special targets: -2 earliest (log start), -1 latest (log end), -3 max timestamp,
        -4 earliest local. The caller bounds results by the high watermark / LSO.
        """
        with self._lock:
            self._check_open()
            match timestamp:
                case -2 | -4:
                    return OffsetAndTimestamp(self._log_start_offset, -1)
                case -1:
                    return OffsetAndTimestamp(self._log_end_offset, -1)
                case -3:
                    return self._max_timestamp_offset()
                case _ if timestamp < 0:
                    raise ValueError(f"unsupported ListOffsets timestamp {timestamp}")
            for segment in self._segments:
                if segment.size == 0 or segment.largest_timestamp < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return OffsetAndTimestamp(found.offset, found.timestamp)
            return None

    def _max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        target = best.max_timestamp_so_far
        found = best.find_offset_by_timestamp(target, max(self._log_start_offset, best.base_offset))
        if found is None:
            return None
        return OffsetAndTimestamp(found.offset, found.timestamp)

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset), (-1, -1) if unknown."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(epoch, self._log_end_offset)

    # ----------------------------------------------------------------------------------
    # Truncation
    # ----------------------------------------------------------------------------------

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Remove everything at or above `offset` (follower truncation); True if anything was.

        The batch containing `offset` is removed whole, so the new log end offset may be below
        `offset` if it was not a batch boundary.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        with self._lock:
            self._check_open()
            now = self._now(now_ms)
            if offset >= self._log_end_offset:
                return False
            if self._segments[0].base_offset > offset:
                self._truncate_fully(offset, now)
                return True
            idx = self._segment_index_for(offset)
            removed = self._segments[idx + 1 :]
            del self._segments[idx + 1 :]
            del self._bases[idx + 1 :]
            for segment in removed:
                self._async_delete(segment, now)
            active = self._segments[-1]
            active.set_active(True)
            active.truncate_to(offset, now_ms=now)
            self._log_end_offset = active.read_next_offset()
            self._after_truncation(now)
            return True

    def _after_truncation(self, now_ms: int) -> None:
        self._truncations += 1
        end = self._log_end_offset
        self._read_bound = None
        self.leader_epoch_cache.truncate_from_end(end)
        self._log_start_offset = min(self._log_start_offset, end)
        self._recovery_point = min(self._recovery_point, end)
        self._high_watermark = min(self._high_watermark, end)
        if self._pending_flush_offset is not None and self._pending_flush_offset > end:
            self._pending_flush_offset = end
        self._rebuild_producer_state(now_ms)

    def truncate_fully_and_start_at(self, new_offset: int, *, now_ms: int | None = None) -> None:
        """Delete all data and restart the (empty) log at `new_offset`."""
        if new_offset < 0:
            raise ValueError(f"cannot start the log at a negative offset {new_offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully(new_offset, self._now(now_ms))

    def _truncate_fully(self, new_offset: int, now_ms: int) -> None:
        for segment in self._segments:
            self._async_delete(segment, now_ms)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (self.dir / f"{new_offset:020d}{suffix}").unlink(missing_ok=True)
        segment = LogSegment.open(
            self.dir,
            new_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
            roll_jitter_ms=self._random_jitter(self.config),
        )
        segment.set_active(True)
        self._truncations += 1
        self._segments = [segment]
        self._bases = [new_offset]
        self._log_end_offset = new_offset
        self._log_start_offset = new_offset
        self._recovery_point = new_offset
        self._high_watermark = new_offset
        self._pending_flush_offset = None
        self._dir_needs_flush = True
        self._read_bound = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    # ----------------------------------------------------------------------------------
    # Log start offset and retention
    # ----------------------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str = "") -> bool:
        """Move the log start offset up (DeleteRecords, retention); True if it moved.

        Raises OffsetOutOfRangeError beyond the high watermark. Whole segments below it are
        deleted by the next retention pass.
        """
        with self._lock:
            self._check_open()
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {new_log_start_offset} of "
                    f"partition {self.topic_partition} since it is larger than the high "
                    f"watermark {self._high_watermark}"
                )
            if new_log_start_offset <= self._log_start_offset:
                return False
            log.info(
                "%s: incrementing log start offset to %d (%s)",
                self.topic_partition,
                new_log_start_offset,
                reason or "requested",
            )
            self._log_start_offset = new_log_start_offset
            self._recovery_point = max(self._recovery_point, new_log_start_offset)
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
            return True

    def _deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool]
    ) -> list[LogSegment]:
        deletable: list[LogSegment] = []
        segments = self._segments
        for i, segment in enumerate(segments):
            upcoming = segments[i + 1] if i + 1 < len(segments) else None
            upper = upcoming.base_offset if upcoming is not None else self._log_end_offset
            last_and_empty = upcoming is None and segment.size == 0
            if (
                self._high_watermark >= upper
                and predicate(segment, upcoming)
                and not last_and_empty
            ):
                deletable.append(segment)
            else:
                break
        return deletable

    def delete_old_segments(self, now_ms: int) -> int:
        """One retention pass (Kafka's deleteOldSegments); returns segments deleted.

        With cleanup.policy=delete: segments wholly below the log start offset, then the
        oldest segments beyond retention.bytes, then those whose newest timestamp is older
        than retention.ms. Only segments wholly below the high watermark are deleted; if all
        would go, the active segment is rolled first so the log keeps one (empty) segment.
        Also purges files of deleted segments whose file.delete.delay.ms has passed.
        """
        with self._lock:
            self._check_open()
            now = self._now(now_ms)
            deleted = self._delete_log_start_offset_breached_segments(now)
            if self.config.delete:
                deleted += self._delete_retention_size_breached_segments(now)
                deleted += self._delete_retention_ms_breached_segments(now)
            self.delete_pending_files(now)
            return deleted

    def delete_log_start_offset_breached_segments(self, now_ms: int) -> int:
        """Delete segments wholly below the log start offset; returns how many."""
        with self._lock:
            self._check_open()
            return self._delete_log_start_offset_breached_segments(self._now(now_ms))

    def delete_retention_size_breached_segments(self, now_ms: int) -> int:
        """Delete the oldest segments beyond retention.bytes; returns how many."""
        with self._lock:
            self._check_open()
            return self._delete_retention_size_breached_segments(self._now(now_ms))

    def delete_retention_ms_breached_segments(self, now_ms: int) -> int:
        """Delete segments whose newest timestamp is older than retention.ms; returns how many."""
        with self._lock:
            self._check_open()
            return self._delete_retention_ms_breached_segments(self._now(now_ms))

    def _delete_log_start_offset_breached_segments(self, now_ms: int) -> int:
        def predicate(segment: LogSegment, upcoming: LogSegment | None) -> bool:
            return upcoming is not None and upcoming.base_offset <= self._log_start_offset

        return self._delete_segments(
            self._deletable_segments(predicate), now_ms, "log start offset"
        )

    def _delete_retention_size_breached_segments(self, now_ms: int) -> int:
        limit = self.config.retention_bytes
        size = sum(s.size for s in self._segments)
        if limit < 0 or size < limit:
            return 0
        excess = size - limit

        def predicate(segment: LogSegment, upcoming: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False

        return self._delete_segments(self._deletable_segments(predicate), now_ms, "retention.bytes")

    def _delete_retention_ms_breached_segments(self, now_ms: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0

        def predicate(segment: LogSegment, upcoming: LogSegment | None) -> bool:
            return now_ms - segment.largest_timestamp > retention_ms

        return self._delete_segments(self._deletable_segments(predicate), now_ms, "retention.ms")

    def _delete_segments(self, deletable: list[LogSegment], now_ms: int, reason: str) -> int:
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            new_active = self._roll(now_ms)
            if deletable[-1] is new_active:
                deletable = deletable[:-1]
        count = len(deletable)
        for segment in deletable:
            log.info(
                "%s: deleting segment %d (%s breached)",
                self.topic_partition,
                segment.base_offset,
                reason,
            )
            self._async_delete(segment, now_ms)
        del self._segments[:count]
        del self._bases[:count]
        self._read_bound = None
        first = self._segments[0].base_offset
        self.producer_state.delete_snapshots_below(first)
        if first > self._log_start_offset:
            self._log_start_offset = first
            self.leader_epoch_cache.truncate_from_start(first)
        self._recovery_point = max(self._recovery_point, first)
        self._high_watermark = max(self._high_watermark, first)
        return count

    def _async_delete(self, segment: LogSegment, now_ms: int) -> None:
        """Rename the segment's files to *.deleted; remove them after file.delete.delay.ms."""
        delay = self.config.file_delete_delay_ms
        try:
            segment.close()
            if delay <= 0:
                segment.delete()
                return
            segment.change_file_suffixes("", DELETED_SUFFIX)
        except OSError as exc:
            raise StorageError(f"error deleting segment {segment.log_path}: {exc}") from exc
        self._pending_deletes.append((now_ms + delay, segment))

    def delete_pending_files(self, now_ms: int) -> int:
        """Remove *.deleted files whose delay has passed; returns segments removed."""
        with self._lock:
            due = [s for t, s in self._pending_deletes if t <= now_ms]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now_ms]
            for segment in due:
                segment.delete()
            return len(due)

    def remove_expired_producers(self, now_ms: int) -> int:
        with self._lock:
            return self.producer_state.remove_expired_producers(self._now(now_ms))

    # ----------------------------------------------------------------------------------
    # Log cleaner support (wherry.log.cleaner)
    # ----------------------------------------------------------------------------------

    def read_segment_chunk(self, segment: LogSegment, position: int, size: int) -> bytes | None:
        """Bytes of an inactive `segment` under the lock; None if it left the log (retention,
        truncation) or is closed, so the cleaner gives up on this round."""
        with self._lock:
            if self._closed or segment.closed or not any(s is segment for s in self._segments):
                return None
            size = min(size, segment.size - position)
            if size <= 0:
                return b""
            return segment.read_bytes(position, size)

    def new_cleaned_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        """A fresh `<base>.log.cleaned` segment for the cleaner to write."""
        with self._lock:
            self._check_open()
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (self.dir / segment_file_name(base_offset, suffix + CLEANED_SUFFIX)).unlink(
                    missing_ok=True
                )
            return LogSegment.open(
                self.dir,
                base_offset,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_bytes=self.config.segment_index_bytes,
                now_ms=now_ms,
                suffix=CLEANED_SUFFIX,
            )

    def replace_segments(
        self,
        new: LogSegment,
        old: Sequence[LogSegment],
        *,
        now_ms: int,
        crash_hook: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap the cleaned segment `new` (written, fsynced, suffix `.cleaned`) in for `old`
        (consecutive inactive segments of this log), Kafka's replaceSegments: rename `new` to
        `.swap`, delete the old segments, rename `.swap` into place. Readers hold the lock, so
        they see either the old segments or the new one. Returns False (and deletes `new`) if
        the log changed so that `old` are no longer consecutive inactive segments.

        `crash_hook(step)` is called between steps (tests raise there to simulate a crash).
        """
        hook = crash_hook if crash_hook is not None else (lambda _step: None)
        with self._lock:
            idx = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
            count = len(old)
            if (
                self._closed
                or idx is None
                or idx + count >= len(self._segments)  # never the active segment
                or any(self._segments[idx + i] is not s for i, s in enumerate(old))
            ):
                new.delete()
                return False
            now = self._now(now_ms)
            hook("before-swap")
            new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            fsync_dir(self.dir)
            hook("after-swap-rename")
            for i, segment in enumerate(old):
                try:
                    segment.close()
                    segment.change_file_suffixes("", DELETED_SUFFIX)
                except OSError as exc:
                    raise StorageError(
                        f"error deleting segment {segment.log_path}: {exc}"
                    ) from exc
                delay = max(self.config.file_delete_delay_ms, 0)
                self._pending_deletes.append((now + delay, segment))
                if i == 0:
                    hook("after-first-delete")
            hook("after-deletes")
            new.change_file_suffixes(SWAP_SUFFIX, "")
            fsync_dir(self.dir)
            self.delete_pending_files(now)
            self._segments[idx : idx + count] = [new]
            self._bases = [s.base_offset for s in self._segments]
            self._read_bound = None
            hook("after-swap")
            return True

    # ----------------------------------------------------------------------------------
    # Flush / close / delete
    # ----------------------------------------------------------------------------------

    def flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """fsync everything below `up_to` (default: the log end offset) and move the recovery
        point there. The data fsync runs without holding the log's lock, so appends (e.g. on
        the event loop) are not blocked while a scheduler thread flushes."""
        with self._lock:
            self._check_open()
            now = self._now(now_ms)
            end = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
            self._last_flush_ms = now
            if end <= self._recovery_point:
                return
            # The indexes are written now; the .log and changed index files are fsynced below.
            segments = self._segments_to_flush(end)
            fds: list[int] = []
            try:
                for segment in segments:
                    fds.extend(segment.open_sync_fds())
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            generation = self._truncations
        try:
            for fd in fds:
                os.fsync(fd)
        except BaseException:
            with self._lock:
                for segment in segments:
                    segment.sync_failed()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if self._closed or self._truncations != generation:
                return  # truncated meanwhile: keep the (lowered) recovery point
            self._mark_flushed(end)

    def _segments_to_flush(self, up_to: int) -> list[LogSegment]:
        """Segments holding offsets in [recovery_point, up_to)."""
        start = self._segment_index_for(self._recovery_point)
        return [s for s in self._segments[start:] if s.base_offset < up_to]

    def _mark_flushed(self, up_to: int) -> None:
        self.producer_state.flush_snapshots(up_to)
        if self._dir_needs_flush:
            fsync_dir(self.dir)
            self._dir_needs_flush = False
        self._recovery_point = max(self._recovery_point, up_to)
        if self._pending_flush_offset is not None and self._pending_flush_offset <= up_to:
            self._pending_flush_offset = None

    def _flush(self, up_to: int, now_ms: int) -> None:
        """Flush synchronously under the lock (flush.messages, close)."""
        self._last_flush_ms = now_ms
        if up_to <= self._recovery_point:
            return
        for segment in self._segments_to_flush(up_to):
            segment.flush()
        self._mark_flushed(up_to)

    def flush_if_needed(self, now_ms: int) -> bool:
        """Flush if flush.ms elapsed since the last flush or a roll left segments unflushed."""
        with self._lock:
            if self._closed:
                return False
            if self.unflushed_messages > 0 and now_ms - self._last_flush_ms >= self.config.flush_ms:
                target: int | None = None
            elif self._pending_flush_offset is not None:
                target = self._pending_flush_offset
            else:
                return False
        self.flush(target, now_ms=now_ms)
        return True

    def close(self) -> None:
        """Snapshot producer state, close the segments (trimming indexes). Does not fsync the
        data; call flush() first for a clean shutdown."""
        with self._lock:
            if self._closed:
                return
            try:
                self.producer_state.update_map_end_offset(self._log_end_offset)
                self.producer_state.take_snapshot(fsync=True)
            finally:
                for segment in self._segments:
                    segment.close()
                for _, segment in self._pending_deletes:
                    segment.close()
                self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            if not self._closed:
                for segment in self._segments:
                    segment.close()
                self._closed = True
            self._pending_deletes.clear()
            shutil.rmtree(self.dir, ignore_errors=True)

    def rename_dir(self, new_dir: Path) -> None:
        """Move the (closed or open) log directory (used for asynchronous topic deletion)."""
        with self._lock:
            self.dir.rename(new_dir)
            self.dir = Path(new_dir)
            for segment in self._segments:
                segment.relocate(self.dir)
            self.producer_state.dir = self.dir
            if self.leader_epoch_cache.path is not None:
                self.leader_epoch_cache.path = self.dir / self.leader_epoch_cache.path.name

    # ----------------------------------------------------------------------------------
    # Debug helpers
    # ----------------------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Raise RecordError/LogOffsetError if any batch is invalid or offsets do not increase."""
        with self._lock:
            expected = self._segments[0].base_offset
            for segment in self._segments:
                for pos, header in segment.iter_batches():
                    data = segment.read_bytes(pos, header.size_in_bytes)
                    if not crc_ok(data, 0, header):
                        raise CorruptRecordError(f"CRC mismatch at {segment.base_offset}+{pos}")
                    if header.base_offset < expected:
                        raise LogOffsetError(f"offset {header.base_offset} < {expected}")
                    expected = header.next_offset
            if expected != self._log_end_offset and self._segments[-1].size:
                raise LogOffsetError(f"log end {self._log_end_offset} != data end {expected}")


def snapshot_files(dir: Path) -> list[Path]:
    """Producer snapshot files in a partition directory (sorted)."""
    return sorted(p for p in Path(dir).iterdir() if p.name.endswith(SNAPSHOT_SUFFIX))
