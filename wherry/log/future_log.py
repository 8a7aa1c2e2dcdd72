"""Copying a partition's current log into its future log (AlterReplicaLogDirs), Kafka's
ReplicaAlterLogDirsThread without the fetch protocol: both logs are on this broker.

A future log lives in the destination log dir as `<topic>-<partition>.<uuid>-future`
(`dir_names.future_dir_name`). It is filled from the current log's end of what it already
holds, batch by batch as a follower appends them (offsets, leader epochs and producer state
follow the batches), while the current log keeps serving. Before each step the future is
lined up with the current log, as a follower is with its leader: below the current log start
it starts over there; past the current log end, or past where the current log's leader epochs
say the two diverge (the current log was truncated meanwhile), it is truncated.

Blocking file I/O; the caller decides where it runs (an executor). `LogManager` promotes a
caught-up future log (`promote_future_log`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from wherry.log.log import Log

__all__ = ["CopyStep", "align", "copy_step"]


class CopyStep(NamedTuple):
    """One copy step: the bytes appended to the future log, and whether they reached the
    current log's end as it was when they were read (what arrived since is left for the
    promotion, which copies it under the log's lock)."""

    copied: int
    caught_up: bool


def align(current: Log, future: Log) -> None:
    """Line `future` up with `current` (call holding `current.lock`)."""
    start = current.log_start_offset
    if future.log_end_offset < start:
        future.truncate_fully_and_start_at(start)
        return
    if future.log_end_offset > current.log_end_offset:
        future.truncate_to(current.log_end_offset)
    epoch = future.latest_epoch
    if epoch is None or current.latest_epoch is None:
        return
    current_epoch, end = current.end_offset_for_epoch(epoch)
    if current_epoch < 0:
        # The current log no longer knows the future's epoch: start over at its log start.
        future.truncate_fully_and_start_at(start)
    elif end < future.log_end_offset:
        future.truncate_to(end)


def copy_step(current: Log, future: Log, *, max_bytes: int) -> CopyStep:
    """Copy the next batches (at most about `max_bytes`, at least one) from `current` into
    `future`. A step that copied less than `max_bytes` has not necessarily caught up: the
    next batch may just not fit."""
    with current.lock:
        align(current, future)
        offset = future.log_end_offset
        end = current.log_end_offset
        if offset >= end:
            return CopyStep(0, True)
        data = current.read(offset, max_bytes=max_bytes)
    # Appended outside the current log's lock: its own appends are not held up by this write.
    from wherry.protocol.records import iter_batches  # with the Log, after the bind

    skip = 0
    for pos, header in iter_batches(data):
        if header.last_offset >= offset:
            if header.base_offset < offset:
                # Batch boundaries differ (compaction rewrote the current log's batches):
                # drop the future's overlapping tail and take the batch whole.
                future.truncate_to(header.base_offset)
            skip = pos
            break
    else:
        return CopyStep(0, future.log_end_offset >= end)
    chunk = memoryview(data)[skip:]
    future.append_as_follower(chunk)
    return CopyStep(len(chunk), future.log_end_offset >= end)
