"""Follower replication (Kafka 3.9's ReplicaFetcherManager / ReplicaFetcherThread).

One `ReplicaFetcher` per source (leader) broker fetches every partition this broker follows
from that leader in one Fetch request carrying this broker's replica id; `ReplicaFetcherManager`
adds and removes partitions as leadership changes and shuts fetchers down once idle.

Each partition's fetch state is a small pure state machine (`FetchStates`): a partition starts
*truncating* — the follower asks the leader (OffsetForLeaderEpoch) where its latest epoch ends
and truncates to the agreed prefix (`truncation.truncation_point`, KIP-101/KIP-279), repeating
while the answer is an older epoch — then *fetching*: batches are appended with the log's
`append_as_follower` (which also rebuilds idempotent-producer state and the leader-epoch
cache), the follower's high watermark becomes min(leader HW, own LEO), and the log start offset
follows the leader's. A Fetch answer with a `diverging_epoch` (KIP-320) truncates the same way.
Errors back a partition off (`replica.fetch.backoff.ms`); FENCED_LEADER_EPOCH parks it until a
newer LeaderAndIsr re-adds it; OFFSET_OUT_OF_RANGE follows Kafka's `fetchOffsetAndTruncate`.

The network sits behind `LeaderEndpoint`; `network_endpoint.NetworkLeaderEndpoint` speaks the
Kafka protocol through `outbound.RequestClient`, and tests may plug in an in-process leader.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.errors import OffsetOutOfRangeError, StorageError
from wherry.log.log import Log
from wherry.replication.quota import ReplicationQuotaManager
from wherry.replication.truncation import (
    UNDEFINED_EPOCH,
    EpochEndOffset,
    out_of_range_action,
    truncation_point,
)
from wherry.runtime.tasks import cancel_and_wait, wait_event

log = logging.getLogger(__name__)

FETCH_KEY = 1
LIST_OFFSETS_KEY = 2
OFFSET_FOR_LEADER_EPOCH_KEY = 23
# FETCH_VERSION (12): topic names, current_leader_epoch, last_fetched_epoch, diverging_epoch
LIST_OFFSETS_VERSION = 4
POSITION_REFRESH_MS = 10_000  # log start offsets of unchanged partitions looked up again
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


# --- configuration ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FetchLimits:
    """How long a follower's fetch may wait at the leader and how much it may bring back."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int  # the whole answer
    partition_max_bytes: int  # each partition


# Kafka's `replica.fetch.*` settings -> the FetcherConfig field each sets.
FETCHER_CONFIG_KEYS: Mapping[str, str] = {
    "replica.fetch.wait.max.ms": "max_wait_ms",
    "replica.fetch.min.bytes": "min_bytes",
    "replica.fetch.max.bytes": "partition_max_bytes",
    "replica.fetch.response.max.bytes": "response_max_bytes",
    "replica.fetch.backoff.ms": "backoff_ms",
    "replica.socket.timeout.ms": "socket_timeout_ms",
}


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's `replica.fetch.*` settings (names and defaults of Kafka 3.9)."""

    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    response_max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms

    @classmethod
    def from_properties(cls, raw: Mapping[str, str]) -> FetcherConfig:
        return cls(**{
            field: int(raw[name]) for name, field in FETCHER_CONFIG_KEYS.items() if name in raw
        })

    @property
    def limits(self) -> FetchLimits:
        return FetchLimits(
            self.max_wait_ms, self.min_bytes, self.response_max_bytes, self.partition_max_bytes
        )


# --- per-partition fetch state (pure) -----------------------------------------------------
class FetchStateKind(enum.Enum):
    TRUNCATING = "Truncating"  # find the divergence point with OffsetForLeaderEpoch
    FETCHING = "Fetching"
    FENCED = "Fenced"  # our leader epoch is stale; wait for a newer LeaderAndIsr


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    fetch_offset: int
    current_leader_epoch: int
    kind: FetchStateKind
    delayed_until_ms: int = 0
    last_fetched_epoch: int = UNDEFINED_EPOCH
    lag: int | None = None  # leader HW - fetch offset after the last appending fetch

    @property
    def in_sync(self) -> bool:
        """Kafka's isReplicaInSync: caught up with the leader's HW at the last append."""
        return self.lag is not None and self.lag <= 0

    def is_ready(self, now_ms: int) -> bool:
        return self.kind is not FetchStateKind.FENCED and now_ms >= self.delayed_until_ms


