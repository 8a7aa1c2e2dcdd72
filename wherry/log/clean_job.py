"""The log cleaner's CPU work as one pure step: a `CleanJob` in (file paths, offsets, the
aborted transactions of the txn indexes, the producers' last batches, settings), `.cleaned`
segment files and a `CleanOutput` out (`run_clean_job`).

It reads the old segments' `.log` files by path, builds the offset map over the dirty section,
filters or rebuilds each batch and writes one fsynced `<base>.log.cleaned` segment (with its
indexes) per group of old segments. It touches no `Log`: the caller takes the snapshot under
the log's lock (`wherry.log.cleaner`), and swaps the outputs in after checking the old segments
are still the log's. `wherry server` runs it in a worker process (`cleaner_process.py`), so the
broker's threads do not hold the GIL for it; the simulator and direct users of `LogCleaner`
call it in-process.

If an input file is gone or shorter than when the job was made (retention, truncation, a
moved or deleted log), the job stops: its outputs are deleted and it returns `gone`.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wherry.log.producer_state import read_marker
from wherry.log.segment import LogSegment, segment_file_name
from wherry.log.segments import CLEANED_SUFFIX, SEGMENT_SUFFIXES
from wherry.log.txn_index import AbortedTxn
from wherry.protocol.record_walk import _read_varint, _read_varlong
from wherry.protocol.records import (
    ATTR_DELETE_HORIZON,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    _records_payload,
    build_retained_batch,
    iter_batches,
    iter_records,
    parse_header,
)

__all__ = [
    "CleanJob",
    "CleanOutput",
    "CleanResult",
    "CleanerWorkerLost",
    "SegmentInput",
    "discard_outputs",
    "run_clean_job",
]

_READ_CHUNK_BYTES = 1024 * 1024
_INT32_MAX = 2**31 - 1


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


@dataclass(frozen=True, slots=True)
class SegmentInput:
    """An inactive segment as the job sees it."""

    base_offset: int
    next_base: int  # the following segment's base offset
    path: str  # its `.log` file
    size: int
    aborted: tuple[AbortedTxn, ...]  # its txn index


@dataclass(frozen=True, slots=True)
class CleanJob:
    """Everything one clean of one log needs, taken under the log's lock."""

    dir: str
    segments: tuple[SegmentInput, ...]  # the inactive segments, in offset order
    active_aborted: tuple[AbortedTxn, ...]  # the active segment's txn index
    first_dirty_offset: int
    first_uncleanable_offset: int
    max_map_entries: int
    last_of_producer: Mapping[int, int]  # producer id -> offset of its last data batch
    now_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int

    def output_paths(self, base_offset: int) -> list[Path]:
        """The files of the `.cleaned` segment with `base_offset`."""
        return [
            Path(self.dir) / segment_file_name(base_offset, suffix + CLEANED_SUFFIX)
            for suffix in SEGMENT_SUFFIXES
        ]

    def open_output(self, base_offset: int) -> LogSegment:
        """The `.cleaned` segment with `base_offset` (created where missing)."""
        return LogSegment.open(
            Path(self.dir),
            base_offset,
            index_interval_bytes=self.index_interval_bytes,
            max_index_bytes=self.segment_index_bytes,
            now_ms=self.now_ms,
            suffix=CLEANED_SUFFIX,
        )


@dataclass(slots=True)
class CleanOutput:
    """What a job did: the statistics, and per `.cleaned` segment written, the base offsets
    of the old segments it replaces (`groups`, in order). `gone`: an input left the log
    meanwhile; nothing was written."""

    result: CleanResult
    groups: list[tuple[int, ...]] = field(default_factory=list)
    gone: bool = False


class _SegmentGone(Exception):
    """An input file is missing or shorter than the job says."""


def discard_outputs(job: CleanJob, bases: Sequence[int] | None = None) -> None:
    """Delete the `.cleaned` files a job wrote (or may have written: every input's base)."""
    for base in bases if bases is not None else [s.base_offset for s in job.segments]:
        for path in job.output_paths(base):
            path.unlink(missing_ok=True)


