"""The durable log of one partition (Kafka 3.9's UnifiedLog).

A directory `<topic>-<partition>` holds segments (`<base>.log/.index/.timeindex`), producer
state snapshots (`<offset>.snapshot`) and the `leader-epoch-checkpoint`. The last segment is the
active one and takes appends; the others are read-only.

Offsets the log tracks:

* log_start_offset <= high_watermark <= log_end_offset (LEO = next offset to assign);
* recovery_point: everything below it has been fsynced; after an unclean shutdown segments from
  the one containing the recovery point onward are re-validated.

`Log` is the façade; its parts live beside it:

* `loader.py`: opening the directory (swaps, recovery, producer state rebuild);
* `segments.py`: the segment list (lookups by offset and time, roll, removal, cleaned segments);
* `retention.py`: the log start offset, retention passes and DeleteRecords;
* `validator.py`: the checks of appended batches and offset assignment.

Every public method takes the log's lock, so the broker may call slow ones (flush, retention)
from an executor thread; the parts take no lock of their own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import fsync_dir
from wherry.log.config import LogConfig
from wherry.log.dir_failure import IoErrorHook, io_guarded
from wherry.log.errors import OffsetOutOfRangeError, StorageError
from wherry.log.file_region import FileRegion
from wherry.log.loader import LoadedLog, LogLoader, rebuild_producer_state
from wherry.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, EndTxnMarker
from wherry.log.retention import LogRetention, RetentionBounds
from wherry.log.segment import LogSegment
from wherry.log.segments import files_locked, swap_in
from wherry.log.txn_index import AbortedTxn
from wherry.log.validator import (
    InvalidTimestampError,
    RecordBatchTooLargeError,
    assign_offsets,
    batch_markers,
    parse_batches,
    validate_client_batches,
    validate_replicated_batches,
)
from wherry.protocol.records import BatchHeader

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AbortedTxn",
    "AppendInfo",
    "InvalidTimestampError",
    "Log",
    "OffsetAndTimestamp",
    "RecordBatchTooLargeError",
]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


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


class Log:
    """A partition log. Create with `Log.open`. An `OSError` of its writes takes its log dir
    offline through `on_io_error` and is raised as `StorageError` (`dir_failure.py`)."""

    on_io_error: IoErrorHook | None = None
    io_failed: str | None = None  # set by the first I/O error: no write after it

    def __init__(self, loaded: LoadedLog, *, now_ms: int) -> None:
        self._segments = loaded.segments
        self.topic_partition = loaded.segments.topic_partition
        self.producer_state = loaded.producer_state
        self.leader_epoch_cache = loaded.leader_epoch_cache
        self._retention = LogRetention(
            loaded.segments,
            leader_epoch_cache=loaded.leader_epoch_cache,
            producer_state=loaded.producer_state,
            log_start_offset=loaded.log_start_offset,
        )
        self._log_end_offset = loaded.log_end_offset
        self._recovery_point = loaded.recovery_point
        self._high_watermark = loaded.high_watermark
        self._last_now_ms = now_ms
        self._last_flush_ms = now_ms
        self._lock = threading.RLock()
        self._closed = False
        self._truncations = 0  # bumped by every truncation (flush races)

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
        loader = LogLoader(
            dir=dir,
            config=config,
            topic_partition=(
                topic_partition if topic_partition is not None else TopicPartition.parse(dir.name)
            ),
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
            had_clean_shutdown=had_clean_shutdown,
            high_watermark=high_watermark,
            producer_id_expiration_ms=producer_id_expiration_ms,
        )
        return cls(loader.load(), now_ms=now_ms)

    # ----------------------------------------------------------------------------------
    # Properties
    # ----------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self.log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )

    @property
    def dir(self) -> Path:
        return self._segments.dir

    @property
    def config(self) -> LogConfig:
        return self._segments.config

    @property
    def log_start_offset(self) -> int:
        return self._retention.log_start_offset

    @property
    def lock(self) -> threading.RLock:
        """The log's lock (the cleaner takes it to look at the segment list)."""
        return self._lock

    def _files(self) -> AbstractContextManager[None]:
        """The lock, once no cleaner is renaming segment files (`files_locked`)."""
        return files_locked(self._lock, self._segments)

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
    def first_unstable_offset(self) -> int | None:
        """The first offset of an open transaction, or of one whose marker is not below the
        high watermark yet (None if there is none)."""
        with self._lock:
            return self.producer_state.first_unstable_offset(self._high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first unstable offset, bounded by the high watermark (Kafka's
        UnifiedLog.lastStableOffset); read_committed consumers read below it."""
        with self._lock:
            hw = self._high_watermark
            first = self.producer_state.first_unstable_offset(hw)
            return hw if first is None else min(first, hw)

    @property
    def segments(self) -> list[LogSegment]:
        """A copy of the segment list (oldest first)."""
        with self._lock:
            return self._segments.as_list()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._segments.size_in_bytes

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
            self._segments.config = config

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log_start_offset, log_end_offset])."""
        with self._lock:
            self._high_watermark = min(max(offset, self.log_start_offset), self._log_end_offset)
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the high watermark to `offset` (clamped); True if it moved."""
        with self._lock:
            new = min(max(offset, self._retention.log_start_offset), self._log_end_offset)
            if new > self._high_watermark:
                self._high_watermark = new
                return True
            return False

    # ----------------------------------------------------------------------------------
    # Append
    # ----------------------------------------------------------------------------------

    @io_guarded("appending to")
    def append_as_leader(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        validate: bool = True,
        from_coordinator: bool = False,
        header: BatchHeader | None = None,
    ) -> AppendInfo:
        """Append a client's record batch (normally exactly one), assigning offsets.

        Validates each batch (`validate_batch`: framing, CRC, records, max.message.bytes; pass
        `validate=False` if the caller already did, and `header`, what `validate_batch`
        returned, to skip reading the batch's header again), rejects control batches and
        idempotent batches without a sequence, checks CreateTime timestamps against
        message.timestamp.{before,after}.max.ms, stamps LogAppendTime if configured, then runs
        the idempotent-producer checks: a retried batch returns its original offsets with
        `duplicate=True` and writes nothing. Rolls the segment first if needed and fsyncs when
        flush.messages is reached. `batch` is modified in place when it is a bytearray or a
        writable memoryview; nothing keeps a view of it once this returns.

        `from_coordinator` (Kafka's AppendOrigin.COORDINATOR): the transaction coordinator's
        COMMIT/ABORT markers, which clients may not write; a marker from an older coordinator
        epoch than the producer's last raises TransactionCoordinatorFencedError.
        """
        # Patched in place: a bytearray or writable view (a produce request's records, still
        # in the frame they came in) as is; a copy of anything read-only.
        buf = (
            batch
            if type(batch) is bytearray or (type(batch) is memoryview and not batch.readonly)
            else bytearray(batch)
        )
        with self._lock:
            self._check_open()
            now_ms = self._now(now_ms)
            config = self._segments.config
            batches = parse_batches(buf) if header is None else [(0, header)]
            validate_client_batches(
                buf,
                batches,
                config,
                topic_partition=self.topic_partition,
                now_ms=now_ms,
                validate=validate,
                allow_control=from_coordinator,
            )
            first_offset = self._log_end_offset
            append_time = now_ms if config.log_append_time else None
            positioned = assign_offsets(
                buf,
                batches,
                first_offset=first_offset,
                leader_epoch=leader_epoch,
                log_append_time_ms=append_time,
            )
            markers = batch_markers(buf, positioned)
            headers = [h for _, h in positioned] if len(positioned) > 1 else [positioned[0][1]]
            duplicate = self.producer_state.check_batches(
                headers, markers, client=not from_coordinator
            )
            if duplicate is not None:
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    -1 if append_time is None else duplicate.timestamp,
                    self.log_start_offset,
                    duplicate=True,
                    max_timestamp_ms=duplicate.timestamp,
                )
            max_ts = self._append(buf, positioned, now_ms, markers)
            return AppendInfo(
                first_offset,
                headers[-1].next_offset - 1,
                -1 if append_time is None else append_time,
                self.log_start_offset,
                max_timestamp_ms=max_ts,
                record_count=sum(h.record_count for h in headers),
                size_in_bytes=len(buf),
            )

    @io_guarded("appending to")
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
            batches = parse_batches(records)
            validate_replicated_batches(
                records,
                batches,
                self.config,
                topic_partition=self.topic_partition,
                log_end_offset=self._log_end_offset,
            )
            max_ts = self._append(records, batches, now, batch_markers(records, batches))
            first, last = batches[0][1], batches[-1][1]
            return AppendInfo(
                first.base_offset,
                last.last_offset,
                -1,
                self.log_start_offset,
                max_timestamp_ms=max_ts,
                record_count=sum(h.record_count for _, h in batches),
                size_in_bytes=len(records),
            )

    def _append(
        self,
        data: bytes | bytearray | memoryview,
        batches: Sequence[tuple[int, BatchHeader]],
        now_ms: int,
        markers: Sequence[EndTxnMarker | None],
    ) -> int:
        """Write offset-assigned batches; returns their largest max timestamp."""
        last = batches[-1][1]
        max_ts = (
            last.max_timestamp if len(batches) == 1 else max(h.max_timestamp for _, h in batches)
        )
        segment = self._segments.maybe_roll(
            len(data),
            max_ts,
            last.last_offset,
            log_end_offset=self._log_end_offset,
            now_ms=now_ms,
        )
        segment.append(data, batches)
        state = self.producer_state
        epochs = self.leader_epoch_cache
        for (_, header), marker in zip(batches, markers, strict=True):
            if header.partition_leader_epoch >= 0:
                epochs.assign(header.partition_leader_epoch, header.base_offset)
            if header.producer_id < 0:
                continue  # no producer state (`state.update` would return None)
            completed = state.update(header, marker=marker)
            if completed is not None and completed.is_aborted:
                # Kafka: the segment the marker went to indexes the aborted transaction.
                segment.txn_index.append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        state.last_stable_offset_after(completed),
                    )
                )
        self._log_end_offset = end = last.base_offset + last.last_offset_delta + 1
        state.update_map_end_offset(end)
        if end - self._recovery_point >= self._segments.config.flush_messages:
            self._flush(end, now_ms)
        return max_ts

    @io_guarded("rolling")
    def roll(self, *, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._segments.roll(self._log_end_offset, self._now(now_ms))

    # ----------------------------------------------------------------------------------
    # Read
    # ----------------------------------------------------------------------------------

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
        data = self._read(offset, max_bytes, max_offset, min_one_message, region=False)
        assert isinstance(data, bytes)
        return data

    def read_region(
        self,
        offset: int,
        *,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes | FileRegion:
        """`read`, as a `FileRegion` of the same bytes in the segment file (b"" when there
        are none), to be sent from the file (zero-copy consume)."""
        return self._read(offset, max_bytes, max_offset, min_one_message, region=True)

    def _read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None,
        min_one_message: bool,
        *,
        region: bool,
    ) -> bytes | FileRegion:
        """Whole batches starting with the one containing `offset` (see `read`).

        Raises OffsetOutOfRangeError unless log_start_offset <= offset <= log_end_offset.
        """
        with self._files():
            self._check_open()
            start, end = self.log_start_offset, self._log_end_offset
            if offset < start or offset > end:
                raise OffsetOutOfRangeError(
                    f"Received request for offset {offset} for partition {self.topic_partition}, "
                    f"but we only have log segments in the range {start} to {end}."
                )
            upper = end if max_offset is None else min(max_offset, end)
            if offset >= upper:
                return b""
            return self._segments.read(
                offset,
                max_bytes=max_bytes,
                upper=upper if upper < end else None,
                min_one_message=min_one_message,
                region=region,
            )

    def iter_batches(self, start_offset: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(segment base offset, header) of every batch from the one containing `start_offset`.

        A snapshot taken under the lock; for tests and tools, not for hot paths.
        """
        with self._files():
            start = self.log_start_offset if start_offset is None else start_offset
            items = [
                (seg.base_offset, h)
                for seg, h in self._segments.iter_batches_from(start)
                if h.last_offset >= start
            ]
        yield from items

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper_bound), from the txn indexes
        of the segment holding `start_offset` and the later ones (Kafka's
        collectAbortedTransactions)."""
        with self._files():
            found: list[AbortedTxn] = []
            for segment in self._segments.segments_from(start_offset):
                result = segment.txn_index.collect(start_offset, upper_bound)
                found.extend(result.aborted)
                if result.is_complete:
                    break
            return found

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first record with timestamp >= `timestamp` (None if none).

        Special targets: -2 earliest (log start), -1 latest (log end), -3 max timestamp,
        -4 earliest local. The caller bounds results by the high watermark / LSO.
        """
        with self._files():
            self._check_open()
            match timestamp:
                case -2 | -4:
                    return OffsetAndTimestamp(self.log_start_offset, -1)
                case -1:
                    return OffsetAndTimestamp(self._log_end_offset, -1)
                case -3:
                    found = self._segments.max_timestamp_offset(self.log_start_offset)
                case _ if timestamp < 0:
                    raise ValueError(f"unsupported ListOffsets timestamp {timestamp}")
                case _:
                    found = self._segments.find_offset_by_timestamp(
                        timestamp, self.log_start_offset
                    )
            return None if found is None else OffsetAndTimestamp(found.offset, found.timestamp)

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset), (-1, -1) if unknown."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(epoch, self._log_end_offset)

    # ----------------------------------------------------------------------------------
    # Truncation
    # ----------------------------------------------------------------------------------

    @io_guarded("truncating")
    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Remove everything at or above `offset` (follower truncation); True if anything was.

        The batch containing `offset` is removed whole, so the new log end offset may be below
        `offset` if it was not a batch boundary.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        with self._files():
            self._check_open()
            now = self._now(now_ms)
            if offset >= self._log_end_offset:
                # No data to remove, but an epoch this replica started at its log end as a
                # leader and wrote nothing in goes (Kafka's truncateTo): the leader may never
                # have had it, and a follower keeping it asks about it forever (KIP-279).
                self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
                return False
            if self._segments.first.base_offset > offset:
                self._truncate_fully(offset, now)
                return True
            end = self._log_end_offset = self._segments.truncate_to(offset, now)
            self._truncations += 1
            self.leader_epoch_cache.truncate_from_end(end)
            self._retention.truncated_to(end)
            self._recovery_point = min(self._recovery_point, end)
            self._high_watermark = min(self._high_watermark, end)
            rebuild_producer_state(
                self.producer_state,
                self._segments,
                log_start_offset=self.log_start_offset,
                log_end_offset=end,
                now_ms=now,
            )
            return True

    @io_guarded("truncating")
    def truncate_fully_and_start_at(self, new_offset: int, *, now_ms: int | None = None) -> None:
        """Delete all data and restart the (empty) log at `new_offset`."""
        if new_offset < 0:
            raise ValueError(f"cannot start the log at a negative offset {new_offset}")
        with self._files():
            self._check_open()
            self._truncate_fully(new_offset, self._now(now_ms))

    def _truncate_fully(self, new_offset: int, now_ms: int) -> None:
        self._segments.reset(new_offset, now_ms)
        self._truncations += 1
        self._log_end_offset = new_offset
        self._retention.reset_to(new_offset)
        self._recovery_point = new_offset
        self._high_watermark = new_offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    # ----------------------------------------------------------------------------------
    # Log start offset and retention (wherry.log.retention)
    # ----------------------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str = "") -> bool:
        """Move the log start offset up (DeleteRecords, retention); True if it moved.

        Raises OffsetOutOfRangeError beyond the high watermark. Whole segments below it are
        deleted by the next retention pass.
        """
        with self._lock:
            self._check_open()
            if not self._retention.maybe_increment_log_start_offset(
                new_log_start_offset, high_watermark=self._high_watermark, reason=reason
            ):
                return False
            self._recovery_point = max(self._recovery_point, new_log_start_offset)
            return True

    @io_guarded("deleting segments of")
    def delete_old_segments(self, now_ms: int) -> int:
        """One retention pass (Kafka's deleteOldSegments); returns segments deleted.

        With cleanup.policy=delete: segments wholly below the log start offset, then the
        oldest segments beyond retention.bytes, then those whose newest timestamp is older
        than retention.ms. Only segments wholly below the high watermark are deleted; if all
        would go, the active segment is rolled first so the log keeps one (empty) segment.
        Also purges files of deleted segments whose file.delete.delay.ms has passed.
        """
        deleted = self._retain(self._retention.delete_old_segments, now_ms)
        self.delete_pending_files(self._now(now_ms))
        return deleted

    def delete_log_start_offset_breached_segments(self, now_ms: int) -> int:
        """Delete segments wholly below the log start offset; returns how many."""
        return self._retain(self._retention.delete_log_start_offset_breached_segments, now_ms)

    def delete_retention_size_breached_segments(self, now_ms: int) -> int:
        """Delete the oldest segments beyond retention.bytes; returns how many."""
        return self._retain(self._retention.delete_retention_size_breached_segments, now_ms)

    def delete_retention_ms_breached_segments(self, now_ms: int) -> int:
        """Delete segments whose newest timestamp is older than retention.ms; returns how many."""
        return self._retain(self._retention.delete_retention_ms_breached_segments, now_ms)

    def _retain(
        self, retention_pass: Callable[[int, RetentionBounds], int], now_ms: int
    ) -> int:
        """Run a retention pass under the lock (the files of the segments it removed are
        renamed after it: `LogSegments.delete_oldest`); after deletions the recovery point and
        the high watermark reach (at least) the first segment left."""
        segments = self._segments
        try:
            with self._files():
                self._check_open()
                now = self._now(now_ms)
                bounds = RetentionBounds(self._high_watermark, self._log_end_offset)
                deleted = retention_pass(now, bounds)
                if deleted:
                    first = self._segments.first.base_offset
                    self._recovery_point = max(self._recovery_point, first)
                    self._high_watermark = max(self._high_watermark, first)
                return deleted
        finally:
            segments.rename_deleted()

    def delete_pending_files(self, now_ms: int) -> int:
        """Remove *.deleted files whose delay has passed (without the lock); returns how many
        segments."""
        with self._files():
            due = self._segments.take_due_deletes(now_ms)
        for segment in due:
            segment.delete()
        return len(due)

    def remove_expired_producers(self, now_ms: int) -> int:
        with self._lock:
            return self.producer_state.remove_expired_producers(self._now(now_ms))

    # ----------------------------------------------------------------------------------
    # Log cleaner support (wherry.log.cleaner)
    # ----------------------------------------------------------------------------------

    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment], *, now_ms: int,
                         crash_hook: Callable[[str], None] | None = None) -> bool:
        """Kafka's replaceSegments: swap the cleaned segment `new` in for `old` (`swap_in`)."""
        return swap_in(self._segments, self._lock, lambda: self._closed, new, old,
                       now_ms=self._now(now_ms), crash_hook=crash_hook)

    # ----------------------------------------------------------------------------------
    # Flush / close / delete
    # ----------------------------------------------------------------------------------

    @io_guarded("flushing")
    def flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """fsync everything below `up_to` (default: the log end offset) and move the recovery
        point there. Only the indexes are written under the log's lock; the files are opened
        and fsynced (data, indexes, snapshots, directory) without it: an append (on the event
        loop) waits for none of those system calls. A file renamed away meanwhile (a deletion,
        a cleaner's swap, a move) leaves the recovery point where it was, for the next flush."""
        with self._files():
            self._check_open()
            now = self._now(now_ms)
            end = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
            self._last_flush_ms = now
            if end <= self._recovery_point:
                return
            segments = self._segments.segments_between(self._recovery_point, end)
            paths: list[Path] = []
            try:
                for segment in segments:
                    paths.extend(segment.claim_sync())
            except BaseException:
                for segment in segments:
                    segment.sync_failed()
                raise
            generation = self._truncations
            snapshots = self.producer_state.unsynced_snapshots(end)
            dir_token = self._segments.dir_to_sync()
            directory = self._segments.dir
        complete = False
        try:
            complete = _fsync_paths(paths)
            self.leader_epoch_cache.sync()  # epochs of the data below the new recovery point
            synced = self.producer_state.fsync_snapshot_files(snapshots)
            try:
                if dir_token is not None:  # the segments a roll added
                    fsync_dir(directory)
            except FileNotFoundError:  # renamed meanwhile (deleted, moved): see below
                dir_token = None
        finally:
            if not complete:
                claimed = set(paths)
                with self._lock:
                    for segment in segments:
                        segment.sync_failed(claimed)
        with self._lock:
            self.producer_state.snapshots_synced(synced)
            if self._closed or self._truncations != generation or not complete:
                return  # truncated or renamed meanwhile: keep the recovery point
            self._mark_flushed(end, dir_token)

    def _mark_flushed(self, up_to: int, dir_synced: int | None = None) -> None:
        self.producer_state.flush_snapshots(up_to)
        self._segments.mark_flushed(up_to, dir_synced)
        self._recovery_point = max(self._recovery_point, up_to)

    def _flush(self, up_to: int, now_ms: int) -> None:
        """Flush synchronously under the lock (flush.messages, close)."""
        self._last_flush_ms = now_ms
        if up_to <= self._recovery_point:
            return
        self._segments.await_renames()
        for segment in self._segments.segments_between(self._recovery_point, up_to):
            segment.flush()
        self.leader_epoch_cache.sync()
        self._mark_flushed(up_to)

    def flush_if_needed(self, now_ms: int) -> bool:
        """Flush if flush.ms elapsed since the last flush or a roll left segments unflushed
        (read first without the lock: most logs need nothing; a roll missed is seen next)."""
        idle = self._log_end_offset == self._recovery_point
        early = idle or now_ms - self._last_flush_ms < self.config.flush_ms
        if early and self._segments.pending_flush_offset is None:
            return False
        with self._lock:
            if self._closed:
                return False
            if self.unflushed_messages > 0 and now_ms - self._last_flush_ms >= self.config.flush_ms:
                target: int | None = None
            elif (target := self._segments.pending_flush_offset) is None:
                return False
        self.flush(target, now_ms=now_ms)
        return True

    @io_guarded("closing")
    def close(self, *, keep_state: bool = True, fsync: bool = True) -> None:
        """Snapshot producer state, close the segments (trimming indexes). Does not fsync the
        data; call flush() first for a clean shutdown. `keep_state` False (a log about to be
        deleted) writes no producer snapshot and no leader epochs: nothing will read them.
        `fsync` False leaves the snapshot to a sync of the whole file system by the caller."""
        with self._files():
            if self._closed:
                return
            try:
                if keep_state:
                    self.producer_state.update_map_end_offset(self._log_end_offset)
                    self.producer_state.take_snapshot(fsync=fsync)
                    self.leader_epoch_cache.sync()
            finally:
                self._segments.close()
                self._closed = True

    def abandon(self) -> None:
        """Close without writing anything: its log dir went offline."""
        with self._lock:
            self._closed = True
            self._segments.release()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._files():
            self._segments.delete_dir(close_segments=not self._closed)
            self._closed = True

    def rename_dir(self, new_dir: Path) -> None:
        """Move the (closed or open) log directory (used for asynchronous topic deletion)."""
        with self._files():
            self._segments.relocate(Path(new_dir))
            self.producer_state.dir = self.dir
            if self.leader_epoch_cache.path is not None:
                self.leader_epoch_cache.path = self.dir / self.leader_epoch_cache.path.name

    def swap_storage(self, other: Log) -> None:
        """Exchange the storage (directory, segments, producer state, leader epochs, log start
        and end offsets) of two logs of one partition, keeping each object's high watermark:
        AlterReplicaLogDirs promotes a caught-up future log this way, so whoever holds this
        `Log` keeps using it. Both must be open and end at the same offset."""
        with self._files(), other._files():
            self._check_open()
            other._check_open()
            if other.topic_partition != self.topic_partition:
                raise ValueError(f"{other} is not a log of {self.topic_partition}")
            if other._log_end_offset != self._log_end_offset:
                raise ValueError(f"cannot swap {self} with {other}: log end offsets differ")
            for name in ("_segments", "producer_state", "leader_epoch_cache", "_retention",
                         "_log_end_offset", "_recovery_point"):
                mine = getattr(self, name)
                setattr(self, name, getattr(other, name))
                setattr(other, name, mine)
            # A flush measured against the old segments must not move the recovery point.
            self._truncations += 1
            other._truncations += 1

    # ----------------------------------------------------------------------------------
    # Debug helpers
    # ----------------------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Raise RecordError/LogOffsetError if any batch is invalid or offsets do not increase."""
        with self._files():
            self._segments.check_integrity(self._log_end_offset)


def _fsync_paths(paths: list[Path]) -> bool:
    """Open and fsync each file; False if one was gone (renamed meanwhile)."""
    complete = True
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            complete = False
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return complete
