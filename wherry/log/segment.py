"""One log segment: `<base_offset:020d>.log` plus its `.index` and `.timeindex`.

The `.log` file holds whole record batches (already offset-assigned) back to back. Reads and
writes use positional system calls (`pread`/`pwrite`) so an append that returned is in the page
cache (it survives a process kill); `flush()` fsyncs.

File descriptors: the active segment (`set_active(True)`, done by the owning Log) keeps its
`.log` open and its indexes in memory. An inactive segment opens its `.log` on demand and leaves
the descriptor to the process-wide LRU `wherry.log.cache.OPEN_FILES`, which closes the least
recently used ones beyond its bound (never while a read holds the segment's fd lock); its
indexes are loaded on demand into the `INDEXES` cache (see `wherry.log.index`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from wherry.log.cache import OPEN_FILES
from wherry.log.errors import CorruptIndexError, LogOffsetError, StorageError
from wherry.log.file_region import FileRegion
from wherry.log.index import NO_TIMESTAMP, OffsetIndex, TimeIndex, TimestampOffset
from wherry.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from wherry.protocol.primitives import INT32
from wherry.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    RecordError,
    crc_ok,
    iter_batches,
    iter_records,
    parse_header,
)

__all__ = [
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "BatchPosition",
    "LogSegment",
    "RollParams",
    "offset_from_file_name",
    "segment_file_name",
]

log = logging.getLogger(__name__)

_I = TypeVar("_I", OffsetIndex, TimeIndex)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"

_INT32_MAX = 2**31 - 1
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_SCAN_CHUNK_BYTES = 64 * 1024
_TAIL_BATCHES = 32  # recent batches whose positions a segment keeps (`translate_offset`)
_RECOVER_CHUNK_BYTES = 4 * 1024 * 1024

_Buffer = bytes | bytearray | memoryview


def _whole_batches_end(data: bytes, start: int = 0) -> int:
    """Length of the prefix of `data` made of complete batches (framing only), given that a
    batch starts at `start`."""
    pos, n = start, len(data)
    while n - pos >= LOG_OVERHEAD:
        (length,) = INT32.unpack_from(data, pos + 8)
        end = pos + LOG_OVERHEAD + length
        if length < _MIN_BATCH_LENGTH or end > n:
            break
        pos = end
    return pos


def _pread_all(fd: int, position: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, size, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
        size -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _pwrite_all(fd: int, data: _Buffer, position: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's zero-padded file name: `00000000000000000042.log`."""
    return f"{base_offset:020d}{suffix}"


def offset_from_file_name(name: str) -> int:
    """The base offset in a segment/index/snapshot file name; ValueError if not one."""
    stem = name.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        raise ValueError(f"not an offset-named file: {name!r}")
    return int(stem)


class BatchPosition(NamedTuple):
    """Where a batch lives in a segment file."""

    base_offset: int
    last_offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class RollParams:
    """What an append needs to decide whether to roll first (Kafka's RollParams)."""

    max_segment_bytes: int
    max_segment_ms: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