def run_clean_job(job: CleanJob) -> CleanOutput | None:
    """Clean once (Kafka's Cleaner.clean, its reading and writing): None if no segment is to
    be rewritten."""
    first_dirty, upper = job.first_dirty_offset, job.first_uncleanable_offset
    dirty = [s for s in job.segments if s.next_base > first_dirty and s.base_offset < upper]
    next_offsets: dict[int, int] = {}
    try:
        offset_map, end_offset = _build_offset_map(job, dirty, next_offsets)
    except _SegmentGone:
        return CleanOutput(CleanResult(first_dirty, aborted=True), gone=True)
    end_offset = max(end_offset, first_dirty)
    to_clean = [s for s in job.segments if s.base_offset < end_offset]
    if not to_clean:
        return None
    result = CleanResult(end_offset)
    result.segments_before = len(to_clean)
    result.bytes_before = sum(s.size for s in to_clean)
    output = CleanOutput(result)
    try:
        for group in _group_segments(
            to_clean, job.segment_bytes, job.segment_index_bytes, job.index_interval_bytes
        ):
            _clean_group(job, group, offset_map, end_offset, next_offsets, result)
            output.groups.append(tuple(s.base_offset for s in group))
    except _SegmentGone:
        discard_outputs(job, [g[0] for g in output.groups])
        result.aborted = True
        return CleanOutput(result, gone=True)
    except BaseException:
        discard_outputs(job, [g[0] for g in output.groups])
        raise
    return output


