"""The replica manager: every partition on this broker.

It applies the controller's LeaderAndIsr/StopReplica, appends produced batches, serves fetches,
and parks acks=all produces and waiting fetches in purgatories keyed by partition. It is free
of sockets and asyncio: results go to `respond` callbacks, time comes in as `now_ms`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.errors import OffsetOutOfRangeError, StorageError
from wherry.log.file_region import FileRegion
from wherry.log.manager import LogManager
from wherry.protocol.interbroker import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaRequest,
)
from wherry.protocol.records import RecordError, validate_batch
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.replication.alter_partition import (
    AlterPartitionItem,
    AlterPartitionManager,
    AlterPartitionResult,
)
from wherry.replication.delayed import DelayedFetch, DelayedProduce, ProducePartitionStatus
from wherry.replication.fetch_reads import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPartition,
    FetchPartitionResult,
    FetchResult,
    has_news,
    read_log,
    select_for_session,
    session_partitions,
)
from wherry.replication.fetch_session import FetchSession, FetchSessionCache
from wherry.replication.isr import AlterOutcome, CommittedPartitionState, PendingIsrState
from wherry.replication.partition import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    Partition,
    PartitionError,
    epoch_end_offset,
)
from wherry.replication.quota import ReplicationQuotaManager
from wherry.replication.replica_selector import ClientMetadata, preferred_read_replica
from wherry.replication.topic_stats import BrokerTopicStats
from wherry.runtime.state_change_log import batched_lines, log_broker_partition_change

log = logging.getLogger(__name__)

DEBUGGING_CONSUMER_ID = -2
"""Fetch replica id of Kafka's debugging consumer (FetchRequest.DEBUGGING_CONSUMER_ID): may
read a follower, up to its log end, recording nothing."""

ProduceResult = Mapping[TopicPartition, ProducePartitionStatus]

LeadershipListener = Callable[[list[tuple[TopicPartition, int]], list[TopicPartition]], None]
"""(partitions this broker now leads, with their leader epoch; partitions it stopped leading
or hosting). Called after LeaderAndIsr and StopReplica, on the event loop."""


SESSION_WATCH_KEY = "fetch-session"
"""Parked incremental fetches are watched under (SESSION_WATCH_KEY, session id): one key per
fetch however many partitions its session holds."""


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        config_for: Callable[[str], LogConfig],
        produce_purgatory: DelayedOperationPurgatory,
        fetch_purgatory: DelayedOperationPurgatory,
        monotonic_ms: Callable[[], int],
        *,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        alter_partition_manager: AlterPartitionManager | None = None,
        is_broker_alive: Callable[[int], bool] | None = None,
        broker_epoch: Callable[[], int] | None = None,
        leader_quota: ReplicationQuotaManager | None = None,
        fetch_sessions: FetchSessionCache | None = None,
        on_leadership_change: LeadershipListener | None = None,
    ) -> None:
        self._monotonic_ms = monotonic_ms
        # KIP-73: bytes sent to followers of throttled partitions (None: never throttled).
        self.leader_quota = leader_quota
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # Where proposed ISR changes go; None: they stay pending (a single broker
        # never proposes any: it has no followers).
        self.alter_partition_manager = alter_partition_manager
        # A replica may join the ISR only while its broker is alive (ZooKeeper
        # mode: registered, as the metadata cache knows it).
        self.is_broker_alive: Callable[[int], bool] = is_broker_alive or (lambda _: True)
        self.broker_epoch: Callable[[], int] = broker_epoch or (lambda: -1)
        # Committed ISR changes this broker proposed as leader (Kafka's IsrExpandsPerSec /
        # IsrShrinksPerSec: AlterPartition commits only, not the controller's own changes).
        self.isr_expands = 0
        self.isr_shrinks = 0
        # Bytes and messages in/out per topic (Kafka's BrokerTopicMetrics).
        self.topic_stats = BrokerTopicStats()
        self.broker_id = broker_id
        self.log_manager = log_manager
        self._config_for = config_for
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.partitions: dict[TopicPartition, Partition] = {}
        # KIP-112: partitions whose log dir went offline (Kafka's HostedPartition.Offline):
        # they answer KAFKA_STORAGE_ERROR until the broker restarts.
        self.offline_partitions: set[TopicPartition] = set()
        # Told of the partitions this broker starts or stops leading (`LeadershipListener`).
        self._on_leadership_change = on_leadership_change
        # KIP-227 sessions (None: every fetch is sessionless); told of every partition change.
        self.fetch_sessions = fetch_sessions
        # Follower id → led partitions it is not (committed) in the ISR of: its incremental
        # fetches read them every time, so their follower state moves and they can rejoin.
        self._lagging: dict[int, set[TopicPartition]] = {}

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def missing_partition_error(self, tp: TopicPartition, default: ErrorCode) -> ErrorCode:
        """The error for a partition not served here: KAFKA_STORAGE_ERROR when its log dir
        went offline, else `default`."""
        return ErrorCode.kafka_storage_error if tp in self.offline_partitions else default

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        p = self.partitions.get(tp)
        if p is None:
            raise PartitionError(
                self.missing_partition_error(tp, ErrorCode.unknown_topic_or_partition)
            )
        p.require_leader(current_leader_epoch)
        return p

    # --- controller requests -------------------------------------------------------------
    def become_leader_or_follower(
        self, req: LeaderAndIsrRequest, now_ms: int
    ) -> list[TopicPartition]:
        """Apply partition states the replica node has judged (`replication/node.py` owns
        the epoch and replica-list rules): lead or follow each, and re-check parked requests.
        Returns the partitions whose log could not be opened or created (a failed log dir):
        they are offline here and answer KAFKA_STORAGE_ERROR."""
        became_leader: list[tuple[TopicPartition, int]] = []
        became_follower: list[TopicPartition] = []
        failed: list[TopicPartition] = []
        # Two state-change lines per partition written as one record; the new logs' dirs
        # fsynced once at the end, before anything is served or answered (no await here).
        with batched_lines(), self.log_manager.batched_dir_syncs():
            for st in req.partition_states:
                try:
                    self._apply_partition_state(req, st, became_leader, became_follower)
                except StorageError as e:
                    tp = TopicPartition(st.topic_name, st.partition_index)
                    log.error("[ReplicaManager broker=%d] %s is offline: %s",
                              self.broker_id, tp, e)
                    self.offline_partitions.add(tp)
                    failed.append(tp)
        if self._on_leadership_change is not None and (became_leader or became_follower):
            self._on_leadership_change(became_leader, became_follower)
        return failed

    def _apply_partition_state(
        self,
        req: LeaderAndIsrRequest,
        st: LeaderAndIsrPartitionState,
        became_leader: list[tuple[TopicPartition, int]],
        became_follower: list[TopicPartition],
    ) -> None:
        tp = TopicPartition(st.topic_name, st.partition_index)
        current = self.partitions.get(tp)
        part = current or self._create_partition(tp, req.topic_ids.get(tp.topic), st.is_new)
        old_role = _role(current)
        if st.leader == self.broker_id:
            part.make_leader(st, self._monotonic_ms())  # follower lag: monotonic
            became_leader.append((tp, st.leader_epoch))
        else:
            part.make_follower(st)
            became_follower.append(tp)
        log_broker_partition_change(
            self.broker_id,
            tp.topic,
            tp.partition,
            old_role,
            _role(part),
            leader=st.leader,
            leader_epoch=st.leader_epoch,
            isr=st.isr,
            controller_epoch=req.controller_epoch,
            high_watermark=part.high_watermark,
            log_end_offset=part.log.log_end_offset,
        )
        self._note_isr(part)
        # Parked requests re-check under the new leadership.
        self._try_complete_delayed(tp)

    def _create_partition(
        self, tp: TopicPartition, topic_id: object, is_new: bool = True
    ) -> Partition:
        plog = self.log_manager.get_or_create_log(tp, self._config_for(tp.topic), is_new=is_new)
        part = Partition(
            tp=tp,
            local_broker_id=self.broker_id,
            log=plog,
            topic_id=topic_id,  # type: ignore[arg-type]
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            is_replica_isr_eligible=lambda r: self.is_broker_alive(r),
            local_broker_epoch=lambda: self.broker_epoch(),
        )
        self.partitions[tp] = part
        return part

    def stop_replicas(self, req: StopReplicaRequest) -> list[TopicPartition]:
        """Stop hosting the judged partitions: they leave the partition map, parked requests
        on them complete (NOT_LEADER_OR_FOLLOWER), the leadership listener hears of it.
        Returns the partitions whose logs must now be deleted; the caller deletes them
        (`LogManager.delete_log`: file work, fit for an executor), after this returns."""
        to_delete: list[TopicPartition] = []
        for sp in req.partitions:
            tp = TopicPartition(sp.topic_name, sp.partition_index)
            part = self.partitions.pop(tp, None)
            if part is not None:
                part.leader_id = -1
                self._note_isr(part)
            if sp.delete_partition:
                to_delete.append(tp)
            log_broker_partition_change(
                self.broker_id,
                tp.topic,
                tp.partition,
                _role(part),
                "Deleted" if sp.delete_partition else "Stopped",
                leader=-1,
                leader_epoch=sp.leader_epoch,
                isr=(),
                controller_epoch=req.controller_epoch,
            )
            self._try_complete_delayed(tp)
        if self._on_leadership_change is not None and req.partitions:
            self._on_leadership_change(
                [], [TopicPartition(sp.topic_name, sp.partition_index) for sp in req.partitions]
            )
        return to_delete

    def mark_offline(self, dir: Path) -> list[TopicPartition]:
        """Kafka's handleLogDirFailure, the replica manager's part: the partitions whose log
        is in offline `dir` stop being served (parked requests on them complete, the
        leadership listener hears of it) and answer KAFKA_STORAGE_ERROR from now on."""
        gone = [tp for tp, part in self.partitions.items() if part.log.dir.parent == dir]
        for tp in gone:
            self.partitions.pop(tp).leader_id = -1
            self.offline_partitions.add(tp)
        for tp in gone:
            self._try_complete_delayed(tp)
        if self._on_leadership_change is not None and gone:
            self._on_leadership_change([], gone)
        return gone

    def update_config(self, topic: str, config: LogConfig) -> None:
        self.log_manager.update_config(topic, config)

    # --- produce -------------------------------------------------------------------------
    def append_records(
        self,
        *,
        timeout_ms: int,
        required_acks: int,
        entries: Mapping[TopicPartition, bytes | None],
        respond: Callable[[ProduceResult], None],
        now_ms: int,
        from_coordinator: bool = False,
    ) -> DelayedProduce | None:
        """Append each partition's batch as its leader; `from_coordinator` for the transaction
        coordinator's markers (WriteTxnMarkers), which clients may not write. Returns the
        operation parked until the ISR has the records (acks=all), if any."""
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, data in entries.items():
            statuses[tp] = self._append_one(tp, data, required_acks, now_ms, from_coordinator)
        waiting: list[TopicPartition] = []
        for tp, s in statuses.items():
            s.acks_pending = False
            if required_acks != -1 or s.error_code != ErrorCode.none:
                continue
            part = self.partitions.get(tp)
            # The HW covers the append already (the ISR is the leader alone, or the followers
            # caught up): the purgatory's first check, made here without parking anything.
            done = None
            if part is not None and part.log.high_watermark >= s.required_offset:
                done = self._acks_check(tp, s)
            if done is None:
                s.acks_pending = True
                waiting.append(tp)
            else:
                s.error_code = done
        if not waiting:
            respond(statuses)
            return None
        op = DelayedProduce(timeout_ms, statuses, self._acks_check, respond)
        self.produce_purgatory.try_complete_else_watch(op, waiting, now_ms=self._monotonic_ms())
        return op

    def _acks_check(self, tp: TopicPartition, st: ProducePartitionStatus) -> ErrorCode | None:
        part = self.partitions.get(tp)
        if part is None:  # stopped or deleted meanwhile (or its dir failed): leadership lost
            return self.missing_partition_error(tp, ErrorCode.not_leader_or_follower)
        return part.acks_all_satisfied(st.required_offset, part.log.config.min_insync_replicas)

    def _append_one(
        self,
        tp: TopicPartition,
        data: bytes | bytearray | memoryview | None,
        required_acks: int,
        now_ms: int,
        from_coordinator: bool = False,
    ) -> ProducePartitionStatus:
        def failed(
            code: ErrorCode,
            msg: str | None = None,
            record_errors: Iterable[tuple[int, str]] = (),
        ) -> ProducePartitionStatus:
            return ProducePartitionStatus(
                -1, code, -1, -1, -1, msg, acks_pending=False, record_errors=tuple(record_errors)
            )

        part = self.partitions.get(tp)
        if part is None:
            return failed(self.missing_partition_error(tp, ErrorCode.unknown_topic_or_partition))
        if not part.is_leader:
            return failed(ErrorCode.not_leader_or_follower)
        if not data:
            return failed(ErrorCode.invalid_record, "produce request without records")
        cfg = part.log.config
        try:
            # A produce request carries exactly one batch per partition; validated here once
            # (framing, magic, CRC, records, max.message.bytes), so the log need not repeat it.
            header = validate_batch(data, max_message_bytes=cfg.max_message_bytes)
            info = part.append_records_to_leader(
                data,
                required_acks=required_acks,
                min_insync_replicas=cfg.min_insync_replicas,
                now_ms=now_ms,
                lag_clock_ms=self._monotonic_ms(),
                from_coordinator=from_coordinator,
                header=header,
            )
        except RecordError as e:
            log.info(
                "[ReplicaManager broker=%d] rejected batch for %s-%d: %s",
                self.broker_id,
                tp.topic,
                tp.partition,
                e,
            )
            return failed(e.error_code, str(e))
        except PartitionError as e:
            return failed(e.error_code, str(e))
        except Exception as e:
            code = getattr(e, "error_code", None)
            if isinstance(code, ErrorCode):
                return failed(code, str(e), getattr(e, "record_errors", ()))
            log.exception(
                "[ReplicaManager broker=%d] append to %s-%d failed",
                self.broker_id,
                tp.topic,
                tp.partition,
            )
            return failed(ErrorCode.kafka_storage_error, str(e))
        if not info.duplicate:
            count = info.last_offset - info.first_offset + 1
            self.topic_stats.record_in(tp.topic, len(data), count)
            # New data: wake fetches parked on this partition (HW may have moved).
            self._wake_fetches(tp)
        return ProducePartitionStatus(
            required_offset=info.last_offset + 1,
            error_code=ErrorCode.none,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=info.log_start_offset,
        )

    # --- OffsetForLeaderEpoch (KIP-101, KIP-279, KIP-320) ------------------------------------
    def last_offset_for_leader_epoch(
        self,
        tp: TopicPartition,
        *,
        current_leader_epoch: int,
        leader_epoch: int,
        replica_id: int,
        known_partition: bool = False,
    ) -> tuple[ErrorCode, int, int]:
        """(error, epoch, end offset): the largest epoch <= `leader_epoch` in the leader's
        epoch cache and where it ends (Kafka's `Partition.lastOffsetForLeaderEpoch`).
        See `partition.epoch_end_offset`."""
        return epoch_end_offset(
            self.partitions.get(tp),
            current_leader_epoch=current_leader_epoch,
            leader_epoch=leader_epoch,
            replica_id=replica_id,
            known_partition=known_partition,
        )

    # --- fetch -----------------------------------------------------------------------------
    def fetch_messages(
        self,
        *,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partitions: Sequence[FetchPartition],
        respond: Callable[[FetchResult], None],
        replica_epoch: int = -1,
        isolation_level: int = READ_UNCOMMITTED,
        zero_copy: bool = False,
        session: FetchSession | None = None,
        incremental: bool = False,
        allowed: Callable[[TopicPartition], bool] | None = None,
        client: ClientMetadata | None = None,
    ) -> DelayedFetch | None:
        """Serve a Fetch (the operation it parked, if it waits for `min_bytes`); `replica_id`
        >= 0 marks a follower (its broker epoch, Fetch v15+'s
        `replica_state.replica_epoch`, in `replica_epoch`; -1 when not sent). A consumer
        with `isolation_level` READ_COMMITTED reads below the LSO only. With `zero_copy` the
        records are `FileRegion`s (read_committed reads excepted).

        With a fetch `session` (KIP-227) every answer is recorded in it; an `incremental`
        fetch reads `partitions` (those the request named plus the session's changed ones,
        chosen by the caller), answers only what has something new, and, parked, waits on
        the session alone: partitions of the session that change meanwhile (and pass
        `allowed`) are read when it completes. `client`: a consumer's Fetch v11+ metadata
        (KIP-392, see `read_from_local_log`)."""
        quota = self.leader_quota
        if replica_id >= 0 and quota is not None:
            respond = self._recording_throttled_bytes(quota, respond)
        elif replica_id < 0:
            respond = self._counting_bytes_out(respond)
        result = self.read_from_local_log(
            replica_id,
            max_bytes,
            partitions,
            replica_epoch=replica_epoch,
            isolation_level=isolation_level,
            zero_copy=zero_copy,
            client=client,
        )
        total = sum(len(r.records) for r in result.values())
        # An error, or a client sent to another replica, is answered at once (Kafka).
        errored = any(
            r.error_code != ErrorCode.none or r.preferred_read_replica >= 0
            for r in result.values()
        )
        if session is not None:
            respond = self._answering_for_session(
                session,
                respond,
                full=not incremental,
                replica_id=replica_id,
                isolation_level=isolation_level,
            )
            if not incremental:
                session.dirty.clear()  # a full fetch reads every partition of its session
        nothing_asked = not partitions and session is None
        if max_wait_ms <= 0 or nothing_asked or total >= min_bytes or errored:
            respond(result)
            return None
        may_read = allowed or (lambda _tp: True)
        base = list(partitions)
        if session is not None and incremental:
            # Parked, an incremental fetch reads again only what had news in this first
            # read and what changes meanwhile (marked by `_wake_fetches`), not every
            # partition it named.
            base = [fp for fp in base if has_news(session, fp.tp, result.get(fp.tp))]

        def candidates() -> list[FetchPartition]:
            if session is None or not incremental or not session.dirty:
                return base
            named = {fp.tp for fp in base}
            extra = [tp for tp in session.dirty if tp not in named and may_read(tp)]
            return base + session_partitions(session, extra)

        def enough() -> bool:
            acc = 0
            for fp in candidates():
                part = self.partitions.get(fp.tp)
                if part is None or not (part.is_leader or client is not None):
                    return True
                if part.check_leader_epoch(fp.current_leader_epoch) != ErrorCode.none:
                    return True
                if replica_id >= 0:
                    end = part.log.log_end_offset
                elif isolation_level == READ_COMMITTED:
                    end = part.last_stable_offset
                else:
                    end = part.high_watermark
                if end < fp.fetch_offset:  # truncated below the fetch position
                    return True
                if self._leader_throttled(part, replica_id, self._monotonic_ms()):
                    continue  # its bytes would not be sent: they do not count (Kafka's case H)
                if end > fp.fetch_offset:
                    if min_bytes <= 1:
                        return True
                    try:
                        acc += len(  # a client's negative max bytes counts nothing
                            part.log.read(
                                fp.fetch_offset, max_bytes=max(0, fp.max_bytes), max_offset=end
                            )
                        )
                    except OffsetOutOfRangeError:
                        return True  # answered now, with OFFSET_OUT_OF_RANGE
                    if acc >= min_bytes:
                        return True
            return False

        def complete() -> None:
            reads = candidates()
            if session is not None:
                session.dirty.clear()
            respond(
                self.read_from_local_log(
                    replica_id,
                    max_bytes,
                    reads,
                    update_fetch_state=False,
                    isolation_level=isolation_level,
                    zero_copy=zero_copy,
                    client=client,
                )
            )

        op = DelayedFetch(max_wait_ms, enough, complete)
        keys: list[object] = []
        if session is not None:
            keys.append((SESSION_WATCH_KEY, session.id))
        if not incremental:
            keys.extend(fp.tp for fp in partitions)
        self.fetch_purgatory.try_complete_else_watch(op, keys, now_ms=self._monotonic_ms())
        return op

    def _answering_for_session(
        self,
        session: FetchSession,
        respond: Callable[[FetchResult], None],
        *,
        full: bool,
        replica_id: int,
        isolation_level: int,
    ) -> Callable[[FetchResult], None]:
        def answer(result: FetchResult) -> None:
            # A partition answered without records though it has some to give (the response
            # was full, or a replication throttle held them back) is read again at the next
            # fetch: its client's position does not move, so nothing else would bring it back.
            for tp, r in result.items():
                if not r.records and r.error_code == ErrorCode.none:
                    cached = session.partitions.get(tp)
                    if (
                        cached is not None
                        and self._readable_end(tp, replica_id, isolation_level)
                        > cached.fetch_offset
                    ):
                        session.dirty.add(tp)
            respond(select_for_session(session, result, full=full))

        return answer

    def _note_isr(self, part: Partition) -> None:
        """Keep `_lagging` true for `part` after its leadership or ISR state changed."""
        tp = part.tp
        lead = part.is_leader and self.partitions.get(tp) is part
        committed = isinstance(part.state, CommittedPartitionState)
        isr = part.state.isr
        for r in part.assignment if lead else ():
            if r == self.broker_id:
                continue
            held = self._lagging.setdefault(r, set())
            if committed and r in isr:
                held.discard(tp)
            else:
                held.add(tp)
        if not lead or len(self._lagging) > len(part.assignment):
            for r, held in self._lagging.items():
                if not lead or r not in part.assignment:
                    held.discard(tp)

    def lagging(self, replica_id: int) -> set[TopicPartition]:
        """Led partitions `replica_id` is assigned to but not (committed) in the ISR of."""
        return self._lagging.get(replica_id, set())

    def drifted(self, session: FetchSession) -> list[TopicPartition]:
        """The session's partitions whose high watermark, log start offset or leadership no
        longer match their last answer (a cheap look at each: the periodic check for what no
        change hook reports, e.g. retention moving a log start offset)."""
        out: list[TopicPartition] = []
        for tp, c in session.partitions.items():
            part = self.partitions.get(tp)
            if (
                part is None
                or not part.is_leader
                or part.high_watermark != c.high_watermark
                or part.log.log_start_offset != c.leader_log_start_offset
            ):
                out.append(tp)
        return out

    def _readable_end(self, tp: TopicPartition, replica_id: int, isolation_level: int) -> int:
        part = self.partitions.get(tp)
        if part is None:
            return -1
        if replica_id >= 0 or replica_id == DEBUGGING_CONSUMER_ID:
            return part.log.log_end_offset
        if isolation_level == READ_COMMITTED:
            return part.last_stable_offset
        return part.high_watermark

    def read_from_local_log(
        self,
        replica_id: int,
        max_bytes: int,
        partitions: Iterable[FetchPartition],
        *,
        update_fetch_state: bool = True,
        replica_epoch: int = -1,
        isolation_level: int = READ_UNCOMMITTED,
        zero_copy: bool = False,
        client: ClientMetadata | None = None,
    ) -> FetchResult:
        """Read for a consumer (below the HW; read_committed: below the LSO, with the aborted
        transactions of the range) or a follower (`replica_id` >= 0: up to the LEO,
        recording its position). `current_leader_epoch` fences both (KIP-320).

        A consumer with `client` metadata (Fetch v11+, KIP-392) may read a follower too (up
        to its HW); a leader whose replica selector sends it to another replica answers
        that partition with no records and the replica as `preferred_read_replica`."""
        out: FetchResult = {}
        remaining = max_bytes
        min_one = True
        now_ms = self._monotonic_ms()
        follower = replica_id >= 0
        # Kafka's debugging consumer (-2, the replica verification tool) reads any replica,
        # leader or follower, up to its log end (FetchIsolation LOG_END).
        debugging = replica_id == DEBUGGING_CONSUMER_ID
        any_replica = debugging or (client is not None and not follower)
        committed = isolation_level == READ_COMMITTED and not (follower or debugging)
        for fp in partitions:
            part = self.partitions.get(fp.tp)
            if part is None:
                out[fp.tp] = FetchPartitionResult(
                    self.missing_partition_error(fp.tp, ErrorCode.unknown_topic_or_partition)
                )
                continue
            try:
                if any_replica:
                    err = part.check_leader_epoch(fp.current_leader_epoch)
                    if err is not ErrorCode.none:
                        raise PartitionError(err)
                else:
                    part.require_leader(fp.current_leader_epoch)
                if follower:
                    part.require_follower_replica(replica_id)
            except PartitionError as e:
                out[fp.tp] = FetchPartitionResult(e.error_code)
                continue
            plog = part.log
            leader_end_offset = plog.log_end_offset
            lso = plog.last_stable_offset
            if follower or debugging:
                upper = leader_end_offset
            else:
                upper = lso if committed else part.high_watermark
            res = FetchPartitionResult(
                ErrorCode.none,
                high_watermark=part.high_watermark,
                last_stable_offset=lso,
                log_start_offset=plog.log_start_offset,
            )
            preferred = None
            if client is not None and not follower:
                preferred = preferred_read_replica(part, client, fp.fetch_offset, now_ms)
            data: bytes | FileRegion = b""
            try:
                if preferred is not None:
                    res.preferred_read_replica = preferred  # no read: the client goes there
                elif not self._leader_throttled(part, replica_id, now_ms):  # else KIP-73
                    data, res.aborted_transactions = read_log(
                        plog,
                        fp,
                        upper=upper,
                        limit=max(0, min(fp.max_bytes, remaining)),
                        min_one=min_one,
                        committed=committed,
                        zero_copy=zero_copy,
                    )
            except OffsetOutOfRangeError:
                res.error_code = ErrorCode.offset_out_of_range
            if data:
                min_one = False
                remaining -= len(data)
            res.records = data
            if committed and res.aborted_transactions is None:
                res.aborted_transactions = []
            if follower and update_fetch_state and res.error_code is ErrorCode.none:
                try:
                    self._update_follower_fetch_state(
                        part, replica_id, fp, leader_end_offset, now_ms, replica_epoch
                    )
                except PartitionError as e:
                    res = FetchPartitionResult(e.error_code)
                res.high_watermark = part.high_watermark
                res.last_stable_offset = plog.last_stable_offset
            out[fp.tp] = res
        return out

    # --- replication quota (KIP-73) ----------------------------------------------------------
    def _leader_throttled(self, part: Partition, replica_id: int, now_ms: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower outside the ISR fetching a throttled
        partition while the leader quota is exceeded gets no records for it."""
        quota = self.leader_quota
        return (
            quota is not None
            and replica_id >= 0
            and replica_id not in part.isr
            and quota.is_throttled(part.tp)
            and quota.is_quota_exceeded(now_ms)
        )

    def _recording_throttled_bytes(
        self, quota: ReplicationQuotaManager, respond: Callable[[FetchResult], None]
    ) -> Callable[[FetchResult], None]:
        """`respond`, after recording the bytes sent for throttled partitions in the leader
        quota (in sync or not: Kafka's sizeOfThrottledPartitions)."""

        def recorded(result: FetchResult) -> None:
            sent = sum(len(r.records) for tp, r in result.items() if quota.is_throttled(tp))
            quota.record(sent, self._monotonic_ms())
            respond(result)

        return recorded

    # --- followers and the ISR -------------------------------------------------------------
    def _counting_bytes_out(
        self, respond: Callable[[FetchResult], None]
    ) -> Callable[[FetchResult], None]:
        stats = self.topic_stats

        def counted(result: FetchResult) -> None:
            for tp, r in result.items():
                stats.record_out(tp.topic, len(r.records))
            respond(result)

        return counted

    def _update_follower_fetch_state(
        self,
        part: Partition,
        replica_id: int,
        fp: FetchPartition,
        leader_end_offset: int,
        now_ms: int,
        replica_epoch: int,
    ) -> None:
        outcome = part.update_follower_fetch_state(
            replica_id,
            fetch_offset=fp.fetch_offset,
            log_start_offset=fp.log_start_offset,
            leader_end_offset=leader_end_offset,
            now_ms=now_ms,
            broker_epoch=replica_epoch,
        )
        if outcome.proposal is not None:
            self._submit_isr_change(part, outcome.proposal)
            self._note_isr(part)
        if outcome.hw_incremented:
            self._try_complete_delayed(part.tp)

    def _try_complete_delayed(self, tp: TopicPartition) -> None:
        """Kafka's tryCompleteDelayedRequests: the HW (or the ISR) moved."""
        self.produce_purgatory.check_and_complete(tp, in_order=True)
        self._wake_fetches(tp)

    def follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        """A followed partition's HW moved: consumers reading it here (KIP-392) may have
        records now."""
        self._wake_fetches(tp)

    def _wake_fetches(self, tp: TopicPartition) -> None:
        """`tp` changed (log end, HW, leadership): fetches parked on it re-check, and so do
        the incremental fetches of every session holding it (which mark it to be read)."""
        purgatory = self.fetch_purgatory
        purgatory.check_and_complete(tp)
        sessions = self.fetch_sessions
        if sessions is not None:
            for sid in tuple(sessions.mark_changed(tp)):
                purgatory.check_and_complete((SESSION_WATCH_KEY, sid))

    def on_brokers_gone(self) -> None:
        """Brokers left the live set (UpdateMetadata): a caught-up replica on one of them no
        longer holds a led partition's HW back (it is not ISR-eligible any more, and counts as
        caught up again only once it has fetched: a broker back soon must not hold the HW
        with what it fetched before it went), so the HW may move and parked acks=all
        produces complete now rather than at the next append."""
        now = self._monotonic_ms()
        for tp, part in list(self.partitions.items()):
            if not part.is_leader:
                continue
            part.forget_gone_followers()
            if part.maybe_increment_high_watermark(now):
                self._try_complete_delayed(tp)

    def maybe_shrink_isr(self, now_ms: int | None = None) -> int:
        """The `isr-expiration` task (run every `replica.lag.time.max.ms / 2`):
        every led partition proposes dropping followers that lag. Returns how many did.
        `now_ms` is the monotonic clock's (the one follower fetch times are recorded on)."""
        now = self._monotonic_ms() if now_ms is None else now_ms
        proposed = 0
        for part in list(self.partitions.values()):
            if not part.is_leader:
                continue
            # A replica outside the ISR holds the HW while it counts as caught up, which ends
            # with time alone (replica.lag.time.max.ms after it last was): nothing else then
            # moves the HW until the next append or follower progress, so parked acks=all
            # produces would wait for that (or time out) -- the HW is checked here too.
            if part.maybe_increment_high_watermark(now):
                self._try_complete_delayed(part.tp)
            pending = part.maybe_shrink_isr(now)
            if pending is not None:
                proposed += 1
                self._submit_isr_change(part, pending)
                self._note_isr(part)
        return proposed

    def _submit_isr_change(self, part: Partition, pending: PendingIsrState) -> None:
        mgr = self.alter_partition_manager
        if mgr is None or pending.sent is None:
            return
        if part.topic_id is None:
            log.warning(
                "[ReplicaManager broker=%d] cannot propose an ISR change for %s-%d: no topic id",
                self.broker_id,
                part.tp.topic,
                part.tp.partition,
            )
            return
        tp = part.tp

        def on_result(result: AlterPartitionResult) -> None:
            self._on_alter_partition_result(tp, pending, result)

        if not mgr.submit(AlterPartitionItem(tp, part.topic_id, pending.sent, on_result)):
            # An older proposal still holds the queue slot (re-queued after a failed request,
            # e.g. to a controller that died, while a LeaderAndIsr replaced the state). As in
            # Kafka (OperationNotAttemptedException), this one was not attempted: back to the
            # committed state, so a later fetch or expiry check proposes again rather than the
            # partition staying pending with nothing sent.
            log.debug(
                "[ReplicaManager broker=%d] an ISR change for %s-%d is already queued",
                self.broker_id,
                tp.topic,
                tp.partition,
            )
            self._on_alter_partition_result(tp, pending, ErrorCode.operation_not_attempted)

    def _on_alter_partition_result(
        self, tp: TopicPartition, pending: PendingIsrState, result: AlterPartitionResult
    ) -> None:
        part = self.partitions.get(tp)
        if part is None:
            return
        outcome, hw = part.handle_alter_partition_result(pending, result, self._monotonic_ms())
        self._note_isr(part)
        if outcome is AlterOutcome.RETRY:
            self._submit_isr_change(part, pending)
        elif outcome is AlterOutcome.COMMITTED:
            if pending.isr != part.state.isr:
                if len(part.state.isr) > len(pending.isr):
                    self.isr_expands += 1
                else:
                    self.isr_shrinks += 1
            # The HW may have moved, or the ISR shrank below min.insync.replicas.
            self._try_complete_delayed(tp)
        elif hw:
            self._try_complete_delayed(tp)

    # --- high watermarks -------------------------------------------------------------------
    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks()


def _role(part: Partition | None) -> str:
    """A replica's role for the state-change log."""
    if part is None:
        return "None"
    return "Leader" if part.is_leader else "Follower"
