"""Idempotent-producer state of one partition (Kafka 3.9's ProducerStateManager).

For every producer id the partition remembers the producer epoch and the metadata of its last
five batches (sequence range, offset range, timestamp). A client append is checked against it:

* epoch older than the current one -> InvalidProducerEpochError (fenced);
* a retry of one of the last five batches (same epoch, same first and last sequence) ->
  DuplicateBatch: the log answers with the original offsets and writes nothing;
* a new epoch must start at sequence 0 (unless the producer had no epoch yet);
* within an epoch the first sequence must follow the last one (with wrap-around) unless the
  producer is unknown; a gap or an older duplicate -> OutOfOrderSequenceError.

State is snapshotted to `<offset:020d>.snapshot` files (state of all batches below `offset`) in
this module's own binary format protected by a CRC32C; the log rebuilds the rest by replaying.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wherry.common.crc32c import crc32c
from wherry.common.fsync import fsync_path
from wherry.log.checkpoint import atomic_write, fsync_dir, read_file
from wherry.log.config import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from wherry.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from wherry.protocol.primitives import INT32 as _COUNT
from wherry.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    RecordError,
    iter_records,
    parse_control_record,
)

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "DuplicateBatch",
    "EndTxnMarker",
    "ProducerStateEntry",
    "ProducerStateManager",
    "read_marker",
    "read_snapshot",
    "snapshot_file_name",
    "write_snapshot",
]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_INT32_MAX = 2**31 - 1

_MAGIC = b"WPSS"
_VERSION = 1
_FILE_HEADER = struct.Struct(">4shI")  # magic, version, crc32c of the rest
_ENTRY = struct.Struct(">qhiqqb")  # pid, epoch, coordinator epoch, last ts, txn first off, n
_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp


class CorruptSnapshotError(ValueError):
    """A producer snapshot file failed its CRC or structure check."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one producer batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """The control record of a COMMIT/ABORT marker batch."""

    control_type: int
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type == CONTROL_ABORT


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: its first data offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def read_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> EndTxnMarker | None:
    """The COMMIT/ABORT marker of the control batch at `pos` (None if it holds none: an
    unknown control type, or no record)."""
    try:
        for record in iter_records(buf, pos):
            control_type, coordinator_epoch = parse_control_record(record)
            if control_type in (CONTROL_ABORT, CONTROL_COMMIT):
                return EndTxnMarker(control_type, coordinator_epoch)
            return None
    except RecordError as exc:
        log.warning("unreadable control batch at position %d: %s", pos, exc)
    return None


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """The original placement of a batch that was retried."""

    first_offset: int
    last_offset: int
    timestamp: int



@dataclass(slots=True)
class VerificationState:
    """A transactional batch of a producer being checked with its coordinator before its
    append (Kafka's VerificationStateEntry): the lowest sequence of such a batch, at the
    newest epoch seen. A later batch that overtakes one still unwritten is refused."""

    epoch: int
    lowest_seq: int
    started_ms: int

@dataclass(slots=True)
class ProducerStateEntry:
    """State of one producer id in one partition."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = -1
    last_timestamp_ms: int = -1
    current_txn_first_offset: int = -1

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.last_timestamp_ms,
            self.current_txn_first_offset,
        )

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """A cached batch with the same epoch and sequence range as `header`."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, header: BatchHeader, first_offset: int, last_offset: int) -> None:
        """Apply a data batch (no validation)."""
        self.maybe_update_epoch(header.producer_epoch)
        self.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                first_offset,
                last_offset,
                header.max_timestamp,
            )
        )
        self.last_timestamp_ms = header.max_timestamp
        if header.is_transactional and self.current_txn_first_offset < 0:
            self.current_txn_first_offset = first_offset

    def apply_control(
        self, header: BatchHeader, marker: EndTxnMarker | None = None
    ) -> CompletedTxn | None:
        """Apply a transaction marker: ends the ongoing transaction (returned as completed)."""
        self.maybe_update_epoch(header.producer_epoch)
        completed = None
        if marker is not None:
            if self.current_txn_first_offset >= 0:
                completed = CompletedTxn(
                    self.producer_id,
                    self.current_txn_first_offset,
                    header.base_offset,
                    marker.is_abort,
                )
            self.coordinator_epoch = marker.coordinator_epoch
        self.current_txn_first_offset = -1
        self.last_timestamp_ms = header.max_timestamp
        return completed


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def _validate(
    current: ProducerStateEntry | None,
    header: BatchHeader,
    first_offset: int,
    marker: EndTxnMarker | None = None,
    client: bool = True,
    lowest_seq: int | None = None,
) -> DuplicateBatch | None:
    """Kafka's checks for one batch against the producer's current entry: the epoch always,
    duplicates and sequences for a client's batch only (not the coordinator's). `lowest_seq`:
    the lowest sequence of the producer's batches being checked with the coordinator."""
    pid, epoch = header.producer_id, header.producer_epoch
    if current is not None and client:
        duplicate = None if header.is_control else current.find_duplicate(header)
        if duplicate is not None:
            return DuplicateBatch(
                duplicate.first_offset, duplicate.last_offset, duplicate.timestamp_ms
            )
    current_epoch = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
    if epoch < current_epoch:
        raise InvalidProducerEpochError(
            f"Epoch of producer {pid} at offset {first_offset} is {epoch}, which is smaller "
            f"than the last seen epoch {current_epoch}"
        )
    if header.is_control:
        if (
            current is not None
            and marker is not None
            and current.coordinator_epoch > marker.coordinator_epoch
        ):
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producerId {pid} at offset {first_offset}: "
                f"{marker.coordinator_epoch} (zombie), {current.coordinator_epoch} (current)"
            )
        return None
    if (
        not header.is_transactional
        and current is not None
        and current.current_txn_first_offset >= 0
    ):
        raise InvalidTxnStateError(
            f"Expected transactional write from producer {pid} at offset {first_offset}"
        )
    if not client:
        return None
    first_seq = header.base_sequence
    if lowest_seq is not None and header.is_transactional and first_seq > lowest_seq:
        raise OutOfOrderSequenceError(
            f"Out of order sequence number for producer {pid} at offset {first_offset}: "
            f"{first_seq} (incoming seq. number), {lowest_seq} (earliest seen sequence)"
        )
    if epoch != current_epoch:
        if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequenceError(
                f"Invalid sequence number for new epoch of producer {pid} at offset "
                f"{first_offset}: {epoch} (request epoch), {first_seq} (seq. number), "
                f"{current_epoch} (current producer epoch)"
            )
    elif current is not None and current_epoch != NO_PRODUCER_EPOCH:
        last_seq = current.last_seq
        if not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {pid} at offset {first_offset}: "
                f"{first_seq} (incoming seq. number), {last_seq} (current end sequence number)"
            )
    return None


