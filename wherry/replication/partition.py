"""One partition hosted on this broker (SPEC R1, R9–R11): leadership, ISR, high watermark.

The ISR is held as a closed family of immutable states (SPEC I1). With a single broker only
`CommittedPartitionState` occurs; the pending states arrive with AlterPartition in the
replication issue, and the high-watermark and acks=all rules already read `maximal_isr`.
No I/O beyond the local log; time is passed in.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from wherry.log.log import AppendInfo, Log
from wherry.log.topic_partition import TopicPartition
from wherry.protocol.interbroker import LeaderAndIsrPartitionState

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("wherry.state_change")


class PartitionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class CommittedPartitionState:
    isr: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class PendingExpandIsr:
    isr: frozenset[int]
    new_in_sync_replica: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | {self.new_in_sync_replica}

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PendingShrinkIsr:
    isr: frozenset[int]
    out_of_sync_replicas: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return True


PartitionState = CommittedPartitionState | PendingExpandIsr | PendingShrinkIsr


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of a follower (SPEC R9)."""

    broker_id: int
    log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0


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
    remote_replicas: dict[int, ReplicaState] = field(default_factory=dict)
    leader_epoch_start_offset: int = 0

    @property
    def high_watermark(self) -> int:
        """Kept by the log (retention must not delete above it); see SPEC R10."""
        return self.log.high_watermark

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def isr(self) -> frozenset[int]:
        return self.state.isr

    # --- leadership (SPEC H5, I2) --------------------------------------------------------
    def make_leader(self, st: LeaderAndIsrPartitionState, now_ms: int) -> bool:
        """Become leader; returns True if this broker was not leader for this epoch before."""
        was_leader = self.is_leader
        self.controller_epoch = st.controller_epoch
        self.assignment = st.replicas
        self.state = CommittedPartitionState(frozenset(st.isr))
        self.partition_epoch = st.partition_epoch
        new_epoch = st.leader_epoch != self.leader_epoch
        self.leader_epoch = st.leader_epoch
        self.leader_id = self.local_broker_id
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.remote_replicas = {
            r: ReplicaState(r, last_caught_up_time_ms=now_ms if r in st.isr else 0)
            for r in st.replicas
            if r != self.local_broker_id
        }
        self.maybe_increment_high_watermark(now_ms)
        state_change_log.info(
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
        state_change_log.info(
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

    # --- produce -------------------------------------------------------------------------
    def append_records_to_leader(
        self, batch: bytearray, *, required_acks: int, min_insync_replicas: int, now_ms: int
    ) -> AppendInfo:
        """Append an already validated batch (see `records.validate_batch`)."""
        self.require_leader()
        isr_size = len(self.state.isr)
        if required_acks == -1 and isr_size < min_insync_replicas:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy "
                f"the min.isr requirement of {min_insync_replicas} for partition {self._name()}",
            )
        info = self.log.append_as_leader(
            batch, leader_epoch=self.leader_epoch, now_ms=now_ms, validate=False
        )
        self.maybe_increment_high_watermark(now_ms)
        return info

    # --- high watermark (SPEC R10) ---------------------------------------------------------
    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """HW = min LEO over the maximal ISR plus replicas caught up recently; monotonic."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for rid, rs in self.remote_replicas.items():
            if rid in self.state.maximal_isr and rs.log_end_offset < new_hw:
                new_hw = max(rs.log_end_offset, 0)
        return self.log.maybe_increment_high_watermark(new_hw)

    def acks_all_satisfied(
        self, required_offset: int, min_insync_replicas: int
    ) -> ErrorCode | None:
        """None while waiting; an error code (possibly NONE) once the produce can complete."""
        if not self.is_leader:
            return ErrorCode.not_leader_or_follower
        if self.high_watermark >= required_offset:
            if len(self.state.isr) < min_insync_replicas:
                return ErrorCode.not_enough_replicas_after_append
            return ErrorCode.none
        return None
