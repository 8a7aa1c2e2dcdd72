"""One share-partition's state (KIP-932's SharePartition), pure: time comes in as `now_ms`.

The share-partition start offset (SPSO) is the first offset whose record is not yet
acknowledged or archived; `next_offset` the first offset never acquired (Kafka's end offset
+ 1). Every offset in ``[start_offset, next_offset)`` is in flight: AVAILABLE (may be
acquired again), ACQUIRED by one member until its lock deadline, ACKNOWLEDGED or ARCHIVED.
An offset of that range missing from `records` (a gap: a control batch, an aborted
transaction's record, a compacted-away offset) counts as ARCHIVED.

Acknowledgements: ACCEPT -> ACKNOWLEDGED, RELEASE -> AVAILABLE (ARCHIVED once the delivery
count reached `delivery_count_limit`), REJECT -> ARCHIVED, RENEW -> the lock restarts, GAP ->
ARCHIVED. A batch of acknowledgements is checked whole before anything changes, so a bad one
changes nothing. An expired lock releases its record like RELEASE does.

Acquisition takes whole batches of the log (Kafka's `batch_optimized` mode): a consumer's
`max.poll.records` and the partition's record locks are met at batch boundaries, never by
splitting a batch; the `record_limit` mode stops at exactly the records asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode

__all__ = [
    "AckBatch",
    "AckType",
    "AcquireMode",
    "AcquiredRange",
    "FetchedBatch",
    "InFlight",
    "RecordState",
    "SharePartition",
    "SharePartitionConfig",
    "StateBatch",
]


class RecordState(IntEnum):
    """Kafka's RecordState ids (the persisted delivery states use 0, 2 and 4)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A batch the log returned: its offsets, and whether none of its records may be
    delivered (a control batch, or an aborted transaction's batch at read_committed)."""

    first_offset: int
    last_offset: int
    skip: bool = False


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted run of offsets with one delivery state and count (Kafka's
    PersisterStateBatch). ACQUIRED is persisted as AVAILABLE."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2_000


@dataclass(frozen=True, slots=True)
class AcquireMode:
    """How one ShareFetch bounds what it acquires (Kafka's ShareAcquireMode and the
    request's BatchSize): `strict` is `record_limit`, else `batch_optimized`; `batch_size`
    None lists the acquired records in ranges cut only where offsets or delivery counts
    change."""

    batch_size: int | None = None
    strict: bool = False


@dataclass(frozen=True, slots=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def type_at(self, offset: int) -> int:
        if len(self.types) == 1:
            return self.types[0]
        return self.types[offset - self.first_offset]


_TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class SharePartition:
    def __init__(
        self,
        start_offset: int,
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
    ) -> None:
        self.config = config or SharePartitionConfig()
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.state_epoch = state_epoch
        self.records: dict[int, InFlight] = {}
        # records found at the delivery limit when acquired, and archived (a state change
        # no acknowledgement or expiry writes: its leader writes it in the background)
        self.archived_at_limit = 0

    # --- state from / to the share coordinator ------------------------------------------------
    @classmethod
    def from_state(
        cls,
        start_offset: int,
        batches: Iterable[StateBatch],
        config: SharePartitionConfig | None = None,
        *,
        state_epoch: int = 0,
    ) -> SharePartition:
        sp = cls(start_offset, config, state_epoch=state_epoch)
        for b in batches:
            for off in range(max(b.first_offset, start_offset), b.last_offset + 1):
                state = RecordState(b.delivery_state)
                if state == RecordState.ACQUIRED:
                    state = RecordState.AVAILABLE
                sp.records[off] = InFlight(state, b.delivery_count)
                sp.next_offset = max(sp.next_offset, off + 1)
        # Offsets below the last persisted one but absent were gaps: archived.
        sp._advance_start()
        return sp

    def state_batches(self) -> list[StateBatch]:
        """The in-flight records as runs of (state, delivery count), ACQUIRED written as
        AVAILABLE; gaps as ARCHIVED."""
        out: list[StateBatch] = []
        cur: list[int] | None = None  # first, last, state, count
        for off in range(self.start_offset, self.next_offset):
            r = self.records.get(off)
            if r is None:
                st, dc = int(RecordState.ARCHIVED), 0
            else:
                st = int(RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state)
                dc = r.delivery_count
            if cur is not None and cur[1] == off - 1 and cur[2] == st and cur[3] == dc:
                cur[1] = off
            else:
                if cur is not None:
                    out.append(StateBatch(*cur))
                cur = [off, off, st, dc]
        if cur is not None:
            out.append(StateBatch(*cur))
        return out

    # --- reading ------------------------------------------------------------------------------
    def fetch_offset(self) -> int:
        """Where the next read of the log starts: the first AVAILABLE record, else the first
        offset never acquired."""
        for off in range(self.start_offset, self.next_offset):
            r = self.records.get(off)
            if r is not None and r.state == RecordState.AVAILABLE:
                return off
        return self.next_offset

    def can_acquire(self) -> bool:
        if self.next_offset - self.start_offset < self.config.max_record_locks:
            return True
        return any(r.state == RecordState.AVAILABLE for r in self.records.values())

    def acquired_by(self, member_id: str) -> int:
        return sum(
            1
            for r in self.records.values()
            if r.state == RecordState.ACQUIRED and r.member_id == member_id
        )

    def state_of(self, offset: int) -> RecordState:
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED
        r = self.records.get(offset)
        if r is None:
            return RecordState.ARCHIVED if offset < self.next_offset else RecordState.AVAILABLE
        return r.state

    def next_deadline(self) -> int | None:
        ds = [r.deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED]
        return min(ds) if ds else None

    # --- transitions --------------------------------------------------------------------------
    def reset_start(self, log_start_offset: int) -> None:
        """Records below the log start offset are gone (retention, DeleteRecords): archived."""
        if log_start_offset <= self.start_offset:
            return
        for off in range(self.start_offset, min(log_start_offset, self.next_offset)):
            self.records.pop(off, None)
        self.start_offset = log_start_offset
        self.next_offset = max(self.next_offset, log_start_offset)
        self._advance_start()

    def acquire(
        self,
        member_id: str,
        batches: Sequence[FetchedBatch],
        max_records: int,
        now_ms: int,
        mode: AcquireMode | None = None,
    ) -> list[AcquiredRange]:
        """Acquire for `member_id` the AVAILABLE records and the never-acquired ones of the
        batches the log returned.

        By default (Kafka's `batch_optimized` acquire mode) `max_records` and the record
        locks are soft limits, met at batch boundaries: a batch is acquired whole, so the
        records acquired can pass `max_records` by the rest of the last batch, and a batch
        whose first new offset is within `max_record_locks` is taken whole; the acquired
        records are listed in ranges cut at a batch boundary once a range holds the mode's
        `batch_size` records. A `strict` mode (`record_limit`) acquires at most
        `max_records` records, within `max_record_locks`, in as few ranges as possible."""
        mode = mode or AcquireMode()
        strict = mode.strict
        deadline = now_ms + self.config.record_lock_duration_ms
        got: list[tuple[int, int]] = []  # (offset, delivery count)
        starts: set[int] = set()  # where a batch begins: where a listed range may be cut
        limit = self.start_offset + self.config.max_record_locks
        for b in batches:
            if len(got) >= max_records:
                break
            if b.last_offset < self.start_offset:
                continue
            first = max(b.first_offset, self.start_offset)
            if b.skip:
                # Control batches, aborted transactions: never delivered, archived (gaps).
                if b.last_offset >= self.next_offset:
                    for off in range(max(first, self.next_offset), b.last_offset + 1):
                        self.records.pop(off, None)
                    self.next_offset = b.last_offset + 1
                continue
            if first > self.next_offset:  # offsets missing from the log: gaps
                if first >= limit:
                    break
                self.next_offset = first
            # new offsets below `cap` may be acquired: per record when strict, else the
            # whole batch if its first new offset is within the record locks
            new_from = max(first, self.next_offset)
            cap = limit if strict or new_from >= limit else b.last_offset + 1
            starts.add(first)
            if not self._acquire_batch(
                member_id, first, b.last_offset, cap,
                max_records if strict else None, deadline, got,
            ):
                break  # the record locks ran out: nothing past this point
        self._advance_start()
        return _ranges(got, None if strict else mode.batch_size, starts)

    def _acquire_batch(
        self,
        member_id: str,
        first: int,
        last: int,
        cap: int,
        max_records: int | None,
        deadline: int,
        got: list[tuple[int, int]],
    ) -> bool:
        """Acquire the acquirable records of `[first, last]` into `got`: new offsets below
        `cap`, until `got` holds `max_records` (None: no bound). False when a new offset
        reached `cap` (the record locks are used up)."""
        for off in range(first, last + 1):
            if max_records is not None and len(got) >= max_records:
                return True
            if off >= self.next_offset:
                if off >= cap:
                    return False
                self.records[off] = InFlight(RecordState.ACQUIRED, 1, member_id, deadline)
                self.next_offset = off + 1
                got.append((off, 1))
                continue
            r = self.records.get(off)
            if r is not None and r.state == RecordState.AVAILABLE:
                if r.delivery_count >= self.config.delivery_count_limit:
                    # delivered as often as allowed (its last delivery was lost with a
                    # leader, or the limit was lowered): archived
                    r.state = RecordState.ARCHIVED
                    self.archived_at_limit += 1
                    continue
                r.state = RecordState.ACQUIRED
                r.delivery_count += 1
                r.member_id = member_id
                r.deadline_ms = deadline
                got.append((off, r.delivery_count))
        return True

    def acknowledge(
        self, member_id: str, batches: Sequence[AckBatch], now_ms: int
    ) -> ErrorCode:
        """Apply a request's acknowledgements for one partition, all or nothing: any batch
        that is malformed or names a record this member does not hold refuses the whole."""
        seen: set[int] = set()
        for b in batches:
            if b.first_offset > b.last_offset or not b.types:
                return ErrorCode.invalid_request
            if len(b.types) != 1 and len(b.types) != b.last_offset - b.first_offset + 1:
                return ErrorCode.invalid_request
            if any(t not in AckType._value2member_map_ for t in b.types):
                return ErrorCode.invalid_request
            if b.first_offset < self.start_offset or b.last_offset >= self.next_offset:
                return ErrorCode.invalid_record_state  # outside the in-flight records
            for off in range(b.first_offset, b.last_offset + 1):
                if off in seen:
                    return ErrorCode.invalid_request
                seen.add(off)
                t = b.type_at(off)
                r = self.records.get(off)
                if r is None:
                    if t == AckType.GAP:
                        continue  # already a gap
                    return ErrorCode.invalid_record_state
                if r.state != RecordState.ACQUIRED or r.member_id != member_id:
                    return ErrorCode.invalid_record_state
        for b in batches:
            for off in range(b.first_offset, b.last_offset + 1):
                r = self.records.get(off)
                if r is None:
                    continue
                t = b.type_at(off)
                if t == AckType.ACCEPT:
                    r.state, r.member_id = RecordState.ACKNOWLEDGED, None
                elif t == AckType.RELEASE:
                    self._release(r)
                elif t == AckType.RENEW:
                    r.deadline_ms = now_ms + self.config.record_lock_duration_ms
                else:  # REJECT, GAP
                    r.state, r.member_id = RecordState.ARCHIVED, None
        self._advance_start()
        return ErrorCode.none

    def expire_locks(self, now_ms: int) -> int:
        """Release the records whose acquisition lock passed; how many."""
        return self._release_acquired(lambda r: r.deadline_ms <= now_ms)

    def release_member(self, member_id: str) -> int:
        """Release every record `member_id` holds (its share session closed); how many."""
        return self._release_acquired(lambda r: r.member_id == member_id)

    def _release_acquired(self, which: Callable[[InFlight], bool]) -> int:
        """Release the acquired records `which` picks; how many."""
        n = 0
        for r in self.records.values():
            if r.state == RecordState.ACQUIRED and which(r):
                self._release(r)
                n += 1
        if n:
            self._advance_start()
        return n

    def _release(self, r: InFlight) -> None:
        r.member_id = None
        if r.delivery_count >= self.config.delivery_count_limit:
            r.state = RecordState.ARCHIVED
        else:
            r.state = RecordState.AVAILABLE

    def _advance_start(self) -> None:
        off = self.start_offset
        recs = self.records
        while off < self.next_offset:
            r = recs.get(off)
            if r is not None and r.state not in _TERMINAL:
                break
            recs.pop(off, None)
            off += 1
        self.start_offset = off


def _ranges(
    got: list[tuple[int, int]], batch_size: int | None = None, starts: Set[int] = frozenset()
) -> list[AcquiredRange]:
    """`got`'s offsets as runs of one delivery count; with `batch_size`, a run holding that
    many records ends where a batch begins (an offset of `starts`)."""
    out: list[AcquiredRange] = []
    for off, dc in got:
        last = out[-1] if out else None
        if (
            last is not None
            and last.last_offset == off - 1
            and last.delivery_count == dc
            and not (
                batch_size is not None
                and off in starts
                and last.last_offset - last.first_offset + 1 >= batch_size
            )
        ):
            out[-1] = AcquiredRange(last.first_offset, off, dc)
        else:
            out.append(AcquiredRange(off, off, dc))
    return out