class FetchStates:
    """The fetch states of one fetcher's partitions; every transition is a method, no I/O."""

    def __init__(self) -> None:
        self._states: dict[TopicPartition, PartitionFetchState] = {}
        self.version = 0  # bumped by every change (so an unchanged `ready` answer is reused)
        self._ready: dict[
            FetchStateKind, tuple[int, int, dict[TopicPartition, PartitionFetchState]]
        ]
        self._ready = {}

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, tp: object) -> bool:
        return tp in self._states

    def get(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.get(tp)

    def partitions(self) -> list[TopicPartition]:
        return list(self._states)

    def add(self, tp: TopicPartition, leader_epoch: int, log_end_offset: int) -> bool:
        """A partition to follow at `leader_epoch`: truncate first, then fetch from the LEO.
        A partition already followed at that epoch keeps its state (False)."""
        current = self._states.get(tp)
        if current is not None and current.current_leader_epoch == leader_epoch:
            return False
        self._states[tp] = PartitionFetchState(
            log_end_offset, leader_epoch, FetchStateKind.TRUNCATING
        )
        self.version += 1
        return True

    def remove(self, tp: TopicPartition) -> PartitionFetchState | None:
        self.version += 1
        return self._states.pop(tp, None)

    def ready(self, kind: FetchStateKind, now_ms: int) -> dict[TopicPartition, PartitionFetchState]:
        """The partitions of `kind` ready now. While nothing changed and no delay ran out
        since the last call, the same (read-only) mapping is returned without a scan."""
        cached = self._ready.get(kind)
        if cached is not None and cached[0] == self.version and now_ms < cached[1]:
            return cached[2]
        out: dict[TopicPartition, PartitionFetchState] = {}
        valid_until = 1 << 62
        for tp, s in self._states.items():
            if s.kind is not kind:
                continue
            if s.is_ready(now_ms):
                out[tp] = s
            elif kind is not FetchStateKind.FENCED and s.delayed_until_ms < valid_until:
                valid_until = s.delayed_until_ms
        self._ready[kind] = (self.version, valid_until, out)
        return out

    def next_ready_ms(self) -> int | None:
        """When the earliest delayed partition becomes ready (None: nothing will)."""
        times = [
            s.delayed_until_ms for s in self._states.values() if s.kind is not FetchStateKind.FENCED
        ]
        return min(times) if times else None

    def unchanged(self, tp: TopicPartition, sent: PartitionFetchState) -> bool:
        """Whether an answer to a request built from `sent` still applies (Kafka drops answers
        for partitions removed, re-added or moved meanwhile)."""
        current = self._states.get(tp)
        return (
            current is not None
            and current.current_leader_epoch == sent.current_leader_epoch
            and current.kind is sent.kind
            and current.fetch_offset == sent.fetch_offset
        )

    def fetching_at(
        self,
        tp: TopicPartition,
        offset: int,
        last_fetched_epoch: int | None,
        lag: int | None = None,
    ) -> None:
        s = self._states[tp]
        self.version += 1
        # Every field given (once a partition a fetch): `replace` costs several times more.
        self._states[tp] = PartitionFetchState(
            fetch_offset=offset,
            current_leader_epoch=s.current_leader_epoch,
            kind=FetchStateKind.FETCHING,
            delayed_until_ms=0,
            last_fetched_epoch=UNDEFINED_EPOCH
            if last_fetched_epoch is None
            else last_fetched_epoch,
            lag=s.lag if lag is None else lag,
        )

    def truncating_at(self, tp: TopicPartition, offset: int) -> None:
        s = self._states[tp]
        self.version += 1
        self._states[tp] = replace(
            s, fetch_offset=offset, kind=FetchStateKind.TRUNCATING, delayed_until_ms=0
        )

    def delay(self, tp: TopicPartition, until_ms: int) -> None:
        s = self._states.get(tp)
        if s is not None:
            self.version += 1
            self._states[tp] = replace(s, delayed_until_ms=until_ms)

    def delay_all(self, tps: Iterable[TopicPartition], until_ms: int) -> None:
        for tp in tps:
            self.delay(tp, until_ms)

    def fence(self, tp: TopicPartition, request_epoch: int) -> None:
        s = self._states.get(tp)
        if s is not None and s.current_leader_epoch == request_epoch:
            self.version += 1
            self._states[tp] = replace(s, kind=FetchStateKind.FENCED)

    def on_error(
        self,
        tp: TopicPartition,
        sent: PartitionFetchState,
        code: ErrorCode,
        now_ms: int,
        backoff_ms: int,
    ) -> None:
        """A partition-level error from the leader (not OFFSET_OUT_OF_RANGE)."""
        if code == ErrorCode.fenced_leader_epoch:
            self.fence(tp, sent.current_leader_epoch)
        else:
            # NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH (the leader has not yet seen the
            # LeaderAndIsr), UNKNOWN_TOPIC_OR_PARTITION, storage errors...: retry later.
            self.delay(tp, now_ms + backoff_ms)


# --- what the leader answers (decoded) ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FetchPosition:
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    error_code: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""  # the network endpoint's: a view of the answer frame
    diverging_epoch: EpochEndOffset | None = None


@dataclass(frozen=True, slots=True)
class EpochAnswer:
    error_code: ErrorCode
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class LogOffsets:
    error_code: ErrorCode
    log_start_offset: int = -1
    log_end_offset: int = -1


class LeaderEndpoint(Protocol):
    """How a fetcher reaches its leader (Kafka's LeaderEndPoint). Methods raise
    ConnectionError / OSError / TimeoutError when the leader cannot be reached."""

    async def fetch(
        self,
        partitions: Mapping[TopicPartition, FetchPosition],
        limits: FetchLimits,
    ) -> dict[TopicPartition, FetchedPartition]: ...

    async def end_offsets_for_epochs(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochAnswer]:
        """{tp: (current leader epoch, epoch asked about)} → the leader's answers."""
        ...

    async def log_offsets(self, tp: TopicPartition, current_leader_epoch: int) -> LogOffsets: ...

    async def close(self) -> None: ...


LogLookup = Callable[[TopicPartition], Log | None]


# --- one fetcher per source broker ----------------------------------------------------------
class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader (Kafka's fetcher thread)."""

    def __init__(
        self,
        *,
        broker_id: int,
        source_broker_id: int,
        endpoint: LeaderEndpoint,
        log_for: LogLookup,
        monotonic_ms: Callable[[], int],
        config: FetcherConfig,
        quota: ReplicationQuotaManager | None = None,
        on_high_watermark: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.source_broker_id = source_broker_id
        # Told when a followed partition's HW moves: consumers read followers up to it.
        self._on_high_watermark = on_high_watermark
        self.quota = quota  # KIP-73 follower quota (None: never throttled)
        self.endpoint = endpoint
        self._log_for = log_for
        self._ms = monotonic_ms
        self.config = config
        self.states = FetchStates()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._prefix = f"[ReplicaFetcher replicaId={broker_id}, leaderId={source_broker_id}]"
        self._positions: dict[TopicPartition, tuple[PartitionFetchState, FetchPosition]] = {}
        self._positions_refreshed_ms = monotonic_ms()
        self._last: (
            tuple[Mapping[TopicPartition, PartitionFetchState], dict[TopicPartition, FetchPosition]]
            | None
        ) = None

    # -- partitions -------------------------------------------------------------------------
    def add_partition(self, tp: TopicPartition, leader_epoch: int) -> int | None:
        """Follow `tp` from `leader_epoch`; its log end offset if it was not followed at that
        epoch already, else None. The manager logs what its fetchers added, one line each."""
        plog = self._log_for(tp)
        leo = plog.log_end_offset if plog is not None else 0
        added = self.states.add(tp, leader_epoch, leo)
        self._wakeup.set()
        return leo if added else None

    def remove_partition(self, tp: TopicPartition) -> bool:
        removed = self.states.remove(tp) is not None
        self._wakeup.set()
        return removed

    @property
    def partition_count(self) -> int:
        return len(self.states)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.broker_id}-from-{self.source_broker_id}"
            )

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def shutdown(self) -> None:
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await cancel_and_wait(task)
            except Exception:
                log.exception("%s failed", self._prefix)
        await self.endpoint.close()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                worked = await self.do_work()
            except Exception:
                # A local failure (e.g. a log closed by StopReplica meanwhile) must not end
                # replication of the other partitions.
                log.exception("%s Error in a fetch round; backing off", self._prefix)
                self.states.delay_all(self.states.partitions(), self._ms() + self.config.backoff_ms)
                worked = False
            if not worked:
                await self._idle_wait()

    async def _idle_wait(self) -> None:
        self._wakeup.clear()
        nxt = self.states.next_ready_ms()
        timeout = None if nxt is None else max(0.0, (nxt - self._ms()) / 1000)
        await wait_event(self._wakeup, timeout)

    async def do_work(self) -> bool:
        """One round: truncate what needs it, else fetch; False if nothing was ready."""
        now = self._ms()
        truncating = self.states.ready(FetchStateKind.TRUNCATING, now)
        if truncating:
            await self.truncate(truncating)
            return True
        fetching = self.states.ready(FetchStateKind.FETCHING, now)
        quota = self.quota
        if fetching and quota is not None and quota.is_quota_exceeded(now):
            # Kafka's shouldFollowerThrottle: out-of-sync throttled partitions wait.
            held = [tp for tp, s in fetching.items() if quota.is_throttled(tp) and not s.in_sync]
            fetching = {tp: s for tp, s in fetching.items() if tp not in set(held)}
            if not fetching:  # nothing left to ask for: back off (Kafka's fetchBackOffMs)
                self.states.delay_all(held, now + self.config.backoff_ms)
                return True
        if fetching:
            await self.fetch(fetching)
            return True
        return False

    # -- truncation (KIP-101 / KIP-279) --------------------------------------------------------
    async def truncate(self, sent: Mapping[TopicPartition, PartitionFetchState]) -> None:
        ask: dict[TopicPartition, tuple[int, int]] = {}
        for tp, s in sent.items():
            plog = self._log_for(tp)
            if plog is None:
                self.states.delay(tp, self._ms() + self.config.backoff_ms)
                continue
            latest = plog.latest_epoch
            if latest is None:
                # No epochs known locally (empty log, or never tracked): the high watermark
                # is the only safe point (Kafka's truncateToHighWatermark).
                self._truncate_log(tp, plog, plog.high_watermark)
                self.states.fetching_at(tp, plog.log_end_offset, plog.latest_epoch)
                continue
            ask[tp] = (s.current_leader_epoch, latest)
        if not ask:
            return
        try:
            answers = await self.endpoint.end_offsets_for_epochs(ask)
        except (ConnectionError, OSError, TimeoutError) as e:
            self._on_connection_error(list(ask), e)
            return
        now = self._ms()
        for tp in ask:
            s = sent[tp]
            if not self.states.unchanged(tp, s):
                continue
            ans = answers.get(tp)
            if ans is None:
                self.states.delay(tp, now + self.config.backoff_ms)
                continue
            if ans.error_code != ErrorCode.none:
                log.info(
                    "%s OffsetForLeaderEpoch for %s-%d failed: %s",
                    self._prefix,
                    tp.topic,
                    tp.partition,
                    ErrorCode(ans.error_code).name,
                )
                self.states.on_error(tp, s, ErrorCode(ans.error_code), now, self.config.backoff_ms)
                continue
            plog = self._log_for(tp)
            if plog is None:
                self.states.delay(tp, now + self.config.backoff_ms)
                continue
            self._apply_epoch_end_offset(tp, plog, EpochEndOffset(ans.leader_epoch, ans.end_offset))

    def _apply_epoch_end_offset(
        self, tp: TopicPartition, plog: Log, leader: EpochEndOffset
    ) -> None:
        own = plog.end_offset_for_epoch(leader.leader_epoch) if leader.leader_epoch >= 0 else None
        decision = truncation_point(
            leader,
            follower_end_offset_for=None if own is None or own[1] < 0 else own,
            follower_log_end_offset=plog.log_end_offset,
            follower_high_watermark=plog.high_watermark,
        )
        self._truncate_log(tp, plog, decision.offset)
        if decision.completed:
            self.states.fetching_at(tp, plog.log_end_offset, plog.latest_epoch)
        else:
            self.states.truncating_at(tp, plog.log_end_offset)

    def _truncate_log(self, tp: TopicPartition, plog: Log, offset: int) -> None:
        if offset >= plog.log_end_offset:
            plog.truncate_to(offset)  # no data goes; an empty epoch at the log end does
            return
        if offset < plog.high_watermark:
            log.warning(
                "%s Truncating %s-%d to offset %d below its high watermark %d",
                self._prefix,
                tp.topic,
                tp.partition,
                offset,
                plog.high_watermark,
            )
        else:
            log.info(
                "%s Truncating %s-%d to offset %d (log end offset %d)",
                self._prefix,
                tp.topic,
                tp.partition,
                offset,
                plog.log_end_offset,
            )
        plog.truncate_to(max(offset, 0))

    # -- fetch ----------------------------------------------------------------------------------
    def _positions_of(
        self, sent: Mapping[TopicPartition, PartitionFetchState]
    ) -> dict[TopicPartition, FetchPosition]:
        """Each partition's position; a partition whose fetch state did not change since the
        last round keeps its position object (its log start offset is looked up again only
        every POSITION_REFRESH_MS), so a round over thousands of idle partitions is cheap
        and the fetch session sees them unchanged."""
        now = self._ms()
        cache = self._positions
        if now - self._positions_refreshed_ms >= POSITION_REFRESH_MS:
            cache.clear()
            self._positions_refreshed_ms = now
            self._last = None
        last = self._last
        if last is not None and last[0] is sent:
            return last[1]  # the same ready partitions in the same states: same positions
        positions: dict[TopicPartition, FetchPosition] = {}
        for tp, s in sent.items():
            hit = cache.get(tp)
            if hit is not None and hit[0] is s:
                positions[tp] = hit[1]
                continue
            plog = self._log_for(tp)
            pos = FetchPosition(
                s.fetch_offset,
                s.current_leader_epoch,
                s.last_fetched_epoch,
                plog.log_start_offset if plog is not None else -1,
            )
            cache[tp] = (s, pos)
            positions[tp] = pos
        if len(cache) > 2 * len(sent) + 64:  # forget partitions no longer fetched
            for tp in [tp for tp in cache if tp not in sent]:
                del cache[tp]
        self._last = (sent, positions)
        return positions

    async def fetch(self, sent: Mapping[TopicPartition, PartitionFetchState]) -> None:
        positions = self._positions_of(sent)
        try:
            answers = await self.endpoint.fetch(positions, self.config.limits)
        except (ConnectionError, OSError, TimeoutError) as e:
            self._on_connection_error(list(sent), e)
            return
        out_of_range: list[TopicPartition] = []
        for tp, ans in answers.items():  # an incremental answer: only what changed
            s = sent.get(tp)
            if s is None or not self.states.unchanged(tp, s):
                continue
            if ans.error_code == ErrorCode.none:
                self._process_partition_data(tp, s, ans)
            elif ans.error_code == ErrorCode.offset_out_of_range:
                out_of_range.append(tp)
            else:
                log.info(
                    "%s Fetch of %s-%d at offset %d failed: %s",
                    self._prefix,
                    tp.topic,
                    tp.partition,
                    s.fetch_offset,
                    ErrorCode(ans.error_code).name,
                )
                self.states.on_error(
                    tp, s, ErrorCode(ans.error_code), self._ms(), self.config.backoff_ms
                )
        for tp in out_of_range:
            await self._handle_out_of_range(tp, sent[tp])

    def _process_partition_data(
        self, tp: TopicPartition, sent: PartitionFetchState, data: FetchedPartition
    ) -> None:
        plog = self._log_for(tp)
        if plog is None:
            self.states.delay(tp, self._ms() + self.config.backoff_ms)
            return
        if data.diverging_epoch is not None:
            log.info(
                "%s %s-%d diverges from the leader at epoch %d, end offset %d",
                self._prefix,
                tp.topic,
                tp.partition,
                data.diverging_epoch.leader_epoch,
                data.diverging_epoch.end_offset,
            )
            self._apply_epoch_end_offset(tp, plog, data.diverging_epoch)
            return
        try:
            if data.records:
                if plog.log_end_offset != sent.fetch_offset:
                    raise RuntimeError(
                        f"offset mismatch for {tp}: fetched at {sent.fetch_offset}, "
                        f"log end offset {plog.log_end_offset}"
                    )
                plog.append_as_follower(data.records)
                if self.quota is not None and self.quota.is_throttled(tp):
                    self.quota.record(len(data.records), self._ms())
            hw_before = plog.high_watermark
            plog.update_high_watermark(min(data.high_watermark, plog.log_end_offset))
            if self._on_high_watermark is not None and plog.high_watermark != hw_before:
                self._on_high_watermark(tp)
            if data.log_start_offset > plog.log_start_offset:
                try:
                    plog.maybe_increment_log_start_offset(
                        data.log_start_offset, "leader log start offset incremented"
                    )
                except OffsetOutOfRangeError:
                    pass  # above our high watermark for now; the next fetch moves it
        except StorageError:  # its log dir went offline (logged once); the node stops it
            self.states.delay(tp, self._ms() + self.config.backoff_ms)
            return
        except Exception:
            log.exception(
                "%s Failed to append fetched data of %s-%d at offset %d",
                self._prefix,
                tp.topic,
                tp.partition,
                sent.fetch_offset,
            )
            self.states.delay(tp, self._ms() + self.config.backoff_ms)
            return
        lag = max(0, data.high_watermark - plog.log_end_offset) if data.records else None
        self.states.fetching_at(tp, plog.log_end_offset, plog.latest_epoch, lag)

    async def _handle_out_of_range(self, tp: TopicPartition, sent: PartitionFetchState) -> None:
        try:
            offsets = await self.endpoint.log_offsets(tp, sent.current_leader_epoch)
        except (ConnectionError, OSError, TimeoutError) as e:
            self._on_connection_error([tp], e)
            return
        if not self.states.unchanged(tp, sent):
            return
        now = self._ms()
        if offsets.error_code != ErrorCode.none:
            self.states.on_error(tp, sent, offsets.error_code, now, self.config.backoff_ms)
            return
        plog = self._log_for(tp)
        if plog is None:
            self.states.delay(tp, now + self.config.backoff_ms)
            return
        action = out_of_range_action(
            follower_log_end_offset=plog.log_end_offset,
            leader_log_end_offset=offsets.log_end_offset,
            leader_log_start_offset=offsets.log_start_offset,
        )
        log.warning(
            "%s %s-%d: offset %d out of range on the leader (log start %d, end %d); "
            "%s and fetch from %d",
            self._prefix,
            tp.topic,
            tp.partition,
            sent.fetch_offset,
            offsets.log_start_offset,
            offsets.log_end_offset,
            "truncate fully" if action.truncate_fully else "truncate",
            action.fetch_offset,
        )
        if action.truncate_fully:
            plog.truncate_fully_and_start_at(action.fetch_offset)
        else:
            self._truncate_log(tp, plog, action.fetch_offset)
        self.states.fetching_at(tp, plog.log_end_offset, plog.latest_epoch)

    def _on_connection_error(self, tps: list[TopicPartition], e: BaseException) -> None:
        log.warning(
            "%s Error reaching the leader (%s: %s); retrying in %d ms",
            self._prefix,
            type(e).__name__,
            e,
            self.config.backoff_ms,
        )
        self.states.delay_all(tps, self._ms() + self.config.backoff_ms)


# --- the manager ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeaderAddress:
    broker_id: int
    host: str
    port: int


EndpointFactory = Callable[[LeaderAddress], LeaderEndpoint]


class ReplicaFetcherManager:
    """Fetchers by source broker: partitions move between them on leadership
    changes; a fetcher left without partitions is shut down."""

    def __init__(
        self,
        broker_id: int,
        *,
        log_for: LogLookup,
        endpoint_factory: EndpointFactory,
        monotonic_ms: Callable[[], int],
        config: FetcherConfig | None = None,
        quota: ReplicationQuotaManager | None = None,
        on_high_watermark: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.quota = quota
        self._on_high_watermark = on_high_watermark
        self._log_for = log_for
        self._endpoint_factory = endpoint_factory
        self._ms = monotonic_ms
        self.config = config or FetcherConfig()
        self.fetchers: dict[int, tuple[LeaderAddress, ReplicaFetcher]] = {}
        self._partition_source: dict[TopicPartition, int] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def fetcher_for(self, tp: TopicPartition) -> ReplicaFetcher | None:
        source = self._partition_source.get(tp)
        return None if source is None else self.fetchers[source][1]

    def add_partitions(
        self, partitions: Mapping[TopicPartition, tuple[LeaderAddress, int]]
    ) -> None:
        """Follow each partition from its leader at its leader epoch (must run on the loop).
        What changed is logged once per fetcher, as Kafka's ReplicaFetcherManager does."""
        added: dict[int, list[str]] = {}
        removed: dict[int, list[str]] = {}
        for tp, (leader, epoch) in partitions.items():
            source = self._partition_source.get(tp)
            if source is not None and source != leader.broker_id:
                if self.fetchers[source][1].remove_partition(tp):
                    removed.setdefault(source, []).append(f"{tp.topic}-{tp.partition}")
                del self._partition_source[tp]
            entry = self.fetchers.get(leader.broker_id)
            if entry is not None and entry[0] != leader:
                # The leader's address changed: start over with a new fetcher.
                self._retire(leader.broker_id)
                entry = None
            if entry is None:
                fetcher = ReplicaFetcher(
                    broker_id=self.broker_id,
                    source_broker_id=leader.broker_id,
                    endpoint=self._endpoint_factory(leader),
                    log_for=self._log_for,
                    monotonic_ms=self._ms,
                    config=self.config,
                    quota=self.quota,
                    on_high_watermark=self._on_high_watermark,
                )
                entry = (leader, fetcher)
                self.fetchers[leader.broker_id] = entry
                fetcher.start()
            leo = entry[1].add_partition(tp, epoch)
            if leo is not None:
                added.setdefault(leader.broker_id, []).append(
                    f"{tp.topic}-{tp.partition} (leader epoch {epoch}, log end offset {leo})"
                )
            self._partition_source[tp] = leader.broker_id
        self._log_changes(removed, added)
        self.shutdown_idle_fetchers()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        removed: dict[int, list[str]] = {}
        for tp in tps:
            source = self._partition_source.pop(tp, None)
            if (
                source is not None
                and source in self.fetchers
                and self.fetchers[source][1].remove_partition(tp)
            ):
                removed.setdefault(source, []).append(f"{tp.topic}-{tp.partition}")
        self._log_changes(removed, {})
        self.shutdown_idle_fetchers()

    def _log_changes(self, removed: dict[int, list[str]], added: dict[int, list[str]]) -> None:
        prefix = f"[ReplicaFetcherManager on broker {self.broker_id}]"
        for source, names in removed.items():
            log.info("%s Removed fetcher from broker %d for %d partitions: %s",
                     prefix, source, len(names), ", ".join(names))
        for source, names in added.items():
            log.info("%s Added fetcher to broker %d for %d partitions: %s",
                     prefix, source, len(names), ", ".join(names))

    def shutdown_idle_fetchers(self) -> None:
        for source, (_, fetcher) in list(self.fetchers.items()):
            if fetcher.partition_count == 0:
                self._retire(source)

    def _retire(self, source: int) -> None:
        _, fetcher = self.fetchers.pop(source)
        for tp in fetcher.states.partitions():
            self._partition_source.pop(tp, None)
        task = asyncio.get_running_loop().create_task(fetcher.shutdown())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def shutdown(self) -> None:
        fetchers = [f for _, f in self.fetchers.values()]
        self.fetchers.clear()
        self._partition_source.clear()
        for f in fetchers:
            await f.shutdown()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