def _collect_aborted(job: CleanJob, start: int, upper: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start, upper), as `Log.collect_aborted_transactions`
    finds them (the txn indexes from the segment holding `start` on)."""
    bases = [s.base_offset for s in job.segments]
    indexes = [s.aborted for s in job.segments]
    if job.segments:
        bases.append(job.segments[-1].next_base)
        indexes.append(job.active_aborted)
    found: list[AbortedTxn] = []
    for entries in indexes[max(0, bisect.bisect_right(bases, start) - 1) :]:
        for txn in entries:  # TransactionIndex.collect
            if txn.last_offset >= start and txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                return found
    return found


def _iter_segment_batches(
    segment: SegmentInput, next_offsets: dict[int, int] | None = None
) -> Iterator[tuple[BatchHeader, bytes]]:
    """The batches of an old segment's file, read a chunk at a time; raises _SegmentGone if
    the file is missing or shorter than `segment.size`. Records the offset after the last
    batch in `next_offsets`."""
    try:
        fd = os.open(segment.path, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise _SegmentGone(segment.base_offset) from exc
    next_offset = segment.base_offset
    try:
        position = 0
        size = segment.size
        while position < size:
            want = min(_READ_CHUNK_BYTES, size - position)
            chunk = os.pread(fd, want, position)
            if len(chunk) < want:
                raise _SegmentGone(segment.base_offset)
            consumed = 0
            for pos, header in iter_batches(chunk):
                next_offset = header.next_offset
                yield header, chunk[pos : pos + header.size_in_bytes]
                consumed = pos + header.size_in_bytes
            if consumed == 0:  # a batch larger than the chunk
                header = parse_header(chunk, 0)
                if position + header.size_in_bytes > size:
                    break
                whole = os.pread(fd, header.size_in_bytes, position)
                if len(whole) < header.size_in_bytes:
                    raise _SegmentGone(segment.base_offset)
                next_offset = header.next_offset
                yield header, whole
                consumed = header.size_in_bytes
            position += consumed
    finally:
        os.close(fd)
    if next_offsets is not None:
        next_offsets[segment.base_offset] = next_offset


def _build_offset_map(
    job: CleanJob, segments: Sequence[SegmentInput], next_offsets: dict[int, int]
) -> tuple[dict[bytes, int], int]:
    """key -> latest offset over [first dirty, first uncleanable), whole segments at a time
    while the map has room (at least one segment). Returns the map and the end offset it
    covers."""
    first_dirty, upper = job.first_dirty_offset, job.first_uncleanable_offset
    offset_map: dict[bytes, int] = {}
    end = first_dirty
    # Records of aborted transactions do not enter the map (they must not shadow older ones).
    txns = _TxnMetadata(_collect_aborted(job, first_dirty, upper))
    for segment in segments:
        if segment.base_offset >= upper:
            break
        seg_map: dict[bytes, int] = {}
        for header, data in _iter_segment_batches(segment, next_offsets):
            if header.last_offset < first_dirty or header.base_offset >= upper:
                continue
            if header.is_control:
                txns.on_control_batch(header, data)
            elif not txns.on_batch(header):
                for offset, key, _null_value in _record_keys(data, header):
                    if first_dirty <= offset < upper and key is not None:
                        seg_map[key] = offset
        new_keys = sum(1 for k in seg_map if k not in offset_map)
        if offset_map and len(offset_map) + new_keys > job.max_map_entries:
            break  # full: clean up to here, the rest next round
        offset_map.update(seg_map)
        end = max(end, min(segment.next_base, upper))
    return offset_map, end


def _group_segments(
    segments: Sequence[SegmentInput], max_bytes: int, max_index_bytes: int, index_interval: int
) -> list[list[SegmentInput]]:
    """Consecutive segments grouped so each output stays under segment.bytes, the index size
    and a relative-offset range that fits an int32 (Kafka's groupSegmentsBySize)."""
    groups: list[list[SegmentInput]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        while rest:
            nxt = rest[0]
            following_base = rest[1].base_offset if len(rest) > 1 else None
            est_index = (size + nxt.size) // max(index_interval, 1) * 8
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


def _next_offset(segment: SegmentInput, next_offsets: dict[int, int]) -> int:
    """The offset after the segment's last batch (its base offset if empty)."""
    if segment.base_offset not in next_offsets:
        for _ in _iter_segment_batches(segment, next_offsets):
            pass
    return next_offsets[segment.base_offset]


def _clean_group(
    job: CleanJob,
    group: Sequence[SegmentInput],
    offset_map: dict[bytes, int],
    end_offset: int,
    next_offsets: dict[int, int],
    result: CleanResult,
) -> None:
    """Write the `.cleaned` segment replacing `group`, fsynced."""
    base = group[0].base_offset
    txns = _TxnMetadata(_collect_aborted(job, base, _next_offset(group[-1], next_offsets)))
    discard_outputs(job, [base])  # leftovers of that name
    new = job.open_output(base)
    try:
        for old in group:
            out = bytearray()
            headers: list[tuple[int, BatchHeader]] = []
            for header, data in _iter_segment_batches(old):
                kept = _filter_batch(header, data, offset_map, end_offset, job, result, txns)
                if kept is None:
                    continue
                headers.append((len(out), parse_header(kept, 0)))
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
            os.utime(new.log_path, ns=(time.time_ns(), os.stat(group[-1].path).st_mtime_ns))
        size = new.size
        new.close()
    except BaseException:
        new.delete()
        raise
    result.segments_after += 1
    result.bytes_after += size


def _filter_batch(
    header: BatchHeader,
    data: bytes,
    offset_map: dict[bytes, int],
    end_offset: int,
    job: CleanJob,
    result: CleanResult,
    txns: _TxnMetadata,
) -> bytes | None:
    """The batch to write for `data` (itself, a rebuilt one, or None to drop it).

    Transactions (Kafka's CleanedTransactionMetadata): batches of aborted transactions go;
    a marker whose transaction has no data left gets a delete horizon
    (now + delete.retention.ms) and goes once it passed; committed data is compacted as
    any other."""
    now_ms = job.now_ms
    horizon = header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else None
    keep_empty = header.has_producer_id and job.last_of_producer.get(header.producer_id) == (
        header.last_offset
    )
    if header.is_control:
        if not txns.on_control_batch(header, data):
            return data
        if horizon is not None:
            return data if horizon > now_ms else None
        stamped = now_ms + job.delete_retention_ms
        prev = result.min_delete_horizon_ms
        result.min_delete_horizon_ms = stamped if prev is None else min(prev, stamped)
        return build_retained_batch(header, list(iter_records(data)), delete_horizon_ms=stamped)
    if txns.on_batch(header):
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
        new_horizon = now_ms + job.delete_retention_ms
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


class CleanerWorkerLost(Exception):
    """The process running a job died (or was stopped with the broker) before it answered;
    whatever it wrote is deleted and the log is cleaned again next round."""
