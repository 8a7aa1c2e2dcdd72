"""The segment list of one partition log (Kafka 3.9's LogSegments, with LocalLog's roll, segment
removal and segment replacement).

`LogSegments` holds the partition directory, the log's config and its segments, oldest first;
the last one is the active segment and takes appends. It answers lookups by offset and by
timestamp, rolls, removes segments at either end (their files renamed to `.deleted` and removed
after file.delete.delay.ms) and swaps cleaned segments in. It also remembers what changes to the
list have not reached the disk yet: a rolled segment not yet fsynced and directory entries not
yet fsynced (the log's next flush does both).

It takes no lock: the owning `Log` calls it under its own.
"""

from __future__ import annotations

import bisect
import logging
import random
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import fsync_dir
from wherry.log.config import LogConfig
from wherry.log.errors import LogOffsetError, StorageError
from wherry.log.file_region import FileRegion
from wherry.log.index import TimestampOffset
from wherry.log.producer_state import ProducerStateManager
from wherry.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    RollParams,
    segment_file_name,
)
from wherry.log.txn_index import TXN_INDEX_SUFFIX
from wherry.protocol.records import BatchHeader, CorruptRecordError, crc_ok

__all__ = [
    "CLEANED_SUFFIX", "SEGMENT_SUFFIXES", "SWAP_SUFFIX", "LogSegments", "open_segment", "swap_in",
]

# The partition log's parts log under the name the log has always used (wherry.log.log).
log = logging.getLogger("wherry.log.log")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _random_jitter(config: LogConfig) -> int:
    if config.segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.segment_ms))


def open_segment(
    dir: Path,
    config: LogConfig,
    base_offset: int,
    *,
    now_ms: int,
    suffix: str = "",
    jitter: bool = False,
) -> LogSegment:
    """Open (creating if needed) a segment with the index settings of `config`; `jitter` draws
    the roll jitter (segment.jitter.ms) a new active segment gets."""
    return LogSegment.open(
        dir,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_bytes=config.segment_index_bytes,
        now_ms=now_ms,
        roll_jitter_ms=_random_jitter(config) if jitter else 0,
        suffix=suffix,
    )


class _ReadBound(NamedTuple):
    offset: int
    segment_base: int
    position: int


