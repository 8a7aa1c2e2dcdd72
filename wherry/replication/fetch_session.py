"""Incremental fetch sessions (KIP-227; Kafka 3.9's FetchSession.scala), pure: time comes in
as `now_ms`, session ids from a passed-in random source.

A Fetch request names a session by (session_id, session_epoch):

* (0, -1): a full fetch without a session (`SESSIONLESS`);
* (0, 0): a full fetch that asks for a new session; (id, 0) closes session `id` first;
* (id, -1): closes session `id`, then a full fetch without a session;
* (id, epoch > 0): an incremental fetch on session `id`, which must expect exactly `epoch`
  (else INVALID_FETCH_SESSION_EPOCH; an unknown id is FETCH_SESSION_ID_NOT_FOUND). Its
  partitions add to or update the session, `forgotten_topics_data` removes from it; the answer
  holds only the partitions with something new (records, an error, a moved high watermark, last
  stable or log start offset).

Beyond Kafka, the cache keeps an index partition → sessions holding it and a per-session
*dirty* set: the replica manager calls `mark_changed(tp)` whenever a partition's log end, high
watermark or leadership moves, so an incremental fetch reads the partitions it names plus the
dirty ones instead of every partition of the session (cost proportional to what changed, not
to what is held). `rescan_due` brings back a full scan of a session now and then, for what no
hook reports (log start offsets moved by retention).

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions; a new one may
evict, as Kafka's `tryEvict`: a session unused for `min.incremental.fetch.session.eviction.ms`,
else the least valuable one (not privileged before privileged, then fewest partitions) when
the new one is worth more. Followers' sessions are privileged.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 0x7FFFFFFF
DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # min.incremental.fetch.session.eviction.ms
RESCAN_INTERVAL_MS = 10_000  # a full look at a session's partitions at least this often


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 0 → 1, MAX → 1 (wraps past 0), -1 stays -1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What the session remembers of one partition: the last request data (fetch offset...)
    and what the last answer said (high watermark, last stable and log start offsets)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's (a follower's) log start offset
    key: Any = None  # how the client names the topic (a name, or a topic id from v13 on)
    high_watermark: int = -1
    last_stable_offset: int = -1
    leader_log_start_offset: int = -1

    def must_respond(
        self,
        *,
        error_code: int,
        has_records: bool,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        record: bool = True,
    ) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: whether an incremental answer must
        carry this partition; with `record`, the answer's offsets are kept for the next one."""
        must = (
            has_records
            or error_code != 0
            or high_watermark != self.high_watermark
            or last_stable_offset != self.last_stable_offset
            or log_start_offset != self.leader_log_start_offset
        )
        if record:
            # Kafka forgets the cached high watermark on an error so the partition is
            # answered again once it recovers.
            self.high_watermark = high_watermark if error_code == 0 else -1
            self.last_stable_offset = last_stable_offset
            self.leader_log_start_offset = log_start_offset
        return must


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool
    partitions: dict[TopicPartition, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental request must carry
    dirty: set[TopicPartition] = field(default_factory=set)
    last_scan_ms: int = 0
    # Partitions of the session its client may not read (as Kafka keeps them in the session):
    # answered TOPIC_AUTHORIZATION_FAILED in every incremental answer until allowed.
    refused: set[TopicPartition] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.partitions)

    def take_dirty(self) -> list[TopicPartition]:
        out = [tp for tp in self.dirty if tp in self.partitions]
        self.dirty.clear()
        return out

    def rescan_due(self, now_ms: int) -> bool:
        """True (and the clock restarts) when every partition should be checked again for
        what no change hook reports (a log start offset moved by retention)."""
        if now_ms - self.last_scan_ms >= RESCAN_INTERVAL_MS:
            self.last_scan_ms = now_ms
            return True
        return False


class ContextKind(enum.Enum):
    SESSIONLESS = "sessionless"  # full, no session kept
    FULL = "full"  # full, and a new session holds the partitions
    INCREMENTAL = "incremental"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class FetchContext:
    kind: ContextKind
    session: FetchSession | None = None
    error: ErrorCode = ErrorCode.none
    # An incremental request: partitions the request added or changed (read them now).
    touched: tuple[TopicPartition, ...] = ()

    @property
    def session_id(self) -> int:
        return INVALID_SESSION_ID if self.session is None else self.session.id


