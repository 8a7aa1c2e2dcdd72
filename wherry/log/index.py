"""Sparse offset index (`.index`) and time index (`.timeindex`) of a log segment.

Both are arrays of fixed-size big-endian entries, the same bytes in memory as on disk:

* offset index entry (8 bytes):  relative offset int32, file position int32
* time index entry (12 bytes):   timestamp int64, relative offset int32

Entries are strictly increasing (offsets / timestamps), so lookups are binary searches.

No file descriptor is held: an index lives in memory (a `bytearray` of exactly its entries) and
its file is written with one open/pwrite/close when the segment is flushed, rolled or closed
(`write`, and `write(fsync=True)` for a flush). The index of the active segment is pinned in
memory (`set_active`); an inactive one is loaded on first use with one read of the file and kept
in the process-wide LRU `wherry.log.cache.INDEXES`, which drops it again under memory pressure
(it is reloaded on the next lookup). Indexes with changes not yet written are never dropped.

The file may lag the entries in memory until the next write, so after a crash an index can hold
fewer entries than its log would produce; Kafka's recovery rules cover that: segments from the
one containing the recovery point onward are rebuilt, and a flush writes and fsyncs the indexes
of the segments it covers before the recovery point moves past them.

A capacity (`max_entries`, from `segment.index.bytes`) bounds the entries of the active index
as Kafka's preallocated file does; the file itself always holds just the entries. Files written
preallocated (older versions, or Kafka) may end in zero entries; on load those are told apart
from real ones (a real offset-index entry never has relative offset 0 and a real time-index
entry after the first has a timestamp > 0) and ignored.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, NamedTuple

from wherry.log.cache import INDEXES
from wherry.log.checkpoint import read_file
from wherry.log.errors import CorruptIndexError, LogOffsetError

__all__ = ["OffsetIndex", "OffsetPosition", "TimeIndex", "TimestampOffset"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1
# What a cached index costs beyond its entries (objects, bookkeeping), for the LRU's byte bound.
_CACHE_OVERHEAD_BYTES = 256


class OffsetPosition(NamedTuple):
    """An absolute offset and the file position of the batch that contains or follows it."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A timestamp and the absolute offset of the record (batch) that has it."""

    timestamp: int
    offset: int


def _read_file(path: Path) -> bytes | None:
    """The whole file (one open, pread until done, close); None if it does not exist."""
    try:
        return read_file(path)
    except FileNotFoundError:
        return None


def _pwrite_all(fd: int, data: bytes | bytearray, position: int) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.pwrite(fd, view, position)
            view = view[written:]
            position += written
    finally:
        view.release()


