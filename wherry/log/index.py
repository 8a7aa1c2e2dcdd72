"""Sparse offset index (`.index`) and time index (`.timeindex`) files of a log segment.

Both are arrays of fixed-size big-endian entries, memory-mapped. A writable (active) index is
preallocated to `segment.index.bytes` (rounded down to a whole number of entries) and trimmed
to its entries when the segment becomes inactive or is closed.

* offset index entry (8 bytes):  relative offset int32, file position int32
* time index entry (12 bytes):   timestamp int64, relative offset int32

Entries are strictly increasing (offsets / timestamps), so lookups are binary searches. A file
left preallocated by a crash ends in zero entries; on open those are told apart from real ones
(a real offset-index entry never has relative offset 0 and a real time-index entry after the
first has a timestamp > 0) and ignored. Truncation zeroes the dropped entries so this holds.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar, NamedTuple

from wherry.log.errors import CorruptIndexError, LogOffsetError

__all__ = ["OffsetIndex", "OffsetPosition", "TimeIndex", "TimestampOffset"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1


class OffsetPosition(NamedTuple):
    """An absolute offset and the file position of the batch that contains or follows it."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A timestamp and the absolute offset of the record (batch) that has it."""

    timestamp: int
    offset: int


class _Index:
    """Common mmap handling for both index kinds."""

    ENTRY_SIZE: ClassVar[int]
    _ZERO_FIRST_ENTRY_VALID: ClassVar[bool]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._mm: mmap.mmap | None = None
        self._misaligned = False
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(self._fd).st_size
            newly_created = length == 0
            if newly_created:
                length = self._round_down(max_index_size)
                os.ftruncate(self._fd, length)
            elif length % self.ENTRY_SIZE:
                self._misaligned = True
            self._map(length)
            self._entries = 0 if newly_created else self._count_entries()
        except BaseException:
            self._unmap()
            os.close(self._fd)
            raise

    # -- mapping ------------------------------------------------------------------------

    def _round_down(self, size: int) -> int:
        return max(0, size - size % self.ENTRY_SIZE)

    def _map(self, length: int) -> None:
        self._length = length
        self._max_entries = length // self.ENTRY_SIZE
        self._mm = mmap.mmap(self._fd, length) if length > 0 else None

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _is_zero_entry(self, slot: int) -> bool:
        assert self._mm is not None
        start = slot * self.ENTRY_SIZE
        return self._mm[start : start + self.ENTRY_SIZE] == bytes(self.ENTRY_SIZE)

    def _count_entries(self) -> int:
        """Entries in an existing file: all slots, minus a zero tail left by preallocation."""
        slots = self._max_entries
        if slots == 0 or not self._is_zero_entry(slots - 1):
            return slots
        lo = 1 if self._ZERO_FIRST_ENTRY_VALID else 0
        if lo >= slots:
            return slots
        hi = slots - 1  # known zero; find the first zero slot in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._is_zero_entry(mid):
                hi = mid
            else:
                lo = mid + 1
        if lo == 1 and self._ZERO_FIRST_ENTRY_VALID and self._is_zero_entry(0):
            return 0  # an all-zero preallocated file: no entries
        return lo

    # -- properties ---------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def size_in_bytes(self) -> int:
        """Bytes of valid entries."""
        return self._entries * self.ENTRY_SIZE

    @property
    def file_size(self) -> int:
        return self._length

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise LogOffsetError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset} "
                f"in {self.path.name}"
            )
        return rel

    # -- maintenance --------------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Remap the file to `new_size` (rounded down, never below the entries); True if changed."""
        rounded = max(self._round_down(new_size), self.size_in_bytes)
        if rounded == self._length and not self._misaligned:
            return False
        self._unmap()
        os.ftruncate(self._fd, rounded)
        self._misaligned = False
        self._map(rounded)
        return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (done when the segment goes inactive)."""
        self.resize(self.size_in_bytes)

    def _truncate_to_entries(self, entries: int) -> None:
        if entries < self._entries and self._mm is not None:
            start, end = entries * self.ENTRY_SIZE, self._entries * self.ENTRY_SIZE
            self._mm[start:end] = bytes(end - start)
        self._entries = entries

    def reset(self) -> None:
        """Drop all entries and make room for a full index again."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        """Trim to the valid entries and release the file."""
        if self._fd < 0:
            return
        try:
            self.trim_to_valid_size()
        finally:
            self._unmap()
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = Path(path)

    def delete(self) -> None:
        """Close (without trimming) and remove the file if present."""
        if self._fd >= 0:
            self._unmap()
            os.close(self._fd)
            self._fd = -1
        self.path.unlink(missing_ok=True)

    def _check_alignment(self) -> None:
        if self._misaligned:
            raise CorruptIndexError(
                f"index file {self.path.name} has size {self._length}, not a multiple of "
                f"{self.ENTRY_SIZE}"
            )


class OffsetIndex(_Index):
    """Maps (sparse) offsets of a segment to file positions."""

    ENTRY_SIZE = 8
    _ZERO_FIRST_ENTRY_VALID = False
    _ENTRY = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_index_size: int = 10 * 1024 * 1024):
        super().__init__(path, base_offset, max_index_size)

    def entry(self, slot: int) -> OffsetPosition:
        if not 0 <= slot < self._entries:
            raise IndexError(f"slot {slot} out of range [0, {self._entries})")
        assert self._mm is not None
        rel, position = self._ENTRY.unpack_from(self._mm, slot * 8)
        return OffsetPosition(self.base_offset + rel, position)

    def _rel(self, slot: int) -> int:
        assert self._mm is not None
        return int(self._ENTRY.unpack_from(self._mm, slot * 8)[0])

    @property
    def last_entry(self) -> OffsetPosition:
        if self._entries == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(self._entries - 1)

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def _largest_lower_bound(self, rel_target: int) -> int:
        """Slot of the largest relative offset <= rel_target, or -1."""
        if self._entries == 0 or self._rel(0) > rel_target:
            return -1
        lo, hi = 0, self._entries - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._rel(mid) <= rel_target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= target, else (base_offset, 0)."""
        slot = self._largest_lower_bound(target_offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def lookup_position(self, position: int) -> int | None:
        """The largest indexed batch position <= `position` (None if there is none)."""
        if self._entries == 0:
            return None
        assert self._mm is not None
        unpack = self._ENTRY.unpack_from
        mm = self._mm
        if unpack(mm, 0)[1] > position:
            return None
        lo, hi = 0, self._entries - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if unpack(mm, mid * 8)[1] <= position:
                lo = mid
            else:
                hi = mid - 1
        return int(unpack(mm, lo * 8)[1])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase."""
        rel = self._relative(offset)
        if self._entries and rel <= self._rel(self._entries - 1):
            raise LogOffsetError(
                f"attempt to append offset {offset} to index {self.path.name} whose last "
                f"offset is {self.last_offset}"
            )
        if self.is_full:
            raise LogOffsetError(f"attempt to append to a full index {self.path.name}")
        assert self._mm is not None
        self._ENTRY.pack_into(self._mm, self._entries * 8, rel, position)
        self._entries += 1

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        slot = self._largest_lower_bound(offset - self.base_offset)
        if slot < 0:
            keep = 0
        elif self._rel(slot) == offset - self.base_offset:
            keep = slot
        else:
            keep = slot + 1
        self._truncate_to_entries(keep)

    def sanity_check(self, log_size: int | None = None, *, full: bool = False) -> None:
        """Raise CorruptIndexError if the index cannot belong to a log of `log_size` bytes."""
        self._check_alignment()
        if self._entries == 0:
            return
        slots = range(self._entries) if full else (self._entries - 1,)
        prev_rel, prev_pos = 0, 0
        for slot in slots:
            rel, pos = self.entry(slot)
            rel -= self.base_offset
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

    def __init__(self, path: Path, base_offset: int, max_index_size: int = 10 * 1024 * 1024):
        super().__init__(path, base_offset, max_index_size)

    @property
    def is_full(self) -> bool:
        # One slot is kept for the final entry written when the segment goes inactive.
        return self._entries >= self._max_entries - 1

    def entry(self, slot: int) -> TimestampOffset:
        if not 0 <= slot < self._entries:
            raise IndexError(f"slot {slot} out of range [0, {self._entries})")
        assert self._mm is not None
        ts, rel = self._ENTRY.unpack_from(self._mm, slot * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def _ts(self, slot: int) -> int:
        assert self._mm is not None
        return int(self._ENTRY.unpack_from(self._mm, slot * 12)[0])

    @property
    def last_entry(self) -> TimestampOffset:
        if self._entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(self._entries - 1)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target, else (-1, base_offset)."""
        if self._entries == 0 or self._ts(0) > target_timestamp:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        lo, hi = 0, self._entries - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._ts(mid) <= target_timestamp:
                lo = mid
            else:
                hi = mid - 1
        return self.entry(lo)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp is larger than the last entry's; True if added.

        `skip_full_check` uses the reserved last slot (final entry of an inactive segment).
        """
        if not skip_full_check and self.is_full:
            raise LogOffsetError(f"attempt to append to a full time index {self.path.name}")
        last = self.last_entry
        if self._entries and offset < last.offset:
            raise LogOffsetError(
                f"attempt to append offset {offset} to time index {self.path.name} whose last "
                f"offset is {last.offset}"
            )
        if self._entries and timestamp < last.timestamp:
            raise LogOffsetError(
                f"attempt to append timestamp {timestamp} to time index {self.path.name} whose "
                f"last timestamp is {last.timestamp}"
            )
        if timestamp <= last.timestamp:
            return False
        rel = self._relative(offset)
        if self._entries >= self._max_entries:
            self.resize(self._length + self.ENTRY_SIZE)
        assert self._mm is not None
        self._ENTRY.pack_into(self._mm, self._entries * 12, timestamp, rel)
        self._entries += 1
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        lo, hi = 0, self._entries  # first slot whose offset >= target
        while lo < hi:
            mid = (lo + hi) // 2
            if self.entry(mid).offset < offset:
                lo = mid + 1
            else:
                hi = mid
        self._truncate_to_entries(lo)

    def sanity_check(self, log_size: int | None = None, *, full: bool = False) -> None:
        """Raise CorruptIndexError on misalignment or non-monotonic entries."""
        del log_size
        self._check_alignment()
        if self._entries == 0:
            return
        first, last = self.entry(0), self.entry(self._entries - 1)
        if last.timestamp < first.timestamp or last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index {self.path.name}: last entry {last} vs first {first}, "
                f"base offset {self.base_offset}"
            )
        if full:
            prev = first
            for slot in range(1, self._entries):
                cur = self.entry(slot)
                if cur.timestamp <= prev.timestamp or cur.offset < prev.offset:
                    raise CorruptIndexError(
                        f"corrupt time index {self.path.name}: entry {slot} {cur} after {prev}"
                    )
                prev = cur