class FetchSessionCache:
    """Sessions by id (Kafka's FetchSessionCache + FetchManager.newContext)."""

    def __init__(
        self,
        max_entries: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        *,
        random_id: Callable[[], int],
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._random_id = random_id  # a positive int below 2**31
        self.sessions: dict[int, FetchSession] = {}
        self._holders: dict[TopicPartition, set[int]] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(len(s) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    # --- the request's context ------------------------------------------------------------
    def new_context(
        self,
        *,
        session_id: int,
        epoch: int,
        fetch_data: Mapping[TopicPartition, CachedPartition],
        forgotten: Iterable[TopicPartition],
        privileged: bool,
        now_ms: int,
    ) -> FetchContext:
        """Kafka's FetchManager.newContext. A FULL context's session is created here (not at
        answer time as in Kafka) so a parked fetch can be woken through it; `fetch_data` is
        the request's partitions."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full request
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            if epoch == FINAL_EPOCH or not fetch_data:
                return FetchContext(ContextKind.SESSIONLESS)
            session = self.maybe_create_session(now_ms, privileged, dict(fetch_data))
            if session is None:
                return FetchContext(ContextKind.SESSIONLESS)
            return FetchContext(ContextKind.FULL, session)
        session = self.sessions.get(session_id)
        if session is None or session_id == INVALID_SESSION_ID:
            return FetchContext(ContextKind.ERROR, error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, error=ErrorCode.invalid_fetch_session_epoch)
        touched = self._update(session, fetch_data, forgotten)
        if not session.partitions:
            self.remove(session_id)
            return FetchContext(ContextKind.SESSIONLESS)
        session.epoch = next_epoch(session.epoch)
        self._touch(session, now_ms)
        return FetchContext(ContextKind.INCREMENTAL, session, touched=touched)

    def _update(
        self,
        session: FetchSession,
        fetch_data: Mapping[TopicPartition, CachedPartition],
        forgotten: Iterable[TopicPartition],
    ) -> tuple[TopicPartition, ...]:
        """Kafka's FetchSession.update: added and updated partitions keep their cached answer
        state; forgotten ones leave."""
        for tp, new in fetch_data.items():
            cur = session.partitions.get(tp)
            if cur is None:
                session.partitions[tp] = new
                self._holders.setdefault(tp, set()).add(session.id)
            else:
                cur.fetch_offset = new.fetch_offset
                cur.max_bytes = new.max_bytes
                cur.current_leader_epoch = new.current_leader_epoch
                cur.log_start_offset = new.log_start_offset
                cur.key = new.key
        for tp in forgotten:
            if session.partitions.pop(tp, None) is not None:
                self._unhold(tp, session.id)
            session.dirty.discard(tp)
        return tuple(fetch_data)

    # --- creation and eviction -------------------------------------------------------------
    def maybe_create_session(
        self, now_ms: int, privileged: bool, partitions: dict[TopicPartition, CachedPartition]
    ) -> FetchSession | None:
        if len(self.sessions) >= self.max_entries and not self.try_evict(
            privileged, len(partitions), now_ms
        ):
            return None
        sid = self._random_id()
        while sid == INVALID_SESSION_ID or sid in self.sessions:
            sid = self._random_id()
        session = FetchSession(sid, privileged, partitions, now_ms, now_ms, last_scan_ms=now_ms)
        self.sessions[sid] = session
        for tp in partitions:
            self._holders.setdefault(tp, set()).add(sid)
        return session

    def _evictable(self, s: FetchSession, now_ms: int, by_privileged: bool) -> bool:
        # Kafka: a session younger than the eviction time is protected from the unprivileged;
        # a privileged one is protected from everyone while young.
        old = now_ms - s.creation_ms > self.eviction_ms
        return old or (by_privileged and not s.privileged)

    def try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict: the least recently used session if stale, else the least
        valuable evictable one when (privileged, size) is worth more."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values() if self._evictable(s, now_ms, privileged)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, len(s), s.id))
        if (privileged, size, 0) < (victim.privileged, len(victim), victim.id):
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            for tp in session.partitions:
                self._unhold(tp, session_id)
        return session

    def _unhold(self, tp: TopicPartition, session_id: int) -> None:
        holders = self._holders.get(tp)
        if holders is not None:
            holders.discard(session_id)
            if not holders:
                del self._holders[tp]

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms

    # --- change notification ---------------------------------------------------------------
    def mark_changed(self, tp: TopicPartition) -> Iterable[int]:
        """A partition's log end, high watermark or leadership moved: every session holding
        it reads it at its next (or parked) fetch. Returns those sessions' ids."""
        holders = self._holders.get(tp)
        if not holders:
            return ()
        for sid in holders:
            self.sessions[sid].dirty.add(tp)
        return holders
