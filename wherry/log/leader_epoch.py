"""Leader epoch cache of a partition (`leader-epoch-checkpoint`): epoch -> start offset.

Follows Kafka 3.9's LeaderEpochFileCache: entries have strictly increasing epochs and start
offsets; assigning a new epoch drops any entry that would break that order; the file is
rewritten (atomically) whenever the entries change.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import NamedTuple

from wherry.log.checkpoint import CheckpointError, read_int_pairs, write_int_pairs

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochCache",
]

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch start offsets of one partition, persisted in `<dir>/leader-epoch-checkpoint`."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: list[EpochEntry] = []
        self._unsynced = False
        self._write_lock = threading.Lock()
        if path is not None:
            try:
                pairs = read_int_pairs(path)
            except CheckpointError as exc:
                log.warning("ignoring corrupt leader epoch checkpoint %s: %s", path, exc)
                pairs = []
            for epoch, start in pairs:
                self._assign(EpochEntry(epoch, start))

    # -- queries ------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range contains `offset`."""
        found: int | None = None
        for entry in self._entries:
            if entry.start_offset <= offset:
                found = entry.epoch
            else:
                break
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch answer: (largest epoch <= requested, its end offset).

        Returns (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when unknown.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for entry in self._entries:
            if entry.epoch <= requested_epoch:
                floor = entry
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    # -- updates ------------------------------------------------------------------------

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        latest = self.latest_entry
        if (
            latest is not None
            and latest.epoch == entry.epoch
            and latest.start_offset <= entry.start_offset
        ):
            return False
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed = self._entries.pop()
            log.debug("removing leader epoch entry %s superseded by %s", removed, entry)
        self._entries.append(entry)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op if already known). The file is
        written (and fsynced) only at the log's next flush or close (`sync`), not at once:
        an epoch starts at the log end, beyond the recovery point, and recovery rebuilds the
        entries of the batches beyond it from the batches themselves (Kafka since
        KAFKA-15046 no longer fsyncs here either). A leader election moving thousands of
        partitions does not write thousands of files."""
        if self._assign(EpochEntry(epoch, start_offset)):
            self._unsynced = True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (log truncated to `end_offset`)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before `start_offset`, moving the one containing it up to it."""
        removed = [e for e in self._entries if e.start_offset <= start_offset]
        if not removed:
            return
        kept = [e for e in self._entries if e.start_offset > start_offset]
        entries = [EpochEntry(removed[-1].epoch, start_offset), *kept]
        if entries != self._entries:
            self._entries = entries
            self.flush()

    def clear(self) -> None:
        self._entries = []
        self.flush()

    def flush(self) -> None:
        if self.path is not None:
            with self._write_lock:  # the log's flush may run on another thread
                self._unsynced = False
                write_int_pairs(self.path, list(self._entries))

    def sync(self) -> None:
        """Write what `assign` left in memory, durably (before the recovery point moves)."""
        if self._unsynced:
            self.flush()
