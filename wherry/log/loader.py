"""Opening a partition log (Kafka 3.9's LogLoader).

Loading a partition directory: leftover temporary files are removed, segment replacements
(log compaction) interrupted by a crash are completed, the segments are opened and those that
need it recovered: after an unclean shutdown every segment from the one containing the recovery
point on is re-validated batch by batch (length, magic, CRC, offsets), the log is truncated at
the first invalid batch and the indexes are rebuilt; a segment whose index files are missing or
fail the sanity check is rebuilt in any case. Then the log start and end offsets are settled,
the leader epoch cache is trimmed to them and producer state is rebuilt: loaded from the latest
snapshot at or below the log end offset, the rest replayed from the segments (the log also
rebuilds it so after a truncation).
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from wherry.common.topic_partition import TopicPartition
from wherry.log.checkpoint import fsync_dir
from wherry.log.config import LogConfig
from wherry.log.errors import CorruptIndexError
from wherry.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from wherry.log.producer_state import ProducerStateManager, read_marker
from wherry.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    offset_from_file_name,
    segment_file_name,
)
from wherry.log.segments import (
    CLEANED_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    LogSegments,
    open_segment,
)
from wherry.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from wherry.protocol.records import BatchHeader, RecordError

__all__ = ["LoadedLog", "LogLoader", "rebuild_producer_state"]

# The partition log's parts log under the name the log has always used (wherry.log.log).
log = logging.getLogger("wherry.log.log")

_TEMP_SUFFIXES = (DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """A loaded partition log: its parts and the offsets it starts from."""

    segments: LogSegments
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochCache
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    high_watermark: int


def rebuild_producer_state(
    producer_state: ProducerStateManager,
    segments: LogSegments,
    *,
    log_start_offset: int,
    log_end_offset: int,
    now_ms: int | None,
    rebuild_txn_index_from: int | None = None,
) -> None:
    """Load the latest snapshot <= `log_end_offset` and replay batches from there to it.

    With `rebuild_txn_index_from` (the base offset of the first recovered segment) the
    aborted-transaction indexes of the segments from there on are rebuilt by the replay,
    which then starts from a snapshot at or below that offset."""
    if rebuild_txn_index_from is not None:
        for segment in segments.segments_from(rebuild_txn_index_from):
            if segment.base_offset >= rebuild_txn_index_from:
                segment.txn_index.reset()
    producer_state.truncate_and_reload(
        log_start_offset, log_end_offset, now_ms, load_at_or_below=rebuild_txn_index_from
    )
    start = producer_state.map_end_offset
    if start < log_end_offset:
        replayed = 0
        for segment, pos, header in segments.iter_batch_positions_from(start):
            if header.base_offset < start:
                continue
            marker = None
            if header.is_control and header.has_producer_id:
                marker = read_marker(segment.read_bytes(pos, header.size_in_bytes))
            completed = producer_state.update(header, marker=marker)
            replayed += 1
            if (
                completed is not None
                and completed.is_aborted
                and rebuild_txn_index_from is not None
                and segment.base_offset >= rebuild_txn_index_from
            ):
                segment.txn_index.append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        producer_state.last_stable_offset_after(completed),
                    )
                )
        log.info(
            "%s: rebuilt producer state from offset %d (%d batches replayed)",
            segments.topic_partition,
            start,
            replayed,
        )
    producer_state.update_map_end_offset(log_end_offset)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLoader:
    """Loads the log in one partition directory (created if missing): the parameters of
    `Log.open`, then `load`."""

    dir: Path
    config: LogConfig
    topic_partition: TopicPartition
    recovery_point: int
    log_start_offset: int
    now_ms: int
    had_clean_shutdown: bool
    high_watermark: int | None
    producer_id_expiration_ms: int

    def load(self) -> LoadedLog:
        dir, config, tp = self.dir, self.config, self.topic_partition
        dir.mkdir(parents=True, exist_ok=True)
        self._remove_temp_files()
        self._complete_swaps()
        leader_epochs = LeaderEpochCache(dir / LEADER_EPOCH_CHECKPOINT)

        segments = self._load_segments()
        recovered_from = self._recover_segments(segments, leader_epochs)
        last_end: int | None = None
        if segments:
            last_end = self._next_offset_of(segments[-1])
            if self.log_start_offset > last_end:
                log.warning(
                    "%s: log start offset %d is beyond the log end offset %d; deleting all "
                    "segments",
                    tp,
                    self.log_start_offset,
                    last_end,
                )
                for segment in segments:
                    segment.delete()
                segments = []
                last_end = None
        if not segments:
            segments.append(
                open_segment(dir, config, self.log_start_offset, now_ms=self.now_ms, jitter=True)
            )
        active = segments[-1]
        active.set_active(True)
        active.resize_indexes(config.segment_index_bytes)
        log_end_offset = last_end if last_end is not None else self._next_offset_of(active)
        start = min(max(self.log_start_offset, segments[0].base_offset), log_end_offset)
        recovery = (
            log_end_offset
            if self.had_clean_shutdown
            else min(self.recovery_point, log_end_offset)
        )
        leader_epochs.truncate_from_end(log_end_offset)
        leader_epochs.truncate_from_start(start)

        producer_state = ProducerStateManager(
            dir, producer_id_expiration_ms=self.producer_id_expiration_ms
        )
        hw = start if self.high_watermark is None else self.high_watermark
        loaded = LoadedLog(
            segments=LogSegments(
                dir, config, topic_partition=tp, producer_state=producer_state, segments=segments
            ),
            producer_state=producer_state,
            leader_epoch_cache=leader_epochs,
            log_start_offset=start,
            log_end_offset=log_end_offset,
            recovery_point=recovery,
            high_watermark=min(max(hw, start), log_end_offset),
        )
        rebuild_producer_state(
            producer_state,
            loaded.segments,
            log_start_offset=start,
            log_end_offset=log_end_offset,
            now_ms=self.now_ms,
            rebuild_txn_index_from=recovered_from,
        )
        producer_state.remove_stray_snapshots([s.base_offset for s in segments])
        log.info(
            "%s: loaded log with %d segments, log start %d, log end %d, recovery point %d",
            tp,
            len(segments),
            start,
            log_end_offset,
            recovery,
        )
        return loaded

    def _next_offset_of(self, segment: LogSegment) -> int:
        try:
            return segment.read_next_offset()
        except RecordError as exc:
            # Only after a "clean" shutdown whose files were damaged afterwards.
            log.warning(
                "%s: invalid data at the end of the log (%s); recovering", self.topic_partition, exc
            )
            segment.recover()
            segment.resize_indexes(segment.max_index_bytes)
            return segment.read_next_offset()

    def _remove_temp_files(self) -> None:
        for name in os.listdir(self.dir):
            if name.endswith(_TEMP_SUFFIXES) and (path := self.dir / name).is_file():
                log.info("deleting leftover file %s", path)
                path.unlink(missing_ok=True)

    def _complete_swaps(self) -> None:
        """Finish replacements (log compaction) interrupted by a crash (Kafka's LogLoader rule).

        A `<base>.log.swap` was fully written and fsynced before it got that name, so it is
        recovered (indexes rebuilt), every segment whose base offset lies in
        [its base offset, its next offset) is deleted (the segments it replaces, some perhaps
        already gone) and the swap file is renamed into place. Index swap files are dropped:
        the indexes are rebuilt from the data.
        """
        dir, tp = self.dir, self.topic_partition
        swaps: list[int] = []
        for name in os.listdir(dir):
            if not name.endswith(SWAP_SUFFIX):
                continue
            if name.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX):
                continue  # moved into place with its segment below (not rebuilt from data)
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                try:
                    swaps.append(offset_from_file_name(name))
                    continue
                except ValueError:
                    pass
            log.info("%s: deleting index swap file %s", tp, dir / name)
            (dir / name).unlink(missing_ok=True)
        if not swaps:
            return
        ranges: list[tuple[int, int]] = []
        for base in sorted(swaps):
            segment = open_segment(dir, self.config, base, now_ms=self.now_ms, suffix=SWAP_SUFFIX)
            try:
                segment.recover()
                ranges.append((base, segment.read_next_offset()))
            finally:
                segment.close()
        for name in os.listdir(dir):
            if name.endswith(SWAP_SUFFIX) or not name.endswith(SEGMENT_SUFFIXES):
                continue
            try:
                offset = offset_from_file_name(name)
            except ValueError:
                continue
            if any(lo <= offset < max(hi, lo + 1) for lo, hi in ranges):
                log.info("%s: deleting %s, replaced by a swap segment", tp, dir / name)
                (dir / name).unlink(missing_ok=True)
        for base, _ in ranges:
            for suffix in SEGMENT_SUFFIXES:
                swap = dir / segment_file_name(base, suffix + SWAP_SUFFIX)
                if swap.exists():
                    os.replace(swap, dir / segment_file_name(base, suffix))
            log.info("%s: completed the swap of segment %d", tp, base)
        fsync_dir(dir)

    def _load_segments(self) -> list[LogSegment]:
        dir = self.dir
        log_offsets: set[int] = set()
        index_files: list[tuple[int, str]] = []
        for name in os.listdir(dir):
            try:
                if name.endswith(LOG_SUFFIX):
                    log_offsets.add(offset_from_file_name(name))
                elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
                    index_files.append((offset_from_file_name(name), name))
            except ValueError:
                log.warning("ignoring unexpected file %s", dir / name)
        for offset, name in index_files:
            if offset not in log_offsets:
                log.warning("deleting orphaned index file %s", dir / name)
                (dir / name).unlink(missing_ok=True)
        return [
            open_segment(dir, self.config, offset, now_ms=self.now_ms)
            for offset in sorted(log_offsets)
        ]

    def _recover_segments(
        self, segments: list[LogSegment], leader_epochs: LeaderEpochCache
    ) -> int | None:
        """Recover (in place) the segments that need it; drop those after a truncation.
        Returns the base offset of the first recovered segment (None if none was): the
        aborted-transaction indexes are rebuilt from there."""
        recovered_from: int | None = None
        tp, had_clean_shutdown = self.topic_partition, self.had_clean_shutdown
        first_unflushed = len(segments)
        if not had_clean_shutdown:
            bases = [s.base_offset for s in segments]
            first_unflushed = max(0, bisect.bisect_right(bases, self.recovery_point) - 1)

        def assign_epoch(header: BatchHeader) -> None:
            epoch = header.partition_leader_epoch
            latest = leader_epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                leader_epochs.assign(epoch, header.base_offset)

        i = 0
        while i < len(segments):
            segment = segments[i]
            need = i >= first_unflushed
            if not need:
                try:
                    segment.sanity_check(full=not had_clean_shutdown)
                except CorruptIndexError as exc:
                    log.warning("%s: %s; rebuilding its indexes", tp, exc)
                    need = True
            if need:
                if recovered_from is None:
                    recovered_from = segment.base_offset
                log.info("%s: recovering segment %d", tp, segment.base_offset)
                truncated = segment.recover(on_batch=assign_epoch)
                if truncated > 0 and i + 1 < len(segments):
                    for later in segments[i + 1 :]:
                        log.warning(
                            "%s: deleting segment %d after corruption", tp, later.base_offset
                        )
                        later.delete()
                    del segments[i + 1 :]
            i += 1
        return recovered_from
