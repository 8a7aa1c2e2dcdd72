"""Log compaction (Kafka 3.9's LogCleaner, Cleaner and LogCleanerManager).

For a log with `cleanup.policy` containing `compact`, the cleaner keeps the latest record of
each key:

* the *dirty* section starts at the offset recorded in the log dir's
  `cleaner-offset-checkpoint` (Kafka's file name and format) and ends at the *first
  uncleanable offset*: the active segment's base offset, bounded by the high watermark and by
  `min.compaction.lag.ms` (the first segment holding a record newer than the lag);
* a log is cleaned when its dirty ratio (dirty bytes / total bytes below the first
  uncleanable offset) exceeds `min.cleanable.dirty.ratio`, when its oldest dirty record is older
  than `max.compaction.lag.ms`, or when tombstones it stamped have passed their delete horizon;
* an offset map key -> latest offset is built over the dirty section (bounded by
  `log.cleaner.dedupe.buffer.size`, 24 bytes an entry at load factor 0.9, like Kafka's
  SkimpyOffsetMap), then every segment from the log start up to the end of the map is
  rewritten, grouped so each output stays under `segment.bytes`, keeping a record only if it is
  the latest of its key. A batch that loses records is rebuilt (same base offset, codec,
  producer id/epoch/sequence, leader epoch); the last batch of an active producer is kept even
  when empty, so producer state survives. Records without a key are dropped.
* Tombstones (null values): the first clean that keeps one stamps its batch with a delete
  horizon (attribute bit 6, base timestamp = now + `delete.retention.ms`, KIP-534); a later
  clean after the horizon removes them.
* Transactions (Kafka's CleanedTransactionMetadata): the dirty section ends at the first
  unstable offset too; batches of aborted transactions (the txn indexes say which) neither
  enter the offset map nor survive; a marker whose transaction has no batch left is stamped
  with a delete horizon and removed by a clean after it; committed data compacts as any other.
* Crash safety: the output is written to `<base>.log.cleaned`, fsynced, and swapped in by
  `Log.replace_segments` (`.swap`, old segments deleted, rename into place); `Log.open`
  deletes `.cleaned` files and completes `.swap`s.

The log's lock is held only to read a chunk of an old segment, to look at the segment list and
for the swap, so appends and fetches go on while a log is cleaned.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import OffsetCheckpointFile
from wherry.log.config import LONG_MAX
from wherry.log.errors import LogError
from wherry.log.log import Log
from wherry.log.producer_state import read_marker
from wherry.log.segment import LogSegment
from wherry.log.txn_index import AbortedTxn
from wherry.protocol.record_walk import _read_varint, _read_varlong
from wherry.protocol.records import (
    ATTR_DELETE_HORIZON,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    _records_payload,
    build_retained_batch,
    iter_batches,
    iter_records,
    parse_header,
)

__all__ = [
    "CLEANER_CHECKPOINT",
    "CleanResult",
    "CleanerConfig",
    "LogCleaner",
    "LogToClean",
    "clean_log",
    "cleanable_offsets",
]

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_MAP_ENTRY_BYTES = 24  # Kafka: 16-byte MD5 of the key + 8-byte offset
_MAP_LOAD_FACTOR = 0.9
_READ_CHUNK_BYTES = 1024 * 1024
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-level cleaner settings (Kafka's `log.cleaner.*`)."""

    enable: bool = True
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    threads: int = 1

    @property
    def max_map_entries(self) -> int:
        return max(1, int(self.dedupe_buffer_size * _MAP_LOAD_FACTOR) // _MAP_ENTRY_BYTES)


@dataclass(frozen=True, slots=True)
class LogToClean:
    """What the cleaner knows about one compacted log (Kafka's LogToClean)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(slots=True)
class CleanResult:
    """Outcome of one clean of one log."""

    end_offset: int  # the new cleaner checkpoint
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_kept: int = 0
    records_removed: int = 0
    min_delete_horizon_ms: int | None = None  # earliest horizon stamped/kept this round
    aborted: bool = False


def cleanable_offsets(log_: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
    """First dirty and first uncleanable offsets and the byte counts (LogCleanerManager's
    cleanableOffsets + LogToClean), computed under the log's lock."""
    config = log_.config
    with log_.lock:
        segments = log_.segments
        start = log_.log_start_offset
        end = log_.log_end_offset
        first_dirty = start if checkpoint is None or not start <= checkpoint <= end else checkpoint
        active = segments[-1]
        # Kafka: never past the first unstable offset either (open transactions stay dirty).
        uncleanable = min(active.base_offset, log_.last_stable_offset)
        dirty_non_active = [
            s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset > first_dirty
        ]
        if config.min_compaction_lag_ms > 0:
            for s in dirty_non_active:
                if s.size and s.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                    uncleanable = min(uncleanable, s.base_offset)
                    break
        need_now = False
        if config.max_compaction_lag_ms < LONG_MAX:
            firsts = [
                h.max_timestamp
                for s in dirty_non_active
                if (h := s.first_batch_header()) is not None and h.max_timestamp > 0
            ]
            need_now = bool(firsts) and min(firsts) < now_ms - config.max_compaction_lag_ms
        uncleanable = max(uncleanable, first_dirty)
        clean_bytes = 0
        cleanable_bytes = 0
        for i, s in enumerate(segments):
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else end
            if upper <= first_dirty:
                clean_bytes += s.size
            elif s.base_offset < uncleanable:
                cleanable_bytes += s.size
    return LogToClean(first_dirty, uncleanable, clean_bytes, cleanable_bytes, need_now)


class _SegmentGone(Exception):
    """An old segment left the log (retention, truncation, close) while being cleaned."""


def _iter_segment_batches(log_: Log, segment: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """The batches of an old segment, read a chunk at a time under the log's lock; raises
    _SegmentGone if the segment left the log meanwhile."""
    position = 0
    size = segment.size
    while position < size:
        chunk = log_.read_segment_chunk(segment, position, _READ_CHUNK_BYTES)
        if chunk is None:
            raise _SegmentGone(segment.base_offset)
        if not chunk:
            return
        consumed = 0
        for pos, header in iter_batches(chunk):
            yield header, chunk[pos : pos + header.size_in_bytes]
            consumed = pos + header.size_in_bytes
        if consumed == 0:  # a batch larger than the chunk
            header = parse_header(chunk, 0)
            whole = log_.read_segment_chunk(segment, position, header.size_in_bytes)
            if whole is None:
                raise _SegmentGone(segment.base_offset)
            if len(whole) < header.size_in_bytes:
                return
            yield header, whole
            consumed = header.size_in_bytes
        position += consumed


def _build_offset_map(
    log_: Log,
    segments: Sequence[tuple[LogSegment, int]],
    first_dirty: int,
    upper: int,
    max_entries: int,
) -> tuple[dict[bytes, int], int] | None:
    """key -> latest offset over [first_dirty, upper), given (segment, next segment's base)
    pairs, whole segments at a time while the map has room (at least one segment). Returns
    the map and the end offset it covers (None if a segment left the log meanwhile)."""
    offset_map: dict[bytes, int] = {}
    end = first_dirty
    # Records of aborted transactions do not enter the map (they must not shadow older ones).
    txns = _TxnMetadata(log_.collect_aborted_transactions(first_dirty, upper))
    for segment, next_base in segments:
        if segment.base_offset >= upper:
            break
        seg_map: dict[bytes, int] = {}
        try:
            for header, data in _iter_segment_batches(log_, segment):
                if header.last_offset < first_dirty or header.base_offset >= upper:
                    continue
                if header.is_control:
                    txns.on_control_batch(header, data)
                elif not txns.on_batch(header):
                    for offset, key, _null_value in _record_keys(data, header):
                        if first_dirty <= offset < upper and key is not None:
                            seg_map[key] = offset
        except _SegmentGone:
            return None
        new_keys = sum(1 for k in seg_map if k not in offset_map)
        if offset_map and len(offset_map) + new_keys > max_entries:
            break  # full: clean up to here, the rest next round
        offset_map.update(seg_map)
        end = max(end, min(next_base, upper))
    return offset_map, end


def _group_segments(
    segments: Sequence[LogSegment], max_bytes: int, max_index_bytes: int, index_interval_bytes: int
) -> list[list[LogSegment]]:
    """Consecutive segments grouped so each output stays under segment.bytes, the index size
    and a relative-offset range that fits an int32 (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        while rest:
            nxt = rest[0]
            following_base = rest[1].base_offset if len(rest) > 1 else None
            est_index = (size + nxt.size) // max(index_interval_bytes, 1) * 8
            if (
                size + nxt.size > max_bytes
                or est_index > max_index_bytes
                or (
                    following_base is not None
                    and following_base - 1 - group[0].base_offset > _INT32_MAX
                )
            ):
                break
            group.append(rest.pop(0))
            size += nxt.size
        groups.append(group)
    return groups


def clean_log(
    log_: Log,
    checkpoint: int | None,
    now_ms: int,
    *,
    max_map_entries: int = CleanerConfig().max_map_entries,
    force: bool = True,
    crash_hook: Callable[[str], None] | None = None,
) -> CleanResult | None:
    """Clean one log once (Kafka's Cleaner.clean); returns None if there was nothing to do
    (with `force=False`: also when the dirty ratio is not above min.cleanable.dirty.ratio)."""
    config = log_.config
    info = cleanable_offsets(log_, checkpoint, now_ms)
    if not force and not (
        info.need_compaction_now or info.cleanable_ratio > config.min_cleanable_dirty_ratio
    ):
        return None
    segments = log_.segments
    non_active = segments[:-1]
    if not non_active:
        return None
    dirty_segments = [
        (s, segments[i + 1].base_offset)
        for i, s in enumerate(non_active)
        if segments[i + 1].base_offset > info.first_dirty_offset
        and s.base_offset < info.first_uncleanable_offset
    ]
    built = _build_offset_map(
        log_,
        dirty_segments,
        info.first_dirty_offset,
        info.first_uncleanable_offset,
        max_map_entries,
    )
    if built is None:
        return CleanResult(info.first_dirty_offset, aborted=True)
    offset_map, end_offset = built
    end_offset = max(end_offset, info.first_dirty_offset)
    to_clean = [s for s in non_active if s.base_offset < max(end_offset, info.first_dirty_offset)]
    if not to_clean:
        return None
    with log_.lock:
        last_of_producer = {
            pid: entry.last_data_offset for pid, entry in log_.producer_state.producers.items()
        }
    result = CleanResult(end_offset)
    result.segments_before = len(to_clean)
    result.bytes_before = sum(s.size for s in to_clean)
    for group in _group_segments(
        to_clean, config.segment_bytes, config.segment_index_bytes, config.index_interval_bytes
    ):
        ok = _clean_group(
            log_, group, offset_map, end_offset, last_of_producer, now_ms, result, crash_hook
        )
        if not ok:
            result.aborted = True
            return result
    log.info(
        "%s: cleaned %d segments (%d bytes) into %d (%d bytes); %d records kept, %d removed; "
        "cleaner checkpoint %d",
        log_.topic_partition,
        result.segments_before,
        result.bytes_before,
        result.segments_after,
        result.bytes_after,
        result.records_kept,
        result.records_removed,
        end_offset,
    )
    return result


def _clean_group(
    log_: Log,
    group: Sequence[LogSegment],
    offset_map: dict[bytes, int],
    end_offset: int,
    last_of_producer: dict[int, int],
    now_ms: int,
    result: CleanResult,
    crash_hook: Callable[[str], None] | None,
) -> bool:
    config = log_.config
    new = log_.new_cleaned_segment(group[0].base_offset, now_ms)
    txns = _TxnMetadata(
        log_.collect_aborted_transactions(group[0].base_offset, group[-1].read_next_offset())
    )
    try:
        for old in group:
            out = bytearray()
            headers: list[tuple[int, BatchHeader]] = []
            for header, data in _iter_segment_batches(log_, old):
                kept = _filter_batch(
                    header,
                    data,
                    offset_map,
                    end_offset,
                    last_of_producer,
                    now_ms,
                    config.delete_retention_ms,
                    result,
                    txns,
                )
                if kept is None:
                    continue
                new_header = parse_header(kept, 0)
                headers.append((len(out), new_header))
                out += kept
                if len(out) >= _READ_CHUNK_BYTES:
                    new.append(out, headers)
                    out = bytearray()
                    headers = []
            if headers:
                new.append(out, headers)
        for txn in txns.cleaned_index:
            new.txn_index.append(txn)
        new.on_become_inactive()
        new.flush()
        with contextlib.suppress(OSError):  # Kafka keeps the last old segment's mtime
            os.utime(new.log_path, ns=(time.time_ns(), group[-1].log_path.stat().st_mtime_ns))
    except _SegmentGone:
        new.delete()
        return False
    except BaseException:
        new.delete()
        raise
    if crash_hook is not None:
        crash_hook("cleaned-written")
    result.segments_after += 1
    result.bytes_after += new.size
    return log_.replace_segments(new, group, now_ms=now_ms, crash_hook=crash_hook)


def _filter_batch(
    header: BatchHeader,
    data: bytes,
    offset_map: dict[bytes, int],
    end_offset: int,
    last_of_producer: dict[int, int],
    now_ms: int,
    delete_retention_ms: int,
    result: CleanResult,
    txns: _TxnMetadata | None = None,
) -> bytes | None:
    """The batch to write for `data` (itself, a rebuilt one, or None to drop it).

    Transactions (Kafka's CleanedTransactionMetadata): batches of aborted transactions go;
    a marker whose transaction has no data left gets a delete horizon
    (now + delete.retention.ms) and goes once it passed; committed data is compacted as
    any other."""
    horizon = header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else None
    keep_empty = header.has_producer_id and last_of_producer.get(header.producer_id) == (
        header.last_offset
    )
    if header.is_control:
        if txns is None or not txns.on_control_batch(header, data):
            return data
        if horizon is not None:
            return data if horizon > now_ms else None
        stamped = now_ms + delete_retention_ms
        prev = result.min_delete_horizon_ms
        result.min_delete_horizon_ms = stamped if prev is None else min(prev, stamped)
        return build_retained_batch(header, list(iter_records(data)), delete_horizon_ms=stamped)
    if txns is not None and txns.on_batch(header):
        result.records_removed += header.record_count
        return build_retained_batch(header, []) if keep_empty else None
    keys = _record_keys(data, header)
    verdicts = [_retain(*k, offset_map, end_offset, horizon, now_ms) for k in keys]
    removed = verdicts.count(False)
    tombstones = any(k[2] for k, keep in zip(keys, verdicts, strict=True) if keep)
    result.records_kept += len(keys) - removed
    result.records_removed += removed
    new_horizon = horizon
    if tombstones and horizon is None:
        new_horizon = now_ms + delete_retention_ms
    if tombstones and new_horizon is not None:
        prev = result.min_delete_horizon_ms
        result.min_delete_horizon_ms = new_horizon if prev is None else min(prev, new_horizon)
    if not tombstones:
        new_horizon = None
    if removed == 0 and new_horizon == horizon:
        return data
    if removed == len(keys) and not keep_empty:
        return None
    kept = [r for r, keep in zip(iter_records(data), verdicts, strict=True) if keep]
    return build_retained_batch(header, kept, delete_horizon_ms=new_horizon)


def _record_keys(data: bytes, header: BatchHeader) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, whether the value is null) of each record of the batch `data`: all
    compaction looks at, read without decoding values and headers (`iter_records` decodes
    the records of a batch that must be rebuilt). Malformed records raise as there."""
    if header.size_in_bytes > len(data):
        raise CorruptRecordError("truncated record batch")
    payload, p, end = _records_payload(data, 0, header)
    base = header.base_offset
    out: list[tuple[int, bytes | None, bool]] = []
    try:
        for _ in range(header.record_count):
            length, p = _read_varint(payload, p, end)
            rec_end = p + length
            if length < 6 or rec_end > end:
                raise InvalidRecordError(f"invalid record size {length}")
            _ts_delta, q = _read_varlong(payload, p + 1, rec_end)  # after the attributes
            offset_delta, q = _read_varint(payload, q, rec_end)
            key_len, q = _read_varint(payload, q, rec_end)
            key = None if key_len < 0 else payload[q : q + key_len]
            if key_len > rec_end - q:
                raise InvalidRecordError(f"invalid key length {key_len}")
            value_len, _ = _read_varint(payload, q + max(key_len, 0), rec_end)
            out.append((base + offset_delta, key, value_len < 0))
            p = rec_end
    except IndexError as exc:
        raise InvalidRecordError("record extends past the end of the batch") from exc
    if p != end:
        raise InvalidRecordError("trailing bytes after the last record of the batch")
    return out


class _TxnMetadata:
    """What the cleaner knows of transactions while it walks batches in offset order (Kafka's
    CleanedTransactionMetadata): the aborted ones (from the txn indexes) become current as
    their first offset is reached; their batches are discarded; a marker may go once no batch
    of its transaction was met (`on_control_batch` True)."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}  # pid -> (txn, seen)
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: list[AbortedTxn] = []  # entries the cleaned segment keeps

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (discard it)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[header.producer_id] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, data: bytes) -> bool:
        """A marker: True if no batch of its transaction was met (it may be discarded)."""
        self._consume_up_to(header.last_offset)
        if header.record_count == 0:
            return True  # an emptied control batch
        marker = read_marker(data)
        if marker is None:
            return False
        pid = header.producer_id
        if marker.is_abort:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                self.cleaned_index.append(ongoing[0])
                return False
            return True
        if pid in self._ongoing_committed:
            self._ongoing_committed.discard(pid)
            return False
        return True


def _retain(
    offset: int,
    key: bytes | None,
    null_value: bool,
    offset_map: dict[bytes, int],
    end_offset: int,
    horizon: int | None,
    now_ms: int,
) -> bool:
    if offset >= end_offset:
        return True  # beyond what the offset map covers
    if key is None:
        return False  # a compacted topic has no use for keyless records
    latest = offset_map.get(key)
    if latest is not None and latest > offset:
        return False
    # a tombstone goes once its delete horizon has passed
    return not (null_value and horizon is not None and horizon <= now_ms)


class LogCleaner:
    """Picks the filthiest compacted log and cleans it; keeps `cleaner-offset-checkpoint` in
    each log dir. `clean_once` is called by the broker's scheduler on an executor thread."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        logs: Callable[[], Iterable[Log]],
        dir_of: Callable[[TopicPartition], Path | None],
        config: CleanerConfig = CleanerConfig(),
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self._logs = logs
        self._dir_of = dir_of
        self.config = config
        self._lock = threading.Lock()
        self._checkpoints: dict[TopicPartition, int] = {}
        self._horizons: dict[TopicPartition, int] = {}
        for dir in self.log_dirs:
            try:
                self._checkpoints.update(OffsetCheckpointFile(dir / CLEANER_CHECKPOINT).read())
            except (OSError, LogError):
                log.exception("could not read %s in %s", CLEANER_CHECKPOINT, dir)

    def checkpoint_of(self, tp: TopicPartition) -> int | None:
        return self._checkpoints.get(tp)

    def _write_checkpoints(self) -> None:
        per_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        live = {lg.topic_partition for lg in self._logs()}
        for tp, offset in self._checkpoints.items():
            dir = self._dir_of(tp)
            if tp in live and dir is not None and dir in per_dir:
                per_dir[dir][tp] = offset
        for dir, offsets in per_dir.items():
            OffsetCheckpointFile(dir / CLEANER_CHECKPOINT).write(offsets)

    def grab_filthiest(self, now_ms: int) -> tuple[Log, LogToClean] | None:
        """The compacted log most in need of cleaning (Kafka's grabFilthiestCompactedLog)."""
        best: tuple[Log, LogToClean] | None = None
        horizon_due: tuple[Log, LogToClean] | None = None
        logs = list(self._logs())
        live = {lg.topic_partition for lg in logs}
        for tp in [tp for tp in self._checkpoints if tp not in live]:
            del self._checkpoints[tp]  # deleted logs start over if they come back
            self._horizons.pop(tp, None)
        for lg in logs:
            if lg.closed or not lg.config.compact:
                continue
            try:
                info = cleanable_offsets(lg, self._checkpoints.get(lg.topic_partition), now_ms)
            except (OSError, LogError, RecordError):
                continue
            ratio_ok = info.cleanable_ratio > lg.config.min_cleanable_dirty_ratio
            if (
                info.cleanable_bytes > 0
                and (ratio_ok or info.need_compaction_now)
                and (best is None or info.cleanable_ratio > best[1].cleanable_ratio)
            ):
                best = (lg, info)
            horizon = self._horizons.get(lg.topic_partition)
            if horizon is not None and horizon <= now_ms and horizon_due is None:
                horizon_due = (lg, info)
        return best if best is not None else horizon_due

    def clean_once(self, now_ms: int) -> CleanResult | None:
        """Clean the filthiest log, if any; returns what was done."""
        with self._lock:
            picked = self.grab_filthiest(now_ms)
            if picked is None:
                return None
            lg, _info = picked
            tp = lg.topic_partition
            try:
                result = clean_log(
                    lg,
                    self._checkpoints.get(tp),
                    now_ms,
                    max_map_entries=self.config.max_map_entries,
                )
            except (OSError, LogError, RecordError):
                if lg.closed:
                    return None
                log.exception("%s: cleaning failed", tp)
                self._horizons.pop(tp, None)
                return None
            if result is None:
                self._horizons.pop(tp, None)
                return None
            if result.aborted:
                return result
            self._checkpoints[tp] = result.end_offset
            if result.min_delete_horizon_ms is not None:
                self._horizons[tp] = result.min_delete_horizon_ms
            else:
                self._horizons.pop(tp, None)
            try:
                self._write_checkpoints()
            except (OSError, LogError):
                log.exception("could not write %s", CLEANER_CHECKPOINT)
            return result

    def clean_all(self, now_ms: int, max_rounds: int = 100) -> int:
        """Clean until no log needs it (tests and tools); returns logs cleaned."""
        done = 0
        for _ in range(max_rounds):
            result = self.clean_once(now_ms)
            if result is None or result.aborted:
                break
            done += 1
        return done
