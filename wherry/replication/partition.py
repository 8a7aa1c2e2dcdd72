"""One partition hosted on this broker: leadership, ISR, high watermark.

The ISR is held as a closed family of immutable states (`isr.py`): the partition only
stores the current state and applies the pure rules of `isr.py` to it. A change is *proposed*
(the state becomes PendingExpandIsr / PendingShrinkIsr) and returned to the replica manager,
which sends it to the controller with AlterPartition; the answer comes back through
`handle_alter_partition_result`. No I/O beyond the local log; time is passed in.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.log import AppendInfo, Log
from wherry.protocol.interbroker import LeaderAndIsrPartitionState
from wherry.protocol.records import BatchHeader
from wherry.replication.isr import (
    NEVER,
    AlterOutcome,
    CommittedLeaderAndIsr,
    CommittedPartitionState,
    FollowerState,
    IsrProposer,
    PartitionState,
    PendingExpandIsr,
    PendingIsrState,
    PendingShrinkIsr,
    StaleBrokerEpoch,
    apply_alter_partition_result,
    high_watermark_candidate,
    needs_expand,
    out_of_sync_replicas,
    prepare_expand,
    prepare_shrink,
    reset_follower,
    update_fetch_state,
)
from wherry.runtime.state_change_log import (
    broker_prefix,
    log_change,
    partition_subject,
    state_change_line,
)

__all__ = [
    "DEFAULT_REPLICA_LAG_TIME_MAX_MS",
    "CommittedPartitionState",
    "FollowerFetchOutcome",
    "Partition",
    "PartitionError",
    "PartitionState",
    "PendingExpandIsr",
    "PendingShrinkIsr",
    "ReplicaState",
]

log = logging.getLogger(__name__)

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000

ReplicaState = FollowerState  # what the leader knows of a follower
_Pending = TypeVar("_Pending", PendingExpandIsr, PendingShrinkIsr)


class PartitionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class FollowerFetchOutcome:
    """What recording a follower's fetch did: a proposed ISR expansion to send, and whether
    the high watermark moved (delayed requests keyed by the partition should be checked)."""

    proposal: PendingIsrState | None
    hw_incremented: bool


def _always_eligible(_: int) -> bool:
    return True


@dataclass(slots=True)
class Partition:
    tp: TopicPartition
    local_broker_id: int
    log: Log
    topic_id: uuid.UUID | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    controller_epoch: int = -1
    assignment: tuple[int, ...] = ()
    state: PartitionState = field(default_factory=lambda: CommittedPartitionState(frozenset()))
    remote_replicas: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = 0
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    # Leader side: may this replica join the ISR (its broker alive, not fenced)?
    is_replica_isr_eligible: Callable[[int], bool] = _always_eligible
    # This broker's epoch, sent with its own ISR entry (-1: unknown).
    local_broker_epoch: Callable[[], int] = lambda: -1

    @property
    def high_watermark(self) -> int:
        """Kept by the log (retention must not delete above it)."""
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The LSO (bounded by the high watermark): where read_committed reads stop."""
        return self.log.last_stable_offset

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def isr(self) -> frozenset[int]:
        return self.state.isr

    # --- leadership ----------------------------------------------------------------------
    def make_leader(self, st: LeaderAndIsrPartitionState, now_ms: int) -> bool:
        """Become leader; returns True if this broker was not leader for this epoch before.

        The request's ISR replaces whatever state was pending: a proposal in flight is
        superseded and its answer will be ignored."""
        # Follower positions learnt in an earlier epoch hold only if no other broker led in
        # between: when this leader missed epochs (it was cut off while others led and its
        # followers truncated), they are forgotten, as for a new leader -- else a stale
        # position could lift the high watermark over records the followers no longer have.
        # (Stricter than Kafka, which keeps them whenever the broker led before.)
        was_leader = self.is_leader and st.leader_epoch <= self.leader_epoch + 1
        self.controller_epoch = st.controller_epoch
        self.assignment = st.replicas
        self.state = CommittedPartitionState(frozenset(st.isr))
        self.partition_epoch = st.partition_epoch
        new_epoch = st.leader_epoch != self.leader_epoch
        self.leader_epoch = st.leader_epoch
        self.leader_id = self.local_broker_id
        leo = self.log.log_end_offset
        if new_epoch:
            self.leader_epoch_start_offset = leo
            # Kafka's makeLeader (maybeAssignEpochStartOffset): cache the new epoch now, not at
            # its first append, so a follower holding entries of a later epoch than any in
            # this log asks about an epoch this leader knows the end of (else it falls back to
            # truncating to its own high watermark, below what may be committed).
            self.log.leader_epoch_cache.assign(st.leader_epoch, leo)
        old = self.remote_replicas if was_leader else {}
        self.remote_replicas = {
            r: reset_follower(
                old.get(r, FollowerState(r)),
                now_ms=now_ms,
                leader_end_offset=leo,
                is_new_leader=not was_leader,
                in_isr=r in st.isr,
            )
            for r in st.replicas
            if r != self.local_broker_id
        }
        self.maybe_increment_high_watermark(now_ms)
        state_change_line(
            logging.INFO,
            "[Broker id=%d] Leader %s with topic id %s starts at leader epoch %d from offset %d "
            "with partition epoch %d, high watermark %d, ISR %s, replicas %s",
            self.local_broker_id,
            self._name(),
            self.topic_id,
            self.leader_epoch,
            self.leader_epoch_start_offset,
            self.partition_epoch,
            self.high_watermark,
            sorted(self.isr),
            list(self.assignment),
        )
        return not was_leader or new_epoch

    def make_follower(self, st: LeaderAndIsrPartitionState) -> bool:
        """Record the new leader; fetching from it is the follower fetcher's job."""
        changed = self.leader_id != st.leader or self.leader_epoch != st.leader_epoch
        self.controller_epoch = st.controller_epoch
        self.assignment = st.replicas
        self.state = CommittedPartitionState(frozenset(st.isr))
        self.partition_epoch = st.partition_epoch
        self.leader_epoch = st.leader_epoch
        self.leader_id = st.leader
        self.remote_replicas = {}
        state_change_line(
            logging.INFO,
            "[Broker id=%d] Follower %s starts at leader epoch %d from offset %d with partition "
            "epoch %d and high watermark %d. Current leader is %d.",
            self.local_broker_id,
            self._name(),
            self.leader_epoch,
            self.log.log_end_offset,
            self.partition_epoch,
            self.high_watermark,
            self.leader_id,
        )
        return changed

    def _name(self) -> str:
        return f"{self.tp.topic}-{self.tp.partition}"

    # --- leader epoch fencing (KIP-320) ----------------------------------------------------
    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    def require_leader(self, current_leader_epoch: int = -1) -> None:
        err = self.check_leader_epoch(current_leader_epoch)
        if err is not ErrorCode.none:
            raise PartitionError(err)
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)

    def require_follower_replica(self, replica_id: int) -> None:
        """Kafka's followerReplicaOrThrow: only an assigned replica (not this leader) may
        fetch as a follower."""
        if replica_id == self.local_broker_id or replica_id not in self.remote_replicas:
            raise PartitionError(
                ErrorCode.not_leader_or_follower,
                f"Leader {self.local_broker_id} failed to record follower {replica_id}'s "
                f"position since the replica is not recognized to be one of the assigned "
                f"replicas {list(self.assignment)} for partition {self._name()}",
            )

    # --- produce -------------------------------------------------------------------------
    def append_records_to_leader(
        self,
        batch: bytes | bytearray | memoryview,
        *,
        required_acks: int,
        min_insync_replicas: int,
        now_ms: int,
        lag_clock_ms: int | None = None,
        from_coordinator: bool = False,
        header: BatchHeader | None = None,
    ) -> AppendInfo:
        """Append an already validated batch (see `records.validate_batch`, whose answer
        `header` is, if given); transaction markers `from_coordinator`. `now_ms` is the wall
        clock (append times); `lag_clock_ms` the clock follower fetch times are recorded on
        (monotonic in the broker), for the HW check after the append (default: `now_ms`, where
        both are one clock)."""
        if self.leader_id != self.local_broker_id:  # `require_leader()`, inlined
            raise PartitionError(ErrorCode.not_leader_or_follower)
        isr_size = len(self.state.isr)
        if required_acks == -1 and isr_size < min_insync_replicas:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy "
                f"the min.isr requirement of {min_insync_replicas} for partition {self._name()}",
            )
        info = self.log.append_as_leader(
            batch,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
            validate=False,
            from_coordinator=from_coordinator,
            header=header,
        )
        self.maybe_increment_high_watermark(now_ms if lag_clock_ms is None else lag_clock_ms)
        return info

    # --- followers -------------------------------------------------------------------------
    def update_follower_fetch_state(
        self,
        replica_id: int,
        *,
        fetch_offset: int,
        log_start_offset: int,
        leader_end_offset: int,
        now_ms: int,
        broker_epoch: int = -1,
    ) -> FollowerFetchOutcome:
        """Record a follower's fetch at `fetch_offset` (its LEO), maybe propose adding it to
        the ISR, maybe advance the HW (Kafka's Partition.updateFollowerFetchState)."""
        self.require_follower_replica(replica_id)
        prev = self.remote_replicas[replica_id]
        try:
            cur = update_fetch_state(
                prev,
                fetch_offset=fetch_offset,
                log_start_offset=log_start_offset,
                fetch_time_ms=now_ms,
                leader_end_offset=leader_end_offset,
                broker_epoch=broker_epoch,
            )
        except StaleBrokerEpoch as e:
            raise PartitionError(ErrorCode.not_leader_or_follower, str(e)) from e
        self.remote_replicas[replica_id] = cur
        proposal = self.maybe_expand_isr(replica_id, now_ms)
        hw = False
        if prev.log_end_offset != cur.log_end_offset:
            hw = self.maybe_increment_high_watermark(now_ms)
        return FollowerFetchOutcome(proposal, hw)

    def forget_gone_followers(self) -> None:
        """Replicas outside the maximal ISR whose broker is gone (not ISR-eligible) no longer
        count as caught up: back with a new incarnation, they must fetch to hold the HW (as
        Kafka's broker-epoch check makes a re-registered broker ineligible until it does)."""
        isr = self.state.maximal_isr
        for rid, f in self.remote_replicas.items():
            if rid in isr or f.last_caught_up_time_ms == NEVER:
                continue
            if not self.is_replica_isr_eligible(rid):
                self.remote_replicas[rid] = replace(f, last_caught_up_time_ms=NEVER)

    # --- ISR changes ------------------------------------------------------------------------
    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> PendingExpandIsr | None:
        state = self.state
        f = self.remote_replicas.get(replica_id)
        if (
            not self.is_leader
            or f is None
            or not isinstance(state, CommittedPartitionState)
            or not needs_expand(
                state,
                f,
                high_watermark=self.high_watermark,
                leader_epoch_start_offset=self.leader_epoch_start_offset,
                eligible=self.is_replica_isr_eligible(replica_id),
            )
        ):
            return None
        return self._propose(prepare_expand(state, replica_id, self._proposer()))

    def maybe_shrink_isr(self, now_ms: int) -> PendingShrinkIsr | None:
        """The expiry task's step: propose removing the followers that have not
        caught up within `replica_lag_time_max_ms`."""
        state = self.state
        if not self.is_leader or not isinstance(state, CommittedPartitionState):
            return None
        out = out_of_sync_replicas(
            state,
            self.local_broker_id,
            self.remote_replicas,
            leader_end_offset=self.log.log_end_offset,
            now_ms=now_ms,
            max_lag_ms=self.replica_lag_time_max_ms,
        )
        if not out:
            return None
        return self._propose(prepare_shrink(state, out, self._proposer()))

    def _proposer(self) -> IsrProposer:
        return IsrProposer(
            self.local_broker_id,
            self.leader_epoch,
            self.partition_epoch,
            self.remote_replicas,
            self.local_broker_epoch(),
        )

    def _propose(self, pending: _Pending) -> _Pending:
        """Take the proposed ISR change as the state (it is sent by the caller)."""
        self.state = pending
        self._log_isr_change("Committed", type(pending).__name__, pending)
        return pending

    def handle_alter_partition_result(
        self,
        proposed: PendingIsrState,
        result: CommittedLeaderAndIsr | ErrorCode,
        now_ms: int,
    ) -> tuple[str, bool]:
        """Apply the controller's answer to `proposed`; returns (outcome, HW incremented).
        Outcomes are `isr.AlterOutcome`: RETRY asks the caller to send `proposed` again."""
        if not self.is_leader:
            return AlterOutcome.IGNORED, False
        before = self.state
        outcome, self.state, self.partition_epoch = apply_alter_partition_result(
            before,
            proposed,
            result,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
        )
        hw = False
        if outcome is AlterOutcome.COMMITTED:
            self._log_commit(before, "Committed", now_ms)
            hw = self.maybe_increment_high_watermark(now_ms)
        elif outcome is AlterOutcome.REVERTED:
            self._log_commit(before, "Reverted", now_ms, error=result)
            # A refused expansion leaves the maximal ISR smaller: the HW may move now.
            hw = self.maybe_increment_high_watermark(now_ms)
        elif outcome is AlterOutcome.KEPT_PENDING:
            log.info(
                "[Partition %s broker=%d] AlterPartition for %s failed with %s; waiting for "
                "the controller's LeaderAndIsr",
                self._name(),
                self.local_broker_id,
                type(proposed).__name__,
                result,
            )
        return outcome, hw

    def _log_isr_change(self, old: str, new: str, pending: PendingIsrState) -> None:
        sent = pending.sent
        fields: dict[str, int | str | list[int] | None] = {
            "leader": self.local_broker_id,
            "leader_epoch": self.leader_epoch,
            "isr": sorted(sent.isr) if sent is not None else sorted(pending.maximal_isr),
            "old_isr": sorted(pending.isr),
            "partition_epoch": self.partition_epoch,
            "high_watermark": self.high_watermark,
            "log_end_offset": self.log.log_end_offset,
        }
        if isinstance(pending, PendingShrinkIsr):
            fields["out_of_sync"] = sorted(pending.out_of_sync_replicas)
            fields["lag_time_max_ms"] = self.replica_lag_time_max_ms
        self._log_change(old, new, fields)

    def _log_commit(
        self,
        before: PartitionState,
        new: str,
        now_ms: int,
        error: CommittedLeaderAndIsr | ErrorCode | None = None,
    ) -> None:
        fields: dict[str, int | str | list[int] | None] = {
            "leader": self.local_broker_id,
            "leader_epoch": self.leader_epoch,
            "isr": sorted(self.state.isr),
            "partition_epoch": self.partition_epoch,
            "high_watermark": self.high_watermark,
        }
        if isinstance(error, ErrorCode):
            fields["error"] = error.name
        self._log_change(type(before).__name__, new, fields)

    def _log_change(
        self, old: str, new: str, fields: dict[str, int | str | list[int] | None]
    ) -> None:
        log_change(
            broker_prefix(self.local_broker_id),
            partition_subject(self.tp.topic, self.tp.partition),
            old,
            new,
            fields=fields,
        )

    # --- high watermark --------------------------------------------------------------------
    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """HW = min LEO over the maximal ISR plus replicas caught up recently; monotonic."""
        if not self.is_leader:
            return False
        candidate = high_watermark_candidate(
            self.log.log_end_offset,
            self.remote_replicas,
            self.state.maximal_isr,
            leader_id=self.local_broker_id,
            now_ms=now_ms,
            max_lag_ms=self.replica_lag_time_max_ms,
            eligible=self.is_replica_isr_eligible,
        )
        if candidate < 0:
            return False
        return self.log.maybe_increment_high_watermark(candidate)

    def acks_all_satisfied(
        self, required_offset: int, min_insync_replicas: int
    ) -> ErrorCode | None:
        """None while waiting; an error code (possibly NONE) once the produce can complete
        (Kafka's checkEnoughReplicasReachOffset, over the maximal ISR)."""
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.high_watermark >= required_offset:
            if len(self.state.maximal_isr) < min_insync_replicas:
                return ErrorCode.not_enough_replicas_after_append
            return ErrorCode.none
        return None


