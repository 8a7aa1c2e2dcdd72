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

The reading and writing is `clean_job.run_clean_job`, a pure step: the log's lock is held only
to take what it needs (`_take`: the segments' files, offsets, txn index entries, the producers'
last batches) and for the swap, so appends and fetches go on while a log is cleaned. The
`LogCleaner` of `wherry server` runs that step in a worker process (`cleaner_process.py`), so
that its CPU work does not hold the broker's GIL; elsewhere (the simulator, tests) it runs
in-process. Before each swap, the old segments the job read are checked to be still the log's,
unchanged (retention or truncation may have removed them meanwhile): if not, the output is
deleted and the log is cleaned again next round.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import OffsetCheckpointFile
from wherry.log.clean_job import (
    CleanerWorkerLost,
    CleanJob,
    CleanOutput,
    CleanResult,
    SegmentInput,
    discard_outputs,
    run_clean_job,
)
from wherry.log.config import LONG_MAX
from wherry.log.errors import LogError
from wherry.log.log import Log
from wherry.log.segment import LogSegment
from wherry.protocol.records import RecordError

__all__ = [
    "CLEANER_CHECKPOINT",
    "CleanResult",
    "CleanRunner",
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


CleanRunner = Callable[[CleanJob], "CleanOutput | None"]


@dataclass(frozen=True, slots=True)
class _Taken:
    """An input segment as the job was made: the object, and its file's identity (a segment
    truncated and rolled again meanwhile has another size or modification time)."""

    segment: LogSegment
    size: int
    ino: int
    mtime_ns: int


def _unchanged(taken: _Taken) -> bool:
    try:
        st = os.stat(taken.segment.log_path)
    except OSError:
        return False
    return (st.st_size, st.st_ino, st.st_mtime_ns) == (taken.size, taken.ino, taken.mtime_ns)


def _take(
    log_: Log, info: LogToClean, now_ms: int, max_map_entries: int
) -> tuple[CleanJob, dict[int, _Taken]] | CleanResult | None:
    """The job for one clean, taken under the log's lock (the stats of the files after it):
    None if there is no inactive segment, an aborted result if a file left meanwhile."""
    config = log_.config
    with log_.lock:
        if log_.closed:
            return None
        segments = log_.segments
        if len(segments) < 2:
            return None
        inputs = tuple(
            SegmentInput(
                s.base_offset,
                segments[i + 1].base_offset,
                str(s.log_path),
                s.size,
                tuple(s.txn_index.entries),
            )
            for i, s in enumerate(segments[:-1])
        )
        active_aborted = tuple(segments[-1].txn_index.entries)
        last_of_producer = {
            pid: entry.last_data_offset for pid, entry in log_.producer_state.producers.items()
        }
        directory = str(log_.dir)
    taken: dict[int, _Taken] = {}
    for s, inp in zip(segments[:-1], inputs, strict=True):
        try:
            st = os.stat(inp.path)
        except OSError:
            return CleanResult(info.first_dirty_offset, aborted=True)
        if st.st_size != inp.size:
            return CleanResult(info.first_dirty_offset, aborted=True)
        taken[s.base_offset] = _Taken(s, inp.size, st.st_ino, st.st_mtime_ns)
    job = CleanJob(
        dir=directory,
        segments=inputs,
        active_aborted=active_aborted,
        first_dirty_offset=info.first_dirty_offset,
        first_uncleanable_offset=info.first_uncleanable_offset,
        max_map_entries=max_map_entries,
        last_of_producer=last_of_producer,
        now_ms=now_ms,
        segment_bytes=config.segment_bytes,
        segment_index_bytes=config.segment_index_bytes,
        index_interval_bytes=config.index_interval_bytes,
        delete_retention_ms=config.delete_retention_ms,
    )
    return job, taken


def clean_log(
    log_: Log,
    checkpoint: int | None,
    now_ms: int,
    *,
    max_map_entries: int = CleanerConfig().max_map_entries,
    force: bool = True,
    crash_hook: Callable[[str], None] | None = None,
    run: CleanRunner = run_clean_job,
) -> CleanResult | None:
    """Clean one log once (Kafka's Cleaner.clean); returns None if there was nothing to do
    (with `force=False`: also when the dirty ratio is not above min.cleanable.dirty.ratio).
    `run` does the reading and writing (`run_clean_job`, here or in a worker process)."""
    config = log_.config
    info = cleanable_offsets(log_, checkpoint, now_ms)
    if not force and not (
        info.need_compaction_now or info.cleanable_ratio > config.min_cleanable_dirty_ratio
    ):
        return None
    taken = _take(log_, info, now_ms, max_map_entries)
    if taken is None or isinstance(taken, CleanResult):
        return taken
    job, inputs = taken
    try:
        output = run(job)
    except BaseException:
        discard_outputs(job)  # what a worker that died or a failed job left
        raise
    if output is None or output.gone:
        return None if output is None else output.result
    result = _swap_in(log_, job, inputs, output, crash_hook)
    if not result.aborted:
        log.info(
            "%s: cleaned %d segments (%d bytes) into %d (%d bytes); %d records kept, %d "
            "removed; cleaner checkpoint %d",
            log_.topic_partition,
            result.segments_before,
            result.bytes_before,
            result.segments_after,
            result.bytes_after,
            result.records_kept,
            result.records_removed,
            result.end_offset,
        )
    return result


def _swap_in(
    log_: Log,
    job: CleanJob,
    inputs: dict[int, _Taken],
    output: CleanOutput,
    crash_hook: Callable[[str], None] | None,
) -> CleanResult:
    """Swap each `.cleaned` segment in for the old segments it replaces, once they are known
    to be still the log's, unchanged (`Log.replace_segments` checks again under the lock).
    At the first that is not, that output and the later ones are deleted: aborted."""
    result = output.result
    groups = output.groups
    for i, bases in enumerate(groups):
        try:
            if crash_hook is not None:
                crash_hook("cleaned-written")
            old = [inputs[b] for b in bases]
            new = _open_output(log_, job, old)
            swapped = new is not None and log_.replace_segments(
                new, [t.segment for t in old], now_ms=job.now_ms, crash_hook=crash_hook
            )
        except BaseException:
            discard_outputs(job, [g[0] for g in groups[i + 1 :]])
            raise
        if not swapped:
            discard_outputs(job, [g[0] for g in groups[i:]])
            result.aborted = True
            break
    return result


def _open_output(log_: Log, job: CleanJob, old: list[_Taken]) -> LogSegment | None:
    """The `.cleaned` segment replacing `old`, if these are still the log's inactive
    segments, as the job read them. Opened (its indexes read) without the log's lock, which
    an append waits for: `Log.replace_segments` checks again under it."""
    if not all(_unchanged(t) for t in old):
        return None
    base = old[0].segment.base_offset
    with log_.lock:
        if log_.closed or str(log_.dir) != job.dir:
            return None
        segments = log_.segments
        inactive = {id(s) for s in segments[:-1]}
        if not all(id(t.segment) in inactive and t.segment.size == t.size for t in old):
            return None
    if not job.output_paths(base)[0].exists():
        return None
    try:
        return job.open_output(base)
    except FileNotFoundError:  # its directory renamed meanwhile (the log deleted or moved)
        return None

class LogCleaner:
    """Picks the filthiest compacted log and cleans it; keeps `cleaner-offset-checkpoint` in
    each log dir. `clean_once` is called by the broker's scheduler on an executor thread."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        logs: Callable[[], Iterable[Log]],
        dir_of: Callable[[TopicPartition], Path | None],
        config: CleanerConfig = CleanerConfig(),
        *,
        runner: CleanRunner | None = None,
        close_runner: Callable[[], None] | None = None,
    ) -> None:
        """`runner` runs each clean's job (default: `run_clean_job`, in-process);
        `close_runner`, called by `close`, stops it."""
        self._run: CleanRunner = runner if runner is not None else run_clean_job
        self._close_runner = close_runner
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
                    run=self._run,
                )
            except CleanerWorkerLost:
                return None  # reported by the runner; its output is gone: next round
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

    def close(self) -> None:
        """Stop the runner (the broker's stop: a clean in progress ends aborted)."""
        if self._close_runner is not None:
            self._close_runner()

    def clean_all(self, now_ms: int, max_rounds: int = 100) -> int:
        """Clean until no log needs it (tests and tools); returns logs cleaned."""
        done = 0
        for _ in range(max_rounds):
            result = self.clean_once(now_ms)
            if result is None or result.aborted:
                break
            done += 1
        return done
