"""Retention of one partition log (Kafka 3.9's UnifiedLog.deleteOldSegments and
maybeIncrementLogStartOffset).

`LogRetention` owns the log start offset. DeleteRecords moves it up (never past the high
watermark); a retention pass deletes the oldest segments that lie wholly below it, then (with
cleanup.policy=delete) those beyond retention.bytes and those whose newest timestamp is older
than retention.ms, and moves it up to the first remaining segment. Only segments wholly below
the high watermark go; if every segment would, the active one is rolled first so the log keeps
one (empty) segment.

It takes no lock and reads the high watermark and log end offset it is given: the owning `Log`
calls it under its lock and raises its recovery point and high watermark after deletions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from wherry.log.errors import OffsetOutOfRangeError
from wherry.log.leader_epoch import LeaderEpochCache
from wherry.log.producer_state import ProducerStateManager
from wherry.log.segment import LogSegment
from wherry.log.segments import LogSegments

__all__ = ["LogRetention", "RetentionBounds"]

# The partition log's parts log under the name the log has always used (wherry.log.log).
log = logging.getLogger("wherry.log.log")


class RetentionBounds(NamedTuple):
    """The log's offsets a retention pass works within (read under the log's lock)."""

    high_watermark: int  # only segments wholly below it are deleted
    log_end_offset: int  # where a roll starts the new active segment


_Predicate = Callable[[LogSegment, LogSegment | None], bool]  # (segment, the next one)


def _oldest_adding_up_to(excess: int) -> _Predicate:
    """A predicate true for the oldest segments as long as their sizes add up to `excess`
    at most (asked about each segment once, oldest first)."""

    def predicate(segment: LogSegment, upcoming: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return predicate


class LogRetention:
    """The log start offset of a partition log and the deletion of segments below it or
    beyond the retention limits."""

    def __init__(
        self,
        segments: LogSegments,
        *,
        leader_epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        log_start_offset: int,
    ) -> None:
        self._segments = segments
        self._leader_epochs = leader_epoch_cache
        self._producer_state = producer_state
        self._log_start_offset = log_start_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    def truncated_to(self, log_end_offset: int) -> None:
        """The log was truncated to `log_end_offset`: the start offset stays at or below it."""
        self._log_start_offset = min(self._log_start_offset, log_end_offset)

    def reset_to(self, offset: int) -> None:
        """The log restarted empty at `offset`."""
        self._log_start_offset = offset

    def maybe_increment_log_start_offset(
        self, new_log_start_offset: int, *, high_watermark: int, reason: str
    ) -> bool:
        """Move the start offset up to `new_log_start_offset` (at most `high_watermark`, else
        OffsetOutOfRangeError); True if it moved."""
        if new_log_start_offset > high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {new_log_start_offset} of "
                f"partition {self._segments.topic_partition} since it is larger than the high "
                f"watermark {high_watermark}"
            )
        if new_log_start_offset <= self._log_start_offset:
            return False
        log.info(
            "%s: incrementing log start offset to %d (%s)",
            self._segments.topic_partition,
            new_log_start_offset,
            reason or "requested",
        )
        self._log_start_offset = new_log_start_offset
        self._leader_epochs.truncate_from_start(new_log_start_offset)
        return True

    # ----------------------------------------------------------------------------------
    # Retention passes: each returns how many segments it deleted
    # ----------------------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int, bounds: RetentionBounds) -> int:
        """Every pass the cleanup policy calls for (`Log.delete_old_segments` then purges the
        due *.deleted files, without the log's lock)."""
        deleted = self.delete_log_start_offset_breached_segments(now_ms, bounds)
        if self._segments.config.delete:
            deleted += self.delete_retention_size_breached_segments(now_ms, bounds)
            deleted += self.delete_retention_ms_breached_segments(now_ms, bounds)
        return deleted

    def delete_log_start_offset_breached_segments(
        self, now_ms: int, bounds: RetentionBounds
    ) -> int:
        def below_log_start(segment: LogSegment, upcoming: LogSegment | None) -> bool:
            return upcoming is not None and upcoming.base_offset <= self._log_start_offset

        return self._delete(below_log_start, now_ms, bounds, "log start offset")

    def delete_retention_size_breached_segments(self, now_ms: int, bounds: RetentionBounds) -> int:
        limit = self._segments.config.retention_bytes
        size = self._segments.size_in_bytes
        if limit < 0 or size < limit:
            return 0
        return self._delete(_oldest_adding_up_to(size - limit), now_ms, bounds, "retention.bytes")

    def delete_retention_ms_breached_segments(self, now_ms: int, bounds: RetentionBounds) -> int:
        retention_ms = self._segments.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete(
            lambda segment, _next: now_ms - segment.largest_timestamp > retention_ms,
            now_ms,
            bounds,
            "retention.ms",
        )

    def _deletable_segments(
        self, predicate: _Predicate, bounds: RetentionBounds
    ) -> list[LogSegment]:
        """The oldest segments, as long as `predicate` holds and each lies wholly below the
        high watermark (an empty active segment never qualifies)."""
        deletable: list[LogSegment] = []
        segments = self._segments.as_list()
        for i, segment in enumerate(segments):
            upcoming = segments[i + 1] if i + 1 < len(segments) else None
            upper = upcoming.base_offset if upcoming is not None else bounds.log_end_offset
            last_and_empty = upcoming is None and segment.size == 0
            if (
                bounds.high_watermark >= upper
                and predicate(segment, upcoming)
                and not last_and_empty
            ):
                deletable.append(segment)
            else:
                break
        return deletable

    def _delete(
        self, predicate: _Predicate, now_ms: int, bounds: RetentionBounds, reason: str
    ) -> int:
        deletable = self._deletable_segments(predicate, bounds)
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            new_active = self._segments.roll(bounds.log_end_offset, now_ms)
            if deletable[-1] is new_active:
                deletable = deletable[:-1]
        count = len(deletable)
        self._segments.delete_oldest(count, now_ms, reason)
        first = self._segments.first.base_offset
        self._producer_state.delete_snapshots_below(first)
        if first > self._log_start_offset:
            self._log_start_offset = first
            self._leader_epochs.truncate_from_start(first)
        return count