DEBUGGING_REPLICA_ID = -2  # may ask followers (Kafka's Request.DebuggingConsumerId)


def epoch_end_offset(
    part: Partition | None,
    *,
    current_leader_epoch: int,
    leader_epoch: int,
    replica_id: int,
    known_partition: bool = False,
) -> tuple[ErrorCode, int, int]:
    """OffsetForLeaderEpoch for one partition: (error, epoch, end offset), the largest epoch
    <= `leader_epoch` in the leader's epoch cache and the offset where it ends (the log end
    offset for the current epoch), or -1/-1 when unknown (Kafka's
    `Partition.lastOffsetForLeaderEpoch`). `part` is None when this broker does not host the
    partition; `known_partition` says the cluster has it all the same (stale metadata:
    NOT_LEADER_OR_FOLLOWER rather than UNKNOWN_TOPIC_OR_PARTITION). Only the leader answers,
    except to the debugging replica id; `current_leader_epoch` fences stale callers."""
    if part is None:
        code = (
            ErrorCode.not_leader_or_follower
            if known_partition
            else ErrorCode.unknown_topic_or_partition
        )
        return code, -1, -1
    err = part.check_leader_epoch(current_leader_epoch)
    if err is not ErrorCode.none:
        return err, -1, -1
    if replica_id != DEBUGGING_REPLICA_ID and not part.is_leader:
        return ErrorCode.not_leader_or_follower, -1, -1
    epoch, end = part.log.end_offset_for_epoch(leader_epoch)
    return ErrorCode.none, epoch, end