# --------------------------------------------------------------------------------------------
# Snapshot files
# --------------------------------------------------------------------------------------------


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _encode(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    items = list(entries)
    body += _COUNT.pack(len(items))
    for entry in items:
        body += _ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.coordinator_epoch,
            entry.last_timestamp_ms,
            entry.current_txn_first_offset,
            len(entry.batches),
        )
        for batch in entry.batches:
            body += _BATCH.pack(
                batch.first_seq,
                batch.last_seq,
                batch.first_offset,
                batch.last_offset,
                batch.timestamp_ms,
            )
    crc = crc32c(body)
    return _FILE_HEADER.pack(_MAGIC, _VERSION, crc) + bytes(body)


def _decode(data: bytes, name: str) -> list[ProducerStateEntry]:
    if len(data) < _FILE_HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"producer snapshot {name} is truncated")
    magic, version, crc = _FILE_HEADER.unpack_from(data, 0)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptSnapshotError(f"producer snapshot {name} has bad magic/version")
    body = data[_FILE_HEADER.size :]
    if crc32c(body) != crc:
        raise CorruptSnapshotError(f"producer snapshot {name} failed its CRC check")
    try:
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        entries: list[ProducerStateEntry] = []
        for _ in range(count):
            pid, epoch, coord, last_ts, txn_first, n = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            entry = ProducerStateEntry(
                pid,
                epoch,
                coordinator_epoch=coord,
                last_timestamp_ms=last_ts,
                current_txn_first_offset=txn_first,
            )
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            entries.append(entry)
    except struct.error as exc:
        raise CorruptSnapshotError(f"producer snapshot {name} is malformed: {exc}") from exc
    if pos != len(body):
        raise CorruptSnapshotError(f"producer snapshot {name} has trailing bytes")
    return entries


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, fsync: bool) -> None:
    atomic_write(path, _encode(entries), fsync=fsync)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    return _decode(read_file(path), Path(path).name)