class _Index:
    """In-memory entries, lazy loading, cache membership and file writes of both kinds.

    Not thread-safe by itself (the owning Log serialises use), except against eviction by the
    cache from other threads: `_buf` may be dropped at any time while the index is clean and
    not active, so readers take one local reference and use it throughout.
    """

    ENTRY_SIZE: ClassVar[int]
    _ZERO_FIRST_ENTRY_VALID: ClassVar[bool]
    _ENTRY: ClassVar[struct.Struct]

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int = 10 * 1024 * 1024
    ) -> None:
        self.path = path if isinstance(path, Path) else Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._buf: bytearray | None = None  # exactly the valid entries, when loaded
        self._entries = -1  # unknown until probed or loaded; kept when the buffer is dropped
        self._max_entries = -1
        self._misaligned = False
        self._file_bytes = -1  # file length as last seen or written; -1 unknown or missing
        self._disk_bytes = 0  # prefix of _buf known to be in the file
        self._unsynced = False  # written since the last fsync (and that matters, see below)
        # Whether the file on disk may hold entries. An index that is empty and never had any
        # entries on disk needs no fsync: after a power loss its file is empty or missing, and a
        # missing one only makes the next start rebuild the segment's indexes.
        self._disk_may_have_entries = False
        self._probed_entries: dict[int, bytes] = {}  # first/last entry read by _probe
        self._cache_referenced = False  # see wherry.log.cache
        # Both guarded by INDEXES.lock: an index in either state is never evicted.
        self._active = False
        self._dirty = False
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name}, entries={self._entries})"

    # -- loading ------------------------------------------------------------------------

    def _round_down(self, size: int) -> int:
        return max(0, size - size % self.ENTRY_SIZE)

    def _set_layout(self, file_length: int, entries: int) -> None:
        """Entry count and capacity of a freshly read file (as Kafka sizes an opened index:
        an empty or missing file gets the full capacity, an existing one its length)."""
        size = self.ENTRY_SIZE
        self._entries = entries
        self._misaligned = file_length % size != 0
        if file_length > 0:
            self._max_entries = file_length // size
        else:
            self._max_entries = self._round_down(self.max_index_size) // size

    def _probe(self) -> None:
        """Learn the entry count from the file's length and last slot, without loading it
        (the whole file is read only if that slot is zero: a preallocated tail)."""
        if self._entries >= 0:
            return
        size = self.ENTRY_SIZE
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._file_bytes = -1
            self._set_layout(0, 0)
            return
        try:
            length = os.fstat(fd).st_size
            slots = length // size
            last = os.pread(fd, size, (slots - 1) * size) if slots else b""
            first = os.pread(fd, size, 0) if slots > 1 else last
        finally:
            os.close(fd)
        if slots and last == bytes(size):
            self._load()
            return
        if len(first) == size and len(last) == size:
            self._probed_entries = {0: first, slots - 1: last}
        self._file_bytes = length
        self._disk_may_have_entries = length > 0
        self._set_layout(length, slots)

    def assume_empty_file(self) -> None:
        """The file was just created empty (a new segment): no need to look at it."""
        if self._entries < 0:
            self._file_bytes = 0
            self._set_layout(0, 0)

    def _is_zero_entry(self, data: bytes, slot: int) -> bool:
        start = slot * self.ENTRY_SIZE
        return data[start : start + self.ENTRY_SIZE] == bytes(self.ENTRY_SIZE)

    def _count_entries(self, data: bytes, slots: int) -> int:
        """Entries in file data: all slots, minus a zero tail left by preallocation."""
        if slots == 0 or not self._is_zero_entry(data, slots - 1):
            return slots
        lo = 1 if self._ZERO_FIRST_ENTRY_VALID else 0
        if lo >= slots:
            return slots
        hi = slots - 1  # known zero; find the first zero slot in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._is_zero_entry(data, mid):
                hi = mid
            else:
                lo = mid + 1
        if lo == 1 and self._ZERO_FIRST_ENTRY_VALID and self._is_zero_entry(data, 0):
            return 0  # an all-zero preallocated file: no entries
        return lo

    def _load(self) -> bytearray:
        """Read the file into memory (and into the cache unless active or dirty)."""
        data = _read_file(self.path)
        file_bytes = -1 if data is None else len(data)
        raw = data or b""
        slots = len(raw) // self.ENTRY_SIZE
        if self._entries < 0:
            self._set_layout(len(raw), self._count_entries(raw, slots))
        else:
            self._entries = min(self._entries, slots)
        buf = bytearray(raw)
        del buf[self._entries * self.ENTRY_SIZE :]
        self._probed_entries = {}
        self._file_bytes = file_bytes
        self._disk_bytes = len(buf)
        self._disk_may_have_entries = file_bytes > 0
        with INDEXES.lock:
            self._buf = buf
            if not (self._active or self._dirty or self._closed):
                INDEXES.add_locked(self, len(buf) + _CACHE_OVERHEAD_BYTES)
        return buf

    def _data(self) -> bytearray:
        """The entries for reading (loaded if needed); keep the returned reference."""
        buf = self._buf
        if buf is None:
            return self._load()
        self._cache_referenced = True
        return buf

    def _writable(self) -> bytearray:
        """The entries for changing: pinned in memory until the next `write`."""
        if not self._dirty:
            with INDEXES.lock:
                self._dirty = True
                INDEXES.remove_locked(self)
            self._probed_entries = {}
        buf = self._buf
        return buf if buf is not None else self._load()

    def _try_evict(self) -> bool:
        # Under INDEXES.lock (see wherry.log.cache).
        if self._active or self._dirty:
            return False
        self._buf = None
        return True

    def _raw_entry(self, slot: int) -> bytes | bytearray:
        """The bytes of one entry: from memory if loaded, else read from the file alone."""
        size = self.ENTRY_SIZE
        buf = self._buf
        if buf is None:
            probed = self._probed_entries.get(slot)
            if probed is not None:
                return probed
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    data = os.pread(fd, size, slot * size)
                finally:
                    os.close(fd)
                if len(data) == size:
                    return data
            buf = self._data()
        return buf[slot * size : (slot + 1) * size]

    # -- properties ---------------------------------------------------------------------

    @property
    def entries(self) -> int:
        if self._entries < 0:
            self._probe()
        return self._entries

    @property
    def max_entries(self) -> int:
        if self._entries < 0:
            self._probe()
        return self._max_entries

    @property
    def is_full(self) -> bool:
        if self._entries < 0:  # `entries`, inlined
            self._probe()
        return self._entries >= self._max_entries

    @property
    def size_in_bytes(self) -> int:
        """Bytes of valid entries."""
        return self.entries * self.ENTRY_SIZE

    @property
    def loaded(self) -> bool:
        """Whether the entries are in memory right now."""
        return self._buf is not None

    @property
    def active(self) -> bool:
        return self._active

    @property
    def closed(self) -> bool:
        return self._closed

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise LogOffsetError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset} "
                f"in {self.path.name}"
            )
        return rel

    # -- state --------------------------------------------------------------------------

    def set_active(self, active: bool) -> None:
        """Pin the index in memory (the active segment's) or hand it to the cache."""
        with INDEXES.lock:
            self._active = active
            if active:
                INDEXES.remove_locked(self)
            elif self._buf is not None and not (self._dirty or self._closed):
                INDEXES.add_locked(self, len(self._buf) + _CACHE_OVERHEAD_BYTES)

    def resize(self, new_size: int) -> bool:
        """Set the capacity to `new_size` bytes (rounded down, never below the entries); True if
        changed. A misaligned file is cut to its whole entries by the next write."""
        entries = self.entries
        new_max = max(self._round_down(new_size) // self.ENTRY_SIZE, entries)
        if new_max == self._max_entries and not self._misaligned:
            return False
        if self._misaligned:
            self._writable()
            self._misaligned = False
        self._max_entries = new_max
        return True

    def trim_to_valid_size(self) -> None:
        """Shrink the capacity to the entries (done when the segment goes inactive)."""
        self.resize(self.size_in_bytes)

    def _truncate_to_entries(self, entries: int) -> None:
        if entries < self.entries:
            buf = self._writable()
            del buf[entries * self.ENTRY_SIZE :]
            self._disk_bytes = min(self._disk_bytes, len(buf))
            self._entries = entries

    def reset(self) -> None:
        """Drop all entries and make room for a full index again."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    # -- persistence --------------------------------------------------------------------

    @property
    def needs_write(self) -> bool:
        """Whether the file differs from the entries in memory."""
        buf = self._buf
        return buf is not None and (self._disk_bytes < len(buf) or self._file_bytes != len(buf))

    @property
    def needs_sync(self) -> bool:
        """Whether a flush would fsync the file (it has writes not yet fsynced, or differs
        from memory)."""
        buf = self._buf
        if self.needs_write:
            return self._disk_may_have_entries or (buf is not None and len(buf) > 0)
        return self._unsynced

    def write(self, *, fsync: bool = False) -> bool:
        """Bring the file up to date with the entries (creating it if missing): the entries
        after the part already written, then the length. With `fsync`, also make it durable.
        True if anything was written."""
        buf = self._buf
        written = False
        if buf is not None and self.needs_write:
            n = len(buf)
            if n > 0:
                self._disk_may_have_entries = True
            sync_now = fsync and self._disk_may_have_entries
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if self._disk_bytes < n:
                    _pwrite_all(fd, buf[self._disk_bytes : n], self._disk_bytes)
                if self._file_bytes != n:
                    os.ftruncate(fd, n)
                if sync_now:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self._disk_bytes = self._file_bytes = n
            if sync_now:
                self._unsynced = False
                self._disk_may_have_entries = n > 0
            else:
                self._unsynced = self._disk_may_have_entries
            written = True
        elif fsync and self._unsynced:
            self._fsync_file()
        if self._dirty:
            with INDEXES.lock:
                self._dirty = False
                if buf is not None and not (self._active or self._closed):
                    INDEXES.add_locked(self, len(buf) + _CACHE_OVERHEAD_BYTES)
        return written

    def _fsync_file(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False
        self._disk_may_have_entries = self._file_bytes > 0

    def claim_sync(self) -> Path | None:
        """Write the file, and return its path if it has unsynced writes (None if it has
        none): the caller opens and fsyncs it outside the log's lock, and calls `sync_failed`
        if that fails."""
        self.write()
        if not self._unsynced:
            return None
        self._unsynced = False
        self._disk_may_have_entries = self._file_bytes > 0
        return self.path

    def sync_failed(self) -> None:
        self._unsynced = True

    def flush(self) -> None:
        """Write and fsync the file."""
        self.write(fsync=True)

    def close(self) -> None:
        """Write the file (it exists afterwards) and release the entries."""
        if self._closed:
            return
        if self._buf is not None:
            self.write()
        elif self._file_bytes < 0:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
        with INDEXES.lock:
            self._closed = True
            self._dirty = False
            INDEXES.remove_locked(self)
            self._buf = None

    def rename_to(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):  # never written
            os.replace(self.path, path)
        self.path = Path(path)

    def delete(self) -> None:
        """Release the entries (unwritten changes are dropped) and remove the file."""
        with INDEXES.lock:
            self._closed = True
            self._dirty = False
            INDEXES.remove_locked(self)
            self._buf = None
        self.path.unlink(missing_ok=True)

    def _check_alignment(self) -> None:
        self._probe()
        if self._misaligned:
            raise CorruptIndexError(
                f"index file {self.path.name} has size {self._file_bytes}, not a multiple of "
                f"{self.ENTRY_SIZE}"
            )


class OffsetIndex(_Index):
    """Maps (sparse) offsets of a segment to file positions."""

    ENTRY_SIZE = 8
    _ZERO_FIRST_ENTRY_VALID = False
    _ENTRY = struct.Struct(">ii")

    def entry(self, slot: int) -> OffsetPosition:
        if not 0 <= slot < self.entries:
            raise IndexError(f"slot {slot} out of range [0, {self._entries})")
        rel, position = self._ENTRY.unpack_from(self._raw_entry(slot))
        return OffsetPosition(self.base_offset + rel, position)

    @property
    def last_entry(self) -> OffsetPosition:
        n = self.entries
        if n == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(n - 1)

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def _last_slot_at_most(self, buf: bytearray, field: int, target: int) -> int:
        """Slot of the last entry whose ``field`` (0: relative offset, 1: position; both
        increase along the index) is <= ``target``, or -1."""
        unpack = self._ENTRY.unpack_from
        n = len(buf) >> 3
        if n == 0 or unpack(buf, 0)[field] > target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buf, mid << 3)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _largest_lower_bound(self, buf: bytearray, rel_target: int) -> int:
        """Slot of the largest relative offset <= rel_target, or -1."""
        return self._last_slot_at_most(buf, 0, rel_target)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= target, else (base_offset, 0)."""
        buf = self._data()
        slot = self._largest_lower_bound(buf, target_offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        rel, position = self._ENTRY.unpack_from(buf, slot << 3)
        return OffsetPosition(self.base_offset + rel, position)

    def lookup_position(self, position: int) -> int | None:
        """The largest indexed batch position <= `position` (None if there is none)."""
        buf = self._data()
        slot = self._last_slot_at_most(buf, 1, position)
        return None if slot < 0 else int(self._ENTRY.unpack_from(buf, slot << 3)[1])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase."""
        rel = self._relative(offset)
        buf = self._writable()
        n = self._entries
        if n and rel <= self._ENTRY.unpack_from(buf, (n - 1) << 3)[0]:
            raise LogOffsetError(
                f"attempt to append offset {offset} to index {self.path.name} whose last "
                f"offset is {self.last_offset}"
            )
        if n >= self._max_entries:
            raise LogOffsetError(f"attempt to append to a full index {self.path.name}")
        buf += self._ENTRY.pack(rel, position)
        self._entries = n + 1

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        rel = offset - self.base_offset
        buf = self._data()
        slot = self._largest_lower_bound(buf, rel)
        if slot < 0:
            keep = 0
        elif self._ENTRY.unpack_from(buf, slot << 3)[0] == rel:
            keep = slot
        else:
            keep = slot + 1
        self._truncate_to_entries(keep)

    def sanity_check(self, log_size: int | None = None, *, full: bool = False) -> None:
        """Raise CorruptIndexError if the index cannot belong to a log of `log_size` bytes.

        Without `full` only the last entry is read (the file is not loaded)."""
        self._check_alignment()
        n = self.entries
        if n == 0:
            return
        entries: Iterable[tuple[int, tuple[int, int]]]
        if full:
            # a copy: an iterator over the buffer would pin it (no resizing while it lives)
            entries = enumerate(self._ENTRY.iter_unpack(bytes(self._data())))
        else:
            entries = [(n - 1, self._ENTRY.unpack_from(self._raw_entry(n - 1)))]
        prev_rel, prev_pos = 0, 0
        for slot, (rel, pos) in entries:
            if rel <= 0 or pos <= 0 or (full and (rel <= prev_rel or pos < prev_pos)):
                raise CorruptIndexError(
                    f"corrupt offset index {self.path.name}: entry {slot} is "
                    f"({rel + self.base_offset}, {pos}) after ({prev_rel + self.base_offset}, "
                    f"{prev_pos}), base offset {self.base_offset}"
                )
            if log_size is not None and pos >= log_size:
                raise CorruptIndexError(
                    f"corrupt offset index {self.path.name}: entry {slot} points at position "
                    f"{pos} beyond the log size {log_size}"
                )
            prev_rel, prev_pos = rel, pos


class TimeIndex(_Index):
    """Maps increasing max-timestamps seen so far to the offset that first reached them."""

    ENTRY_SIZE = 12
    _ZERO_FIRST_ENTRY_VALID = True
    _ENTRY = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        # One slot is kept for the final entry written when the segment goes inactive.
        if self._entries < 0:  # `entries`, inlined
            self._probe()
        return self._entries >= self._max_entries - 1

    def entry(self, slot: int) -> TimestampOffset:
        if not 0 <= slot < self.entries:
            raise IndexError(f"slot {slot} out of range [0, {self._entries})")
        ts, rel = self._ENTRY.unpack_from(self._raw_entry(slot))
        return TimestampOffset(ts, self.base_offset + rel)

    @property
    def last_entry(self) -> TimestampOffset:
        n = self.entries
        if n == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(n - 1)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target, else (-1, base_offset)."""
        buf = self._data()
        unpack = self._ENTRY.unpack_from
        n = len(buf) // 12
        if n == 0 or unpack(buf, 0)[0] > target_timestamp:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buf, mid * 12)[0] <= target_timestamp:
                lo = mid
            else:
                hi = mid - 1
        ts, rel = unpack(buf, lo * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp is larger than the last entry's; True if added.

        `skip_full_check` uses the reserved last slot (final entry of an inactive segment).
        """
        if not skip_full_check and self.is_full:
            raise LogOffsetError(f"attempt to append to a full time index {self.path.name}")
        last = self.last_entry
        n = self._entries
        if n and offset < last.offset:
            raise LogOffsetError(
                f"attempt to append offset {offset} to time index {self.path.name} whose last "
                f"offset is {last.offset}"
            )
        if n and timestamp < last.timestamp:
            raise LogOffsetError(
                f"attempt to append timestamp {timestamp} to time index {self.path.name} whose "
                f"last timestamp is {last.timestamp}"
            )
        if timestamp <= last.timestamp:
            return False
        rel = self._relative(offset)
        buf = self._writable()
        buf += self._ENTRY.pack(timestamp, rel)
        self._entries = n + 1
        if self._entries > self._max_entries:
            self._max_entries = self._entries
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        buf = self._data()
        unpack = self._ENTRY.unpack_from
        rel = offset - self.base_offset
        lo, hi = 0, len(buf) // 12  # first slot whose offset >= target
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack(buf, mid * 12)[1] < rel:
                lo = mid + 1
            else:
                hi = mid
        self._truncate_to_entries(lo)

    def sanity_check(self, log_size: int | None = None, *, full: bool = False) -> None:
        """Raise CorruptIndexError on misalignment or non-monotonic entries.

        Without `full` only the first and last entries are read (the file is not loaded)."""
        del log_size
        self._check_alignment()
        n = self.entries
        if n == 0:
            return
        first, last = self.entry(0), self.entry(n - 1)
        if last.timestamp < first.timestamp or last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index {self.path.name}: last entry {last} vs first {first}, "
                f"base offset {self.base_offset}"
            )
        if full:
            prev = first
            for slot, (ts, rel) in enumerate(self._ENTRY.iter_unpack(bytes(self._data()))):
                if slot == 0:
                    continue
                cur = TimestampOffset(ts, self.base_offset + rel)
                if cur.timestamp <= prev.timestamp or cur.offset < prev.offset:
                    raise CorruptIndexError(
                        f"corrupt time index {self.path.name}: entry {slot} {cur} after {prev}"
                    )
                prev = cur