class LogSegments:
    """The ordered segments of a partition directory (never empty)."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        topic_partition: TopicPartition,
        producer_state: ProducerStateManager,
        segments: list[LogSegment],
    ) -> None:
        self.dir = dir
        self.config = config
        self.topic_partition = topic_partition
        self._producer_state = producer_state  # snapshotted at every roll
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._read_bound: _ReadBound | None = None
        self._pending_deletes: list[tuple[int, LogSegment]] = []  # (delete at ms, segment)
        self._pending_flush_offset: int | None = None  # rolled segments not yet fsynced
        self._dir_needs_flush = False
        self._dir_changes = 0  # segments added to the directory so far (see `dir_to_sync`)
        # Held while a cleaner renames the files of segments it swapped (see `swap_in`).
        self._renaming = threading.Lock()
        # removed by retention, files not renamed yet: (segment, delete instead of rename)
        self._to_rename: list[tuple[LogSegment, bool]] = []

    # ----------------------------------------------------------------------------------
    # The list
    # ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def as_list(self) -> list[LogSegment]:
        """A copy of the list (oldest first)."""
        return list(self._segments)

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def pending_flush_offset(self) -> int | None:
        """Base offset of the newest rolled segment whose predecessors are not fsynced yet."""
        return self._pending_flush_offset

    # ----------------------------------------------------------------------------------
    # Lookups by offset and by timestamp
    # ----------------------------------------------------------------------------------

    def _index_for(self, offset: int) -> int:
        """Index of the segment holding `offset` (the first segment for offsets below it)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def iter_batches_from(self, offset: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        """Every batch from the one containing `offset` on, with its segment."""
        for segment in self._segments[self._index_for(offset) :]:
            position = (
                segment.offset_index.lookup(offset).position if segment.base_offset <= offset else 0
            )
            for _, header in segment.iter_batches(position):
                yield segment, header

    def iter_batch_positions_from(
        self, offset: int
    ) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """Every batch from the one containing `offset` on: (segment, position, header)."""
        for segment in self._segments[self._index_for(offset) :]:
            position = (
                segment.offset_index.lookup(offset).position if segment.base_offset <= offset else 0
            )
            for pos, header in segment.iter_batches(position):
                yield segment, pos, header

    def segments_from(self, offset: int) -> list[LogSegment]:
        """The segment holding `offset` and every later one."""
        return self._segments[self._index_for(offset) :]

    def segments_between(self, from_offset: int, up_to: int) -> list[LogSegment]:
        """Segments holding offsets in [from_offset, up_to)."""
        start = self._index_for(from_offset)
        return [s for s in self._segments[start:] if s.base_offset < up_to]

    def _bound_for(self, offset: int) -> _ReadBound:
        """Segment and file position at which reading must stop to stay below `offset`."""
        cached = self._read_bound
        if cached is not None and cached.offset == offset:
            return cached
        segment = self._segments[self._index_for(offset)]
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
        upper: int | None,
        min_one_message: bool,
        region: bool = False,
    ) -> bytes | FileRegion:
        """Whole batches from the one containing `offset`; with `upper`, only those below it
        (`upper` below the log end offset, where a batch may end mid-segment). With `region`
        a `FileRegion` of those bytes (b"" when there are none)."""
        bound = self._bound_for(upper) if upper is not None else None
        for segment in self._segments[self._index_for(offset) :]:
            max_position: int | None = None
            if bound is not None:
                if segment.base_offset > bound.segment_base:
                    break
                if segment.base_offset == bound.segment_base:
                    max_position = bound.position
            read = segment.read_region if region else segment.read
            data = read(offset, max_bytes, max_position, min_one_message)
            if data is not None:
                return data
        return b""

    def find_offset_by_timestamp(
        self, timestamp: int, log_start_offset: int
    ) -> TimestampOffset | None:
        """The first record at or after `log_start_offset` with a timestamp >= `timestamp`."""
        for segment in self._segments:
            if segment.size == 0 or segment.largest_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_offset(self, log_start_offset: int) -> TimestampOffset | None:
        """The first record carrying the largest timestamp in the log."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        target = best.max_timestamp_so_far
        return best.find_offset_by_timestamp(target, max(log_start_offset, best.base_offset))

    # ----------------------------------------------------------------------------------
    # Roll
    # ----------------------------------------------------------------------------------

    def maybe_roll(
        self,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        *,
        log_end_offset: int,
        now_ms: int,
    ) -> LogSegment:
        """The segment an append of `messages_size` bytes goes to, rolling first if the active
        one is full, too old, has full indexes or cannot hold `max_offset`."""
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
            return self.roll(log_end_offset, now_ms)
        return segment

    def roll(self, new_offset: int, now_ms: int) -> LogSegment:
        """Seal the active segment, snapshot producer state at `new_offset` (the log end
        offset) and start a new active segment there; no-op if the active segment is empty
        and already starts there."""
        active = self._segments[-1]
        if active.base_offset == new_offset:
            if active.size == 0:
                return active
            raise LogOffsetError(
                f"trying to roll {self.topic_partition} to offset {new_offset} which is the "
                f"base of the non-empty active segment"
            )
        for suffix in SEGMENT_SUFFIXES:
            stale = self.dir / segment_file_name(new_offset, suffix)
            if stale.exists():
                log.warning(
                    "%s: deleting stale file %s before rolling", self.topic_partition, stale
                )
                stale.unlink()
        active.on_become_inactive()
        self._producer_state.update_map_end_offset(new_offset)
        self._producer_state.take_snapshot(fsync=False)
        segment = open_segment(self.dir, self.config, new_offset, now_ms=now_ms, jitter=True)
        segment.set_active(True)
        self._segments.append(segment)
        self._bases.append(new_offset)
        self._dir_needs_flush = True
        self._dir_changes += 1
        # Like Kafka's asynchronous flush after a roll: done by the log's next flush_if_needed().
        self._pending_flush_offset = new_offset
        return segment

    def dir_to_sync(self) -> int | None:
        """None when no segment was added since the directory's last fsync; else a token for
        `mark_flushed`: a flush fsyncs the directory without the log's lock, and the token
        tells whether a segment was added after it."""
        return self._dir_changes if self._dir_needs_flush else None

    def mark_flushed(self, up_to: int, dir_synced: int | None = None) -> None:
        """Everything below `up_to` was fsynced: fsync the directory if segments were added
        since the last time (unless the caller did, at token `dir_synced` from `dir_to_sync`,
        and none was added since), and forget a roll at or below `up_to`."""
        if self._dir_needs_flush:
            if dir_synced is None or dir_synced != self._dir_changes:
                fsync_dir(self.dir)
            self._dir_needs_flush = False
        if self._pending_flush_offset is not None and self._pending_flush_offset <= up_to:
            self._pending_flush_offset = None

    # ----------------------------------------------------------------------------------
    # Removal
    # ----------------------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove everything at or above `offset` (not below the first segment's base offset);
        returns the new log end offset."""
        idx = self._index_for(offset)
        removed = self._segments[idx + 1 :]
        del self._segments[idx + 1 :]
        del self._bases[idx + 1 :]
        for segment in removed:
            self._async_delete(segment, now_ms)
        active = self._segments[-1]
        active.set_active(True)
        active.truncate_to(offset, now_ms=now_ms)
        end = active.read_next_offset()
        self._read_bound = None
        if self._pending_flush_offset is not None and self._pending_flush_offset > end:
            self._pending_flush_offset = end
        return end

    def reset(self, new_offset: int, now_ms: int) -> None:
        """Remove every segment and start again with an empty active segment at `new_offset`."""
        for segment in self._segments:
            self._async_delete(segment, now_ms)
        for suffix in SEGMENT_SUFFIXES:
            (self.dir / segment_file_name(new_offset, suffix)).unlink(missing_ok=True)
        segment = open_segment(self.dir, self.config, new_offset, now_ms=now_ms, jitter=True)
        segment.set_active(True)
        self._segments = [segment]
        self._bases = [new_offset]
        self._pending_flush_offset = None
        self._dir_needs_flush = True
        self._dir_changes += 1
        self._read_bound = None

    def delete_oldest(self, count: int, now_ms: int, reason: str) -> None:
        """Remove the `count` oldest segments (retention), logging `reason`: closed and left
        for deletion after file.delete.delay.ms. Their files are renamed to *.deleted by
        `rename_deleted`, which the caller runs next, without the log's lock (as `replace`)."""
        gone = self._segments[:count]
        for segment in gone:
            log.info(
                "%s: deleting segment %d (%s breached)",
                self.topic_partition,
                segment.base_offset,
                reason,
            )
            try:
                segment.close()
            except OSError as exc:
                raise StorageError(f"error closing segment {segment.log_path}: {exc}") from exc
        del self._segments[:count]
        del self._bases[:count]
        self._read_bound = None
        if gone and not self._to_rename:
            self._renaming.acquire()
        delay = self.config.file_delete_delay_ms
        self._to_rename.extend((s, delay <= 0) for s in gone)
        if delay > 0:
            self._pending_deletes.extend((now_ms + delay, s) for s in gone)

    def rename_deleted(self) -> None:
        """The files of the segments `delete_oldest` removed: renamed to *.deleted (removed
        by `delete_pending_files` once due), or removed now with file.delete.delay.ms 0."""
        if not self._to_rename:
            return
        try:
            for segment, delete_now in self._to_rename:
                try:
                    if delete_now:
                        segment.delete()
                    else:
                        segment.change_file_suffixes("", DELETED_SUFFIX)
                except OSError as exc:
                    raise StorageError(
                        f"error deleting segment {segment.log_path}: {exc}"
                    ) from exc
        finally:
            self._to_rename.clear()
            self._renaming.release()

    def _retire(self, segment: LogSegment, *, delete_now: bool) -> None:
        """Close a segment that left the list; delete its files or rename them to *.deleted."""
        try:
            segment.close()
            if delete_now:
                segment.delete()
            else:
                segment.change_file_suffixes("", DELETED_SUFFIX)
        except OSError as exc:
            raise StorageError(f"error deleting segment {segment.log_path}: {exc}") from exc

    def _async_delete(self, segment: LogSegment, now_ms: int) -> None:
        """Rename the segment's files to *.deleted; remove them after file.delete.delay.ms."""
        delay = self.config.file_delete_delay_ms
        self._retire(segment, delete_now=delay <= 0)
        if delay > 0:
            self._pending_deletes.append((now_ms + delay, segment))

    def delete_pending_files(self, now_ms: int) -> int:
        """Remove *.deleted files whose delay has passed; returns segments removed."""
        due = self.take_due_deletes(now_ms)
        for segment in due:
            segment.delete()
        return len(due)

    def take_due_deletes(self, now_ms: int) -> list[LogSegment]:
        """The retired segments whose file.delete.delay.ms has passed, no longer tracked here:
        the caller removes their files (`LogSegment.delete`), without the log's lock."""
        due = [s for t, s in self._pending_deletes if t <= now_ms]
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now_ms]
        return due

    def await_renames(self) -> None:
        """Wait until no cleaner or retention pass is renaming segment files (`swap_in`)."""
        with self._renaming:
            pass

    @property
    def renaming(self) -> bool:
        return self._renaming.locked()

    # ----------------------------------------------------------------------------------
    # Replacement by cleaned segments (wherry.log.cleaner)
    # ----------------------------------------------------------------------------------

    def _index_of_run(self, old: Sequence[LogSegment]) -> int | None:
        """Where `old` stands as consecutive inactive segments of the list, if it does."""
        idx = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        if (
            idx is None
            or idx + len(old) >= len(self._segments)  # never the active segment
            or any(self._segments[idx + i] is not s for i, s in enumerate(old))
        ):
            return None
        return idx

    def can_replace(self, old: Sequence[LogSegment]) -> bool:
        """Whether `old` are (still) consecutive inactive segments of the list."""
        return self._index_of_run(old) is not None

    def prepare_swap(
        self, new: LogSegment, crash_hook: Callable[[str], None] | None = None
    ) -> None:
        """The first step of `replace`, run without the log's lock (it touches only `new`,
        which no reader sees yet): rename the cleaned segment `new` to `.swap` and fsync the
        directory, so that the swap is durable before any old segment is renamed away."""
        hook = crash_hook if crash_hook is not None else (lambda _step: None)
        hook("before-swap")
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.dir)
        hook("after-swap-rename")

    def replace(self, new: LogSegment, old: Sequence[LogSegment], *, now_ms: int) -> None:
        """Swap `new` (renamed to `.swap` by `prepare_swap`) in for `old` (see `can_replace`)
        in the list, under the log's lock: the old segments are closed and left for deletion
        after file.delete.delay.ms. Their files and `new`'s are renamed by `rename_replaced`,
        which the caller runs next, without the lock; until it is done, whatever else would
        read or rename files other than the active segment's waits (`await_renames`)."""
        idx = self._index_of_run(old)
        if idx is None:
            raise ValueError(f"{self.topic_partition}: {old} are not replaceable segments")
        delay = max(self.config.file_delete_delay_ms, 0)
        for segment in old:
            try:
                segment.close()
            except OSError as exc:
                raise StorageError(f"error closing segment {segment.log_path}: {exc}") from exc
            self._pending_deletes.append((now_ms + delay, segment))
        self._segments[idx : idx + len(old)] = [new]
        self._bases = [s.base_offset for s in self._segments]
        self._read_bound = None
        self._renaming.acquire()

    def rename_replaced(
        self,
        new: LogSegment,
        old: Sequence[LogSegment],
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        """The files of a `replace`: the old segments' renamed to `.deleted`, then `.swap` into
        place (the order recovery completes after a crash: see `Log.open`). The caller fsyncs
        the directory afterwards. `crash_hook(step)` runs between steps."""
        hook = crash_hook if crash_hook is not None else (lambda _step: None)
        try:
            for i, segment in enumerate(old):
                try:
                    segment.change_file_suffixes("", DELETED_SUFFIX)
                except OSError as exc:
                    raise StorageError(
                        f"error deleting segment {segment.log_path}: {exc}"
                    ) from exc
                if i == 0:
                    hook("after-first-delete")
            hook("after-deletes")
            new.change_file_suffixes(SWAP_SUFFIX, "")
            hook("after-swap")
        finally:
            self._renaming.release()

    # ----------------------------------------------------------------------------------
    # Close / delete / move
    # ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every segment, those awaiting deletion included."""
        for segment in self._segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.close()

    def release(self) -> None:
        """Release every segment's fd without writing anything (an offline log dir)."""
        for segment in [*self._segments, *(s for _, s in self._pending_deletes)]:
            segment.release()

    def delete_dir(self, *, close_segments: bool) -> None:
        """Remove the whole partition directory (closing the segments first if asked)."""
        if close_segments:
            for segment in self._segments:
                segment.close()
        self._pending_deletes.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def relocate(self, new_dir: Path) -> None:
        """Rename the partition directory to `new_dir`; the segments follow."""
        self.dir.rename(new_dir)
        self.dir = Path(new_dir)
        for segment in self._segments:
            segment.relocate(self.dir)

    def check_integrity(self, log_end_offset: int) -> None:
        """Raise RecordError/LogOffsetError if any batch is invalid or offsets do not increase."""
        expected = self._segments[0].base_offset
        for segment in self._segments:
            for pos, header in segment.iter_batches():
                data = segment.read_bytes(pos, header.size_in_bytes)
                if not crc_ok(data, 0, header):
                    raise CorruptRecordError(f"CRC mismatch at {segment.base_offset}+{pos}")
                if header.base_offset < expected:
                    raise LogOffsetError(f"offset {header.base_offset} < {expected}")
                expected = header.next_offset
        if expected != log_end_offset and self._segments[-1].size:
            raise LogOffsetError(f"log end {log_end_offset} != data end {expected}")


def swap_in(
    segments: LogSegments,
    lock: AbstractContextManager[Any],
    closed: Callable[[], bool],
    new: LogSegment,
    old: Sequence[LogSegment],
    *,
    now_ms: int,
    crash_hook: Callable[[str], None] | None = None,
) -> bool:
    """`Log.replace_segments`: swap the cleaned segment `new` in for `old`, holding the log's
    `lock` only to change the list, so that an append (on the event loop) waits neither for
    the disk nor for renames: `.swap` made durable first (`prepare_swap`, touching only
    `new`), then, under the lock, the list changed (`replace`), then, without it, the old
    segments renamed away and `.swap` into place (`rename_replaced`; meanwhile whatever else
    reads or renames files other than the active segment's waits: `files_locked`), then the
    directory fsynced; a crash before that leaves names recovery completes. Returns False (and
    deletes `new`) if the log was closed or `old` are no longer replaceable."""
    with lock:
        if closed() or not segments.can_replace(old):
            new.delete()
            return False
        directory = segments.dir
    try:
        segments.prepare_swap(new, crash_hook)
    except OSError:
        if closed():  # deleted or moved meanwhile: nothing to swap into
            new.delete()
            return False
        raise
    with files_locked(lock, segments):  # the renames gate free: `replace` takes it at once
        if closed() or not segments.can_replace(old):
            new.delete()
            return False
        segments.replace(new, old, now_ms=now_ms)
    segments.rename_replaced(new, old, crash_hook)
    with files_locked(lock, segments):
        due = segments.take_due_deletes(now_ms)
    for segment in due:  # file.delete.delay.ms passed (0: the old segments just renamed)
        segment.delete()
    try:
        fsync_dir(directory)
    except FileNotFoundError:
        if not closed():
            raise
    return True


@contextmanager
def files_locked(lock: AbstractContextManager[Any], segments: LogSegments) -> Iterator[None]:
    """A log's `lock`, held once no cleaner or retention pass is renaming files of its
    `segments` (`swap_in`, `LogSegments.delete_oldest`): for whatever reads, writes or renames
    files other than the active segment's. The wait is done without the lock, so appends go
    on meanwhile; the renames gate is only taken under the lock, so it stays free while the
    lock is held."""
    while True:
        segments.await_renames()
        with lock:
            if not segments.renaming:
                yield
                return