# --------------------------------------------------------------------------------------------
# Manager
# --------------------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer state of one partition log directory.

    `map_end_offset` is the offset up to which (exclusive) batches have been applied.
    """

    def __init__(
        self,
        dir: Path,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.dir = dir if isinstance(dir, Path) else Path(dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its transaction
        self._verifying: dict[int, VerificationState] = {}
        self._unreplicated: list[CompletedTxn] = []  # markers not yet below the HW
        self._map_end_offset = 0
        self._unsynced_snapshots: set[int] = set()
        self._snapshots: list[int] = sorted(self._scan_snapshots())

    def _scan_snapshots(self) -> list[int]:
        offsets: list[int] = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return offsets
        for name in names:
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if len(stem) == 20 and stem.isdigit():
                    offsets.append(int(stem))
        return offsets

    # -- state --------------------------------------------------------------------------

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return self._producers

    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    # -- client append ------------------------------------------------------------------

    def check(
        self, header: BatchHeader, marker: EndTxnMarker | None = None, *, client: bool = True
    ) -> DuplicateBatch | None:
        """Validate one client batch (offsets already assigned); None if it may be appended.

        Raises InvalidProducerEpochError / OutOfOrderSequenceError / InvalidTxnStateError /
        TransactionCoordinatorFencedError (a marker from an older coordinator epoch).
        """
        if not header.has_producer_id:
            return None
        pid = header.producer_id
        return _validate(
            self._producers.get(pid), header, header.base_offset, marker, client,
            self._lowest_seq(pid),
        )

    def check_batches(
        self,
        headers: Sequence[BatchHeader],
        markers: Sequence[EndTxnMarker | None] | None = None,
        *,
        client: bool = True,
    ) -> DuplicateBatch | None:
        """Validate several batches of one append in order (each seeing the ones before);
        `markers[i]` is the marker of control batch `headers[i]`."""
        if len(headers) == 1:
            if headers[0].producer_id < 0:  # no producer id: nothing to check (`check`)
                return None
            return self.check(headers[0], markers[0] if markers else None, client=client)
        marks = list(markers) if markers is not None else [None] * len(headers)
        staged: dict[int, ProducerStateEntry] = {}
        verified: set[int] = set()  # a transactional batch of theirs comes before
        for header, marker in zip(headers, marks, strict=True):
            if not header.has_producer_id:
                continue
            pid = header.producer_id
            current = staged.get(pid, self._producers.get(pid))
            lowest = None if pid in verified else self._lowest_seq(pid)
            duplicate = _validate(current, header, header.base_offset, marker, client, lowest)
            if duplicate is not None:
                return duplicate
            entry = current.copy() if current is not None else ProducerStateEntry(pid)
            if header.is_control:
                entry.apply_control(header, marker)
            else:
                entry.add_batch(header, header.base_offset, header.last_offset)
            staged[pid] = entry
            if header.is_transactional:
                verified.add(pid)
        return None

    # -- transaction checks in flight ---------------------------------------------------

    def start_verification(self, producer_id: int, epoch: int, sequence: int, now_ms: int) -> None:
        """A transactional batch of the producer (`sequence` its first) is being checked
        with its coordinator before it is appended here. Until a transactional batch of the
        producer is written, a batch with a higher first sequence is refused
        OUT_OF_ORDER_SEQUENCE_NUMBER: a later request must not be written ahead of one
        whose check failed and that its client will retry."""
        state = self._verifying.get(producer_id)
        if state is None or epoch > state.epoch:
            self._verifying[producer_id] = VerificationState(epoch, sequence, now_ms)
        elif epoch == state.epoch and sequence < state.lowest_seq:
            state.lowest_seq = sequence

    def verification(self, producer_id: int) -> VerificationState | None:
        return self._verifying.get(producer_id)

    def _lowest_seq(self, producer_id: int) -> int | None:
        state = self._verifying.get(producer_id)
        return None if state is None else state.lowest_seq

    def update(
        self,
        header: BatchHeader,
        first_offset: int | None = None,
        last_offset: int | None = None,
        marker: EndTxnMarker | None = None,
    ) -> CompletedTxn | None:
        """Apply an appended batch (no validation: leader after `check`, follower, replay).

        A marker (`marker` of a control batch) ending a transaction returns it completed; it
        then counts as unstable until the high watermark passes the marker."""
        if not header.has_producer_id:
            return None
        first = header.base_offset if first_offset is None else first_offset
        last = header.last_offset if last_offset is None else last_offset
        pid = header.producer_id
        if header.is_transactional:
            # written: the transaction is open here, or ended (Kafka clears it either way)
            self._verifying.pop(pid, None)
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerStateEntry(pid)
        elif header.producer_epoch < entry.producer_epoch:
            log.warning(
                "producer %d wrote epoch %d at offset %d after epoch %d (replicated data)",
                pid,
                header.producer_epoch,
                first,
                entry.producer_epoch,
            )
        if header.is_control:
            completed = entry.apply_control(header, marker)
            self._ongoing.pop(pid, None)
            if completed is not None:
                self._unreplicated.append(completed)
            return completed
        entry.add_batch(header, first, last)
        if entry.current_txn_first_offset >= 0:
            self._ongoing.setdefault(pid, entry.current_txn_first_offset)
        return None

    # -- transactions -------------------------------------------------------------------

    @property
    def ongoing_transactions(self) -> Mapping[int, int]:
        """producer id -> first offset of its ongoing transaction."""
        return self._ongoing

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an ongoing transaction, or of a completed one whose marker is
        not below `high_watermark` yet (Kafka's firstUnstableOffset); None if none."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]
        firsts = [t.first_offset for t in self._unreplicated]
        if self._ongoing:
            firsts.append(min(self._ongoing.values()))
        return min(firsts) if firsts else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` ends (Kafka's lastStableOffset(completedTxn)): the first
        offset of the earliest other ongoing transaction, else just past the marker."""
        others = [f for pid, f in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def _reset_transactions(self) -> None:
        self._ongoing = {
            pid: e.current_txn_first_offset
            for pid, e in self._producers.items()
            if e.current_txn_first_offset >= 0
        }
        self._unreplicated = []

    # -- expiration ---------------------------------------------------------------------

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset < 0
            and now_ms - entry.last_timestamp_ms >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self._producers[pid]
        limit = self.producer_id_expiration_ms
        for pid in [p for p, v in self._verifying.items() if now_ms - v.started_ms >= limit]:
            del self._verifying[pid]
        return len(expired)

    # -- snapshots ----------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / snapshot_file_name(offset)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def latest_snapshot_offset(self, at_or_below: int | None = None) -> int | None:
        for offset in reversed(self._snapshots):
            if at_or_below is None or offset <= at_or_below:
                return offset
        return None

    def take_snapshot(self, *, fsync: bool = True) -> Path | None:
        """Write the state at `map_end_offset` (skipped if that snapshot already exists)."""
        offset = self._map_end_offset
        if offset in self._snapshots:
            if fsync and offset in self._unsynced_snapshots:
                self._fsync_snapshot(offset)
            return None
        path = self.snapshot_path(offset)
        write_snapshot(path, self._producers.values(), fsync=fsync)
        self._snapshots.append(offset)
        self._snapshots.sort()
        if fsync:
            self._unsynced_snapshots.discard(offset)
        else:
            self._unsynced_snapshots.add(offset)
        return path

    def _fsync_snapshot(self, offset: int) -> None:
        fsync_path(self.snapshot_path(offset))
        self._unsynced_snapshots.discard(offset)

    def unsynced_snapshots(self, up_to: int) -> list[int]:
        """Offsets of the snapshots written without fsync (at roll) at or below `up_to`."""
        return sorted(o for o in self._unsynced_snapshots if o <= up_to)

    def fsync_snapshot_files(self, offsets: Iterable[int]) -> list[int]:
        """fsync the snapshot files of `offsets` and their directory, touching no state (a
        flush runs this without the log's lock); returns the offsets now durable (a snapshot
        deleted meanwhile counts: nothing is left to sync). See `snapshots_synced`."""
        done = list(offsets)
        for offset in done:
            fsync_path(self.snapshot_path(offset))
        if done:
            try:
                fsync_dir(self.dir)
            except FileNotFoundError:  # the log's directory was renamed (deleted or moved)
                return []
        return done

    def snapshots_synced(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            self._unsynced_snapshots.discard(offset)

    def flush_snapshots(self, up_to: int | None = None) -> None:
        """fsync snapshots written without fsync (at roll), those <= `up_to`."""
        pending = sorted(o for o in self._unsynced_snapshots if up_to is None or o <= up_to)
        for offset in pending:
            self._fsync_snapshot(offset)
        if pending:
            fsync_dir(self.dir)

    def _delete_snapshot(self, offset: int) -> None:
        self.snapshot_path(offset).unlink(missing_ok=True)
        self._unsynced_snapshots.discard(offset)
        if offset in self._snapshots:
            self._snapshots.remove(offset)

    def delete_snapshots_below(self, offset: int) -> None:
        for snap in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(snap)

    def delete_snapshots_above(self, offset: int) -> None:
        for snap in [o for o in self._snapshots if o > offset]:
            self._delete_snapshot(snap)

    def remove_stray_snapshots(self, keep_offsets: Iterable[int]) -> None:
        """Delete snapshots not at one of `keep_offsets`, except the latest snapshot."""
        keep = set(keep_offsets)
        latest = self.latest_snapshot_offset()
        for snap in list(self._snapshots):
            if snap not in keep and snap != latest:
                self._delete_snapshot(snap)

    def _load_snapshot(self, offset: int, now_ms: int | None) -> bool:
        path = self.snapshot_path(offset)
        try:
            entries = read_snapshot(path)
        except (OSError, CorruptSnapshotError) as exc:
            log.warning("deleting unreadable producer snapshot %s: %s", path, exc)
            self._delete_snapshot(offset)
            return False
        self._producers = {}
        for entry in entries:
            if now_ms is None or not self._is_expired(entry, now_ms):
                self._producers[entry.producer_id] = entry
        self._map_end_offset = offset
        self._reset_transactions()
        return True

    def truncate_and_reload(
        self,
        log_start_offset: int,
        log_end_offset: int,
        now_ms: int | None = None,
        *,
        load_at_or_below: int | None = None,
    ) -> None:
        """Drop snapshots outside [log_start_offset, log_end_offset], then load the latest one
        (at or below `load_at_or_below` too, if given), or start empty at log_start_offset.
        The caller replays batches from `map_end_offset`.
        """
        for snap in list(self._snapshots):
            if snap > log_end_offset or snap < log_start_offset:
                self._delete_snapshot(snap)
        self._producers = {}
        self._reset_transactions()
        self._map_end_offset = log_start_offset
        bound = log_end_offset
        if load_at_or_below is not None:
            bound = min(bound, load_at_or_below)
        while (latest := self.latest_snapshot_offset(bound)) is not None:
            if self._load_snapshot(latest, now_ms):
                return

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (log truncated fully); delete all snapshots."""
        self._producers = {}
        self._reset_transactions()
        for snap in list(self._snapshots):
            self._delete_snapshot(snap)
        self._map_end_offset = offset

