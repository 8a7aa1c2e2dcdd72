"""Process-wide bounds on what inactive log segments keep open or in memory.

A partition holds one file descriptor in steady state: its active segment's `.log`. Everything
else is opened or loaded on demand and kept in one of two least-recently-used caches:

* `OPEN_FILES`: `.log` descriptors of inactive segments (count-bounded, default 256);
* `INDEXES`: loaded offset/time indexes of inactive segments (bounded by bytes, default 32 MiB).

An item leaves a cache when it is evicted (its fd closed / its entries dropped, to be reopened
or reloaded on the next use), when it becomes active again, or when its segment is closed.
Eviction runs under the cache's lock and calls the item's `_try_evict()`, which must not block:
an item that is in use (a read in progress holds its fd lock) or pinned refuses, and the cache
moves on to the next least recently used one (so the bound may be exceeded briefly).

Recency is kept the CLOCK way, so that a use costs no lock: a use sets the item's
`_cache_referenced` flag, and eviction gives a flagged item a second chance (clears the flag and
moves it to the young end) instead of evicting it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

__all__ = [
    "DEFAULT_INDEX_CACHE_BYTES",
    "DEFAULT_MAX_OPEN_SEGMENT_FILES",
    "INDEXES",
    "OPEN_FILES",
    "Evictable",
    "LruCache",
    "configure",
]

DEFAULT_MAX_OPEN_SEGMENT_FILES = 256
DEFAULT_INDEX_CACHE_BYTES = 32 * 1024 * 1024


class Evictable(Protocol):
    _cache_referenced: bool  # set on every use (lock-free), cleared by the cache

    def _try_evict(self) -> bool:
        """Release the cached resource; False if it is in use. Called under the cache lock."""
        ...


class LruCache:
    """A bounded LRU of items with a cost each (1 per fd, bytes per index)."""

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"{name} cache capacity must be positive, got {capacity}")
        self.name = name
        self._capacity = capacity
        self.lock = threading.Lock()
        self._items: OrderedDict[Evictable, int] = OrderedDict()
        self._total = 0
        self.evictions = 0

    def __repr__(self) -> str:
        return f"LruCache({self.name}, {len(self._items)} items, {self._total}/{self._capacity})"

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        if value < 1:
            raise ValueError(f"{self.name} cache capacity must be positive, got {value}")
        with self.lock:
            self._capacity = value
            self._evict_locked(None)

    @property
    def total_cost(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: Evictable) -> bool:
        return item in self._items

    # -- under the lock -----------------------------------------------------------------

    def add_locked(self, item: Evictable, cost: int) -> None:
        """Insert (or refresh) `item` as the most recently used; evict beyond the capacity."""
        old = self._items.pop(item, None)
        if old is not None:
            self._total -= old
        self._items[item] = cost
        self._total += cost
        item._cache_referenced = False
        if self._total > self._capacity:
            self._evict_locked(item)

    def remove_locked(self, item: Evictable) -> None:
        cost = self._items.pop(item, None)
        if cost is not None:
            self._total -= cost

    def _evict_locked(self, keep: Evictable | None) -> None:
        # Oldest first; an item used since it was last looked at, in use, or `keep` goes to the
        # young end instead. Two rounds at most: the first clears the flags.
        attempts = 2 * len(self._items)
        while self._total > self._capacity and attempts > 0:
            attempts -= 1
            candidate = next(iter(self._items))
            if candidate._cache_referenced or candidate is keep:
                candidate._cache_referenced = False
                self._items.move_to_end(candidate)
            elif candidate._try_evict():
                self._total -= self._items.pop(candidate)
                self.evictions += 1
            else:
                self._items.move_to_end(candidate)

    # -- locking wrappers ---------------------------------------------------------------

    def add(self, item: Evictable, cost: int) -> None:
        with self.lock:
            self.add_locked(item, cost)

    @staticmethod
    def touch(item: Evictable) -> None:
        """Mark `item` used (no lock; callers on hot paths set the flag themselves)."""
        item._cache_referenced = True

    def remove(self, item: Evictable) -> None:
        with self.lock:
            self.remove_locked(item)

    def clear(self) -> int:
        """Evict everything that can be evicted; returns how many items remain."""
        with self.lock:
            for candidate in list(self._items):
                if candidate._try_evict():
                    self._total -= self._items.pop(candidate)
                    self.evictions += 1
            return len(self._items)


OPEN_FILES = LruCache("open segment files", DEFAULT_MAX_OPEN_SEGMENT_FILES)
INDEXES = LruCache("segment indexes", DEFAULT_INDEX_CACHE_BYTES)


def configure(
    *, max_open_segment_files: int | None = None, index_cache_bytes: int | None = None
) -> None:
    """Change the bounds of the process-wide caches (evicting at once if they shrink)."""
    if max_open_segment_files is not None:
        OPEN_FILES.capacity = max_open_segment_files
    if index_cache_bytes is not None:
        INDEXES.capacity = index_cache_bytes