class LogSegment:
    """A segment of a partition log. Not thread-safe: the owning Log serialises access."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        roll_jitter_ms: int = 0,
        suffix: str = "",
    ) -> None:
        self.dir = dir if isinstance(dir, Path) else Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        self._suffix = suffix
        self.log_path = self.dir / segment_file_name(base_offset, LOG_SUFFIX + suffix)
        self.index_path = self.dir / segment_file_name(base_offset, INDEX_SUFFIX + suffix)
        self.time_index_path = self.dir / segment_file_name(base_offset, TIME_INDEX_SUFFIX + suffix)
        self.txn_index = TransactionIndex(
            self.dir / segment_file_name(base_offset, TXN_INDEX_SUFFIX + suffix), base_offset
        )
        self._index_files_existed: bool | None = None  # looked up when first asked
        self._fd_lock = threading.Lock()  # held while an inactive segment's fd is in use
        self._cache_referenced = False  # see wherry.log.cache
        self._active = False
        self._closed = False
        try:
            self._size = os.stat(self.log_path).st_size
            self._fd = -1  # opened on first use
        except FileNotFoundError:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self._size = 0
            OPEN_FILES.add(self, 1)
            # Kafka's layout: a segment's three files exist from its creation on (the indexes
            # empty until the first flush, roll or close writes them).
            for path in (self.index_path, self.time_index_path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            self._index_files_existed = True
        self._new_index_files = self._fd >= 0
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._max_ts_and_offset: TimestampOffset | None = None  # lazily from the time index
        self._rolling_based_timestamp: int | None = None  # max timestamp of the first batch
        self._bytes_since_last_index_entry = 0
        # The last batches appended, by base offset: a fetch at the log's end (a follower's,
        # a consumer's at the tail) asks for the offset after what it has, the base of a batch
        # appended since, whose position this gives without an index lookup or a file read.
        self._tail: dict[int, BatchPosition] = {}

    @classmethod
    def open(
        cls,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_bytes: int = 10 * 1024 * 1024,
        now_ms: int,
        roll_jitter_ms: int = 0,
        suffix: str = "",
    ) -> LogSegment:
        """Open (creating if needed) the segment with `base_offset` in `dir`."""
        return cls(
            dir,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_bytes=max_index_bytes,
            created_ms=now_ms,
            roll_jitter_ms=roll_jitter_ms,
            suffix=suffix,
        )

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, dir={self.dir})"

    # -- indexes ------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = self._open_index(OffsetIndex, self.index_path)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = self._open_index(TimeIndex, self.time_index_path)
        return self._time_index

    def _open_index(self, kind: type[_I], path: Path) -> _I:
        """An index, opened on first use (the files of a new segment are known empty)."""
        index = kind(path, self.base_offset, self.max_index_bytes)
        if self._new_index_files:
            index.assume_empty_file()
        return index

    def _opened_indexes(self) -> list[OffsetIndex | TimeIndex]:
        """The indexes opened so far."""
        return [i for i in (self._offset_index, self._time_index) if i is not None]

    @property
    def index_files_existed(self) -> bool:
        """Whether both index files existed when the segment was opened (or were rebuilt)."""
        if self._index_files_existed is None:
            self._index_files_existed = self.index_path.exists() and self.time_index_path.exists()
        return self._index_files_existed

    def sanity_check(self, *, full: bool = False) -> None:
        """Raise CorruptIndexError if an index file is missing or inconsistent with the log."""
        if not self.index_files_existed:
            raise CorruptIndexError(f"index files of segment {self.log_path.name} are missing")
        self.offset_index.sanity_check(self._size, full=full)
        self.time_index.sanity_check(self._size, full=full)
        last = self.time_index.last_entry
        if self.time_index.entries and last.offset < self.base_offset:
            raise CorruptIndexError(f"time index of {self.log_path.name} is corrupt")
        self.txn_index.sanity_check()

    def set_active(self, active: bool) -> None:
        """Make this the active segment (its `.log` held open, its indexes pinned in memory) or
        an inactive one (fd and index entries left to the process-wide caches)."""
        if self._closed:
            raise StorageError(f"segment {self.log_path} is closed")
        if active != self._active:
            if active:
                with self._fd_lock:
                    self._acquire_fd_locked()
                    OPEN_FILES.remove(self)
                    self._active = True
            else:
                self._active = False
                if self._fd >= 0:
                    OPEN_FILES.add(self, 1)
        self.offset_index.set_active(active)
        self.time_index.set_active(active)

    @property
    def active(self) -> bool:
        return self._active

    @property
    def has_open_fd(self) -> bool:
        return self._fd >= 0

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # -- properties ---------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the `.log` file."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def _load_max_timestamp(self) -> TimestampOffset:
        if self._max_ts_and_offset is None:
            self._max_ts_and_offset = self.time_index.last_entry
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._load_max_timestamp().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._load_max_timestamp().offset

    @property
    def last_modified_ms(self) -> int:
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """Max batch timestamp in the segment, or the file's mtime if it has none (retention)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    # -- file I/O -----------------------------------------------------------------------

    def _acquire_fd_locked(self) -> int:
        """The `.log` fd, opened if the cache closed it (caller holds `_fd_lock`)."""
        fd = self._fd
        if fd >= 0:
            self._cache_referenced = True
            return fd
        if self._closed:
            raise StorageError(f"segment {self.log_path} is closed")
        fd = os.open(self.log_path, os.O_RDWR)
        self._fd = fd
        OPEN_FILES.add(self, 1)
        return fd

    def _try_evict(self) -> bool:
        # Called by OPEN_FILES under its lock; never blocks.
        if self._active or not self._fd_lock.acquire(blocking=False):
            return False
        try:
            if self._fd >= 0 and not self._active:
                os.close(self._fd)
                self._fd = -1
        finally:
            self._fd_lock.release()
        return True

    @contextlib.contextmanager
    def _file(self) -> Iterator[int]:
        """The `.log` fd for one operation (not for the hot paths, which inline this)."""
        if self._active:
            yield self._fd
            return
        with self._fd_lock:
            yield self._acquire_fd_locked()

    def _pread(self, position: int, size: int) -> bytes:
        if self._active:
            return _pread_all(self._fd, position, size)
        with self._fd_lock:
            return _pread_all(self._acquire_fd_locked(), position, size)

    def _pwrite(self, data: _Buffer, position: int) -> None:
        if self._active:
            _pwrite_all(self._fd, data, position)
            return
        with self._file() as fd:
            _pwrite_all(fd, data, position)

    def read_bytes(self, position: int, size: int) -> bytes:
        """Raw bytes of the `.log` file (clamped to the segment size)."""
        size = max(0, min(size, self._size - position))
        return self._pread(position, size) if size else b""

    def iter_batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of complete batches in [start, end); headers not validated
        beyond framing (RecordError for an invalid header). Stops at a torn tail."""
        for pos, header, _ in self._scan(start_position, end_position, with_data=False):
            yield pos, header

    def scan_positions(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[BatchPosition]:
        """Fast walk over batch framing: (base offset, last offset, position, size) of each
        complete batch in [start, end). Raises CorruptRecordError on a bad length or magic."""
        end = self._size if end_position is None else min(end_position, self._size)
        pos = start_position
        while end - pos >= BATCH_HEADER_SIZE:
            buf = self._pread(pos, min(_SCAN_CHUNK_BYTES, end - pos))
            avail = len(buf)
            rel = 0
            while avail - rel >= BATCH_HEADER_SIZE:
                base, length = _OFFSET_AND_LENGTH.unpack_from(buf, rel)
                if length < _MIN_BATCH_LENGTH or buf[rel + 16] != 2:
                    raise CorruptRecordError(
                        f"invalid batch framing at position {pos + rel} of {self.log_path.name}"
                    )
                size = length + LOG_OVERHEAD
                if pos + rel + size > end:
                    return
                (delta,) = INT32.unpack_from(buf, rel + 23)
                yield BatchPosition(base, base + delta, pos + rel, size)
                rel += size
            pos += rel

    def _scan(
        self, start: int, end: int | None, *, with_data: bool
    ) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
        end = self._size if end is None else min(end, self._size)
        pos = start
        chunk_size = _RECOVER_CHUNK_BYTES if with_data else _SCAN_CHUNK_BYTES
        while end - pos >= BATCH_HEADER_SIZE:
            buf = self._pread(pos, min(chunk_size, end - pos))
            view = memoryview(buf)
            consumed = 0
            for rel, header in iter_batches(buf):
                size = header.size_in_bytes
                yield pos + rel, header, (view[rel : rel + size] if with_data else None)
                consumed = rel + size
            if consumed == 0:
                # The batch at `pos` is bigger than the chunk (or torn).
                header = parse_header(buf, 0)
                size = header.size_in_bytes
                if pos + size > end:
                    return
                data = memoryview(self._pread(pos, size)) if with_data else None
                yield pos, header, data
                consumed = size
            pos += consumed

    # -- append -------------------------------------------------------------------------

    def append(self, data: _Buffer, batches: Sequence[tuple[int, BatchHeader]]) -> None:
        """Append offset-assigned batches; `batches` are (position in data, header) of each.

        Adds an offset/time index entry whenever more than index.interval.bytes were written
        since the last one.
        """
        if not batches:
            return
        last = batches[-1][1]
        last_offset = last.base_offset + last.last_offset_delta
        if not 0 <= last_offset - self.base_offset <= _INT32_MAX:
            raise LogOffsetError(
                f"offset {last_offset} cannot be appended to segment with base offset "
                f"{self.base_offset}"
            )
        physical = self._size
        if physical == 0:
            self._rolling_based_timestamp = max(h.max_timestamp for _, h in batches)
        max_so_far = self._max_ts_and_offset or self._load_max_timestamp()
        since_entry = self._bytes_since_last_index_entry
        tail = self._tail
        for rel, header in batches:
            header_last = header.base_offset + header.last_offset_delta
            size = header.batch_length + LOG_OVERHEAD
            tail[header.base_offset] = BatchPosition(header.base_offset, header_last,
                                                     physical + rel, size)
            if header.max_timestamp > max_so_far.timestamp:
                max_so_far = TimestampOffset(header.max_timestamp, header_last)
            if since_entry > self.index_interval_bytes:
                if not self.offset_index.is_full:
                    self.offset_index.append(header_last, physical + rel)
                if not self.time_index.is_full:
                    self.time_index.maybe_append(max_so_far.timestamp, max_so_far.offset)
                since_entry = 0
            since_entry += size
        while len(tail) > _TAIL_BATCHES:
            del tail[next(iter(tail))]
        self._bytes_since_last_index_entry = since_entry
        self._max_ts_and_offset = max_so_far
        try:
            if self._active:  # `_pwrite`, its common case inlined
                _pwrite_all(self._fd, data, physical)
            else:
                self._pwrite(data, physical)
        except BaseException:
            tail.clear()  # positions of batches that are not in the file
            raise
        self._size = physical + len(data)

    # -- lookups ------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset >= `offset` (None if the segment ends before)."""
        recent = self._tail.get(offset)
        if recent is not None and recent.position >= starting_position:
            return recent
        position = max(self.offset_index.lookup(offset).position, starting_position)
        for batch in self.scan_positions(position):
            if batch.last_offset >= offset:
                return batch
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> bytes | None:
        """Whole batches from the batch containing `start_offset`, at most `max_size` bytes
        (but at least the first batch if `min_one_message`), not past `max_position`.

        None if the segment has no batch with an offset >= `start_offset`.
        """
        span = self._read_span(start_offset, max_size, max_position, min_one_message)
        if span is None or span[1] <= 0:
            return None if span is None else b""
        position, fetch_size, limit = span
        data = self._pread(position, fetch_size)
        if position + fetch_size == limit:
            return data  # the segment end and max_position are batch boundaries
        # Cut after the last whole batch; start scanning at an indexed batch near the end.
        hint = self.offset_index.lookup_position(position + fetch_size)
        first = hint - position if hint is not None and hint > position else 0
        end = _whole_batches_end(data, first)
        return data if end == len(data) else data[:end]

    def read_region(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FileRegion | bytes | None:
        """`read`, as a `FileRegion` of the same bytes (b"" when there are none): only the
        batch headers near the cut are read, the records stay in the file."""
        span = self._read_span(start_offset, max_size, max_position, min_one_message)
        if span is None or span[1] <= 0:
            return None if span is None else b""
        if self._active:
            return self._region(self._fd, *span)
        with self._fd_lock:
            return self._region(self._acquire_fd_locked(), *span)

    def _read_span(
        self, start_offset: int, max_size: int, max_position: int | None, min_one_message: bool
    ) -> tuple[int, int, int] | None:
        """(position, size, limit) of the bytes a read of `start_offset` covers before the cut
        after the last whole batch (size <= 0: none); None if no batch has an offset >= it."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size}")
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        limit = self._size if max_position is None else min(max_position, self._size)
        wanted = max(max_size, start.size) if min_one_message else max_size
        return start.position, min(limit - start.position, wanted), limit

    def _region(self, fd: int, position: int, size: int, limit: int) -> FileRegion | bytes:
        end = position + size
        if end != limit:  # cut after the last whole batch
            end = self._whole_batches_end_in_file(fd, position, end)
        return FileRegion.of(fd, position, end - position) if end > position else b""

    def _whole_batches_end_in_file(self, fd: int, start: int, end: int) -> int:
        """`_whole_batches_end` of the file bytes [start, end), reading batch headers only
        (from an indexed batch near the end)."""
        hint = self.offset_index.lookup_position(end)
        pos = hint if hint is not None and hint > start else start
        while end - pos >= LOG_OVERHEAD:
            head = os.pread(fd, LOG_OVERHEAD, pos)
            if len(head) < LOG_OVERHEAD:
                break
            (length,) = INT32.unpack_from(head, 8)
            batch_end = pos + LOG_OVERHEAD + length
            if length < _MIN_BATCH_LENGTH or batch_end > end:
                break
            pos = batch_end
        return pos

    def read_next_offset(self) -> int:
        """The offset after the last batch (base offset if empty)."""
        next_offset = self.base_offset
        for batch in self.scan_positions(self.offset_index.last_entry.position):
            next_offset = batch.last_offset + 1
        return next_offset

    def first_batch_header(self) -> BatchHeader | None:
        for _, header in self.iter_batches(0):
            return header
        return None

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> TimestampOffset | None:
        """The first record with timestamp >= `timestamp` and offset >= `starting_offset`."""
        start = self.base_offset if starting_offset is None else starting_offset
        ts_entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_entry.offset, start)).position
        for pos, header in self.iter_batches(position):
            if header.max_timestamp < timestamp or header.last_offset < start:
                continue
            batch = self.read_bytes(pos, header.size_in_bytes)
            try:
                for record in iter_records(batch):
                    if record.timestamp >= timestamp and record.offset >= start:
                        return TimestampOffset(record.timestamp, record.offset)
            except RecordError as exc:
                log.warning("cannot decode batch at %d of %s: %s", pos, self.log_path, exc)
                return TimestampOffset(header.max_timestamp, max(header.base_offset, start))
        return None

    # -- roll ---------------------------------------------------------------------------

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            first = self.first_batch_header()
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Time this segment has been 'open', by message timestamps when known (Kafka)."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's LogSegment.shouldRoll: full by size, old by time, indexes full, offset range."""
        size = self._size
        return (
            size > params.max_segment_bytes - params.messages_size
            or not 0 <= params.max_offset_in_messages - self.base_offset <= _INT32_MAX
            or (
                size > 0
                and self.time_waited_for_roll(params.now_ms, params.max_timestamp_in_messages)
                > params.max_segment_ms - self.roll_jitter_ms
            )
            or self.offset_index.is_full
            or self.time_index.is_full
        )

    def on_become_inactive(self) -> None:
        """Write the final time index entry, trim the indexes and write them to their files
        (not fsynced: the flush that moves the recovery point past this segment does that),
        then hand the fd and the indexes to the caches (segment was rolled)."""
        ts = self._load_max_timestamp()
        if ts.timestamp >= 0:
            self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.write_indexes()
        self.set_active(False)
        self._tail.clear()

    def write_indexes(self) -> None:
        """Write changed index entries to the index files (page cache, no fsync)."""
        for index in self._opened_indexes():
            index.write()

    # -- recovery / truncation ----------------------------------------------------------

    def recover(
        self,
        *,
        on_batch: Callable[[BatchHeader], None] | None = None,
        start_offset: int | None = None,
    ) -> int:
        """Rebuild the indexes from the data, validating every batch (framing, magic, CRC,
        offsets); truncate at the first invalid or torn batch. Returns bytes truncated."""
        self.offset_index.reset()
        self.time_index.reset()
        self._tail.clear()
        max_ts = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        valid_bytes = 0
        last_index_entry = 0
        expected = self.base_offset if start_offset is None else start_offset
        try:
            for pos, header, data in self._scan(0, None, with_data=True):
                assert data is not None
                if not crc_ok(data, 0, header):
                    raise CorruptRecordError(f"CRC mismatch for batch at position {pos}")
                if (
                    header.last_offset_delta < 0
                    or header.base_offset < expected
                    or not self.can_convert_to_relative_offset(header.last_offset)
                ):
                    raise CorruptRecordError(
                        f"batch at position {pos} has offsets {header.base_offset}.."
                        f"{header.last_offset}, expected >= {expected}"
                    )
                if header.max_timestamp > max_ts.timestamp:
                    max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
                if valid_bytes - last_index_entry > self.index_interval_bytes:
                    if not self.offset_index.is_full:
                        self.offset_index.append(header.last_offset, valid_bytes)
                    if not self.time_index.is_full:
                        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                    last_index_entry = valid_bytes
                valid_bytes += header.size_in_bytes
                expected = header.next_offset
                if on_batch is not None:
                    on_batch(header)
        except RecordError as exc:
            log.warning(
                "found invalid batch in %s at position %d: %s", self.log_path, valid_bytes, exc
            )
        truncated = self._size - valid_bytes
        if truncated > 0:
            log.warning(
                "truncating %s from %d to %d bytes (%d invalid bytes)",
                self.log_path,
                self._size,
                valid_bytes,
                truncated,
            )
            with self._file() as fd:
                os.ftruncate(fd, valid_bytes)
            self._size = valid_bytes
        self._bytes_since_last_index_entry = valid_bytes - last_index_entry
        self._max_ts_and_offset = max_ts
        self._rolling_based_timestamp = None
        if max_ts.timestamp >= 0:
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        # Rebuilt indexes go to their files now (so an inactive segment's can be evicted).
        self.write_indexes()
        self._index_files_existed = True
        return truncated

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> int:
        """Remove the batch containing `offset` and everything after; returns bytes removed."""
        mapping = self.translate_offset(offset)
        cut_offset = offset if mapping is None else mapping.base_offset
        self.offset_index.truncate_to(cut_offset)
        self.time_index.truncate_to(cut_offset)
        self.txn_index.truncate_to(cut_offset)
        self.resize_indexes(self.max_index_bytes)
        truncated = 0
        if mapping is not None:
            truncated = self._size - mapping.position
            with self._file() as fd:
                os.ftruncate(fd, mapping.position)
            self._size = mapping.position
        if self._size == 0:
            if now_ms is not None:
                self.created_ms = now_ms
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._max_ts_and_offset = None
        self._tail.clear()
        return truncated

    # -- lifecycle ----------------------------------------------------------------------

    def claim_sync(self) -> list[Path]:
        """Write the indexes; the files to fsync: the `.log` and the index files with unsynced
        writes (the caller opens and fsyncs them without holding the log's lock; on failure it
        calls `sync_failed`)."""
        paths = [self.log_path]
        for index in (*self._opened_indexes(), self.txn_index):
            path = index.claim_sync()
            if path is not None:
                paths.append(path)
        return paths

    def sync_failed(self, claimed: Collection[Path] | None = None) -> None:
        """An fsync of `claim_sync`'s files failed: the index files among `claimed` (default:
        all) still need one."""
        for index in (*self._opened_indexes(), self.txn_index):
            if claimed is None or index.path in claimed:
                index.sync_failed()

    def flush(self) -> None:
        """fsync the data; write and fsync the indexes."""
        with self._file() as fd:
            os.fsync(fd)
        for index in self._opened_indexes():
            index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Write the final time index entry, write the indexes, release the fd and the
        memory."""
        if self._closed:
            return
        try:
            ts = self._max_ts_and_offset
            if ts is not None and ts.timestamp >= 0:
                self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        finally:
            try:
                for index in self._opened_indexes():
                    index.close()
            finally:
                self._release_fd()

    def release(self) -> None:
        """Release the fd without writing the indexes (its log dir went offline)."""
        if not self._closed:
            self._release_fd()

    def _release_fd(self) -> None:
        with self._fd_lock:
            self._closed = True
            self._active = False
            OPEN_FILES.remove(self)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files, e.g. ("", ".deleted")."""
        if self._suffix != old_suffix:
            raise ValueError(f"segment suffix is {self._suffix!r}, not {old_suffix!r}")

        def renamed(path: Path) -> Path:
            stem = path.name[: len(path.name) - len(old_suffix)] if old_suffix else path.name
            return path.with_name(stem + new_suffix)

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for attr, index in (
            ("index_path", self._offset_index),
            ("time_index_path", self._time_index),
        ):
            path: Path = getattr(self, attr)
            new_path = renamed(path)
            if index is not None and not index.closed:
                index.rename_to(new_path)
            elif path.exists():
                os.replace(path, new_path)
            setattr(self, attr, new_path)
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self._suffix = new_suffix

    def relocate(self, new_dir: Path) -> None:
        """The partition directory was renamed to `new_dir`: follow it (files opened or
        written later are found there)."""
        self.dir = Path(new_dir)
        self.log_path = self.dir / self.log_path.name
        self.index_path = self.dir / self.index_path.name
        self.time_index_path = self.dir / self.time_index_path.name
        self.txn_index.path = self.dir / self.txn_index.path.name
        if self._offset_index is not None:
            self._offset_index.path = self.index_path
        if self._time_index is not None:
            self._time_index.path = self.time_index_path

    def files(self) -> list[Path]:
        files = [self.log_path, self.index_path, self.time_index_path]
        if self.txn_index.path.exists():  # created by the first aborted transaction
            files.append(self.txn_index.path)
        return files

    def delete(self) -> None:
        """Close and remove the segment's files."""
        for index in self._opened_indexes():
            index.delete()
        if not self._closed:
            self._release_fd()
        for path in self.files():
            path.unlink(missing_ok=True)
        self.txn_index.delete()
