"""The leader's ISR state machine (Kafka 3.9's Partition.scala).

Everything here is pure: immutable values and functions of them, time passed in.

* A partition's ISR state is one of a closed family: `CommittedPartitionState` (the
  ISR the controller last confirmed), `PendingExpandIsr` / `PendingShrinkIsr` (a change
  proposed to the controller with AlterPartition and not answered yet). `isr` is always the
  last committed set; `maximal_isr` (the larger of old and new) is what the high watermark and
  acks=all use, so neither can overtake a replica the controller may still count as in sync.
  At most one change is in flight per partition (`is_inflight`).
* `FollowerState` is what the leader knows of one follower: its LEO, log start,
  fetch time, `last_caught_up_time_ms`, broker epoch.
* The rules: when a follower is caught up (`is_caught_up`), in sync for expansion
  (`needs_expand`), out of sync (`out_of_sync_replicas`), the high-watermark candidate
  (`high_watermark_candidate`), and what an AlterPartition answer does to the state
  (`apply_alter_partition_result`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from kio.schema.errors import ErrorCode

UNKNOWN_OFFSET = -1
NEVER = -(1 << 62)
"""A time that never was: a follower never caught up (or never fetched) is not caught up at
any `now_ms`, even on a clock that starts at 0 (Kafka uses 0 on a wall clock)."""


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """What the leader asks the controller to write (an AlterPartition partition entry)."""

    leader_id: int
    leader_epoch: int
    isr: tuple[int, ...]  # sorted
    broker_epochs: tuple[int, ...]  # per `isr` member, -1 when unknown (KIP-903)
    partition_epoch: int
    leader_recovery_state: int = 0


class _IsrState:
    """What the three ISR states share: `maximal_isr` is the committed `isr` unless a pending
    expansion adds to it; `is_inflight` says whether a change awaits the controller."""

    __slots__ = ()
    isr: frozenset[int]
    is_inflight: ClassVar[bool] = True

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr


@dataclass(frozen=True, slots=True)
class CommittedPartitionState(_IsrState):
    isr: frozenset[int]
    leader_recovery_state: int = 0
    is_inflight: ClassVar[bool] = False


@dataclass(frozen=True, slots=True, eq=False)
class PendingExpandIsr(_IsrState):
    """`eq=False`: a pending state is identified by the object itself, so an answer to an
    older proposal with equal contents is never taken for the current one."""

    isr: frozenset[int]
    new_in_sync_replica: int
    sent: IsrProposal | None = None
    last_committed: CommittedPartitionState | None = None
    leader_recovery_state: int = 0

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | {self.new_in_sync_replica}


@dataclass(frozen=True, slots=True, eq=False)
class PendingShrinkIsr(_IsrState):
    isr: frozenset[int]
    out_of_sync_replicas: frozenset[int]
    sent: IsrProposal | None = None
    last_committed: CommittedPartitionState | None = None
    leader_recovery_state: int = 0


PartitionState = CommittedPartitionState | PendingExpandIsr | PendingShrinkIsr
PendingIsrState = PendingExpandIsr | PendingShrinkIsr


# --- followers --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FollowerState:
    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = NEVER
    last_caught_up_time_ms: int = NEVER
    broker_epoch: int | None = None

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's ReplicaState.isCaughtUp: at the leader's LEO, or caught up recently."""
        return (
            leader_end_offset == self.log_end_offset
            or now_ms - self.last_caught_up_time_ms <= max_lag_ms
        )


class StaleBrokerEpoch(Exception):
    """A fetch carrying an older broker epoch than the leader has seen from that replica."""


def update_fetch_state(
    st: FollowerState,
    *,
    fetch_offset: int,
    log_start_offset: int,
    fetch_time_ms: int,
    leader_end_offset: int,
    broker_epoch: int,
) -> FollowerState:
    """Kafka's Replica.updateFetchStateOrThrow: the follower's position after it fetched at
    `fetch_offset` (its LEO). It is caught up as of this fetch when it asked from the leader's
    LEO; as of its previous fetch when it now has everything the leader had then."""
    if broker_epoch != -1 and st.broker_epoch is not None and st.broker_epoch > broker_epoch:
        raise StaleBrokerEpoch(
            f"replica {st.broker_id} fetched with broker epoch {broker_epoch} older than "
            f"{st.broker_epoch}"
        )
    if fetch_offset >= leader_end_offset:
        caught_up = max(st.last_caught_up_time_ms, fetch_time_ms)
    elif fetch_offset >= st.last_fetch_leader_log_end_offset:
        caught_up = max(st.last_caught_up_time_ms, st.last_fetch_time_ms)
    else:
        caught_up = st.last_caught_up_time_ms
    # Every field given: `dataclasses.replace` costs several times more (once a fetch).
    return FollowerState(
        broker_id=st.broker_id,
        log_end_offset=fetch_offset,
        log_start_offset=log_start_offset,
        last_fetch_leader_log_end_offset=leader_end_offset,
        last_fetch_time_ms=fetch_time_ms,
        last_caught_up_time_ms=caught_up,
        broker_epoch=broker_epoch if broker_epoch != -1 else st.broker_epoch,
    )


def reset_follower(
    st: FollowerState, *, now_ms: int, leader_end_offset: int, is_new_leader: bool, in_isr: bool
) -> FollowerState:
    """Kafka's resetReplicaState at makeLeader: an ISR member counts as caught up now, others
    as never (so they do not hold the HW back); a new leader forgets what it knew."""
    caught_up = now_ms if in_isr else NEVER
    if is_new_leader:
        return FollowerState(st.broker_id, last_caught_up_time_ms=caught_up)
    return replace(
        st, last_fetch_leader_log_end_offset=leader_end_offset, last_caught_up_time_ms=caught_up
    )


# --- expansion and shrinking ------------------------------------------------------------------
def can_add_to_isr(state: PartitionState, replica_id: int, eligible: bool) -> bool:
    return not state.is_inflight and replica_id not in state.isr and eligible


def is_follower_in_sync(
    follower: FollowerState, high_watermark: int, leader_epoch_start_offset: int
) -> bool:
    """Its LEO reached the HW and the start of the leader's epoch (so it holds no divergent
    suffix from an older epoch)."""
    leo = follower.log_end_offset
    return leo >= high_watermark and leo >= leader_epoch_start_offset


def needs_expand(
    state: PartitionState,
    follower: FollowerState,
    *,
    high_watermark: int,
    leader_epoch_start_offset: int,
    eligible: bool,
) -> bool:
    return can_add_to_isr(state, follower.broker_id, eligible) and is_follower_in_sync(
        follower, high_watermark, leader_epoch_start_offset
    )


def out_of_sync_replicas(
    state: PartitionState,
    local_broker_id: int,
    followers: Mapping[int, FollowerState],
    *,
    leader_end_offset: int,
    now_ms: int,
    max_lag_ms: int,
) -> frozenset[int]:
    """ISR members (other than the leader) not caught up within `max_lag_ms`; nothing while a
    change is in flight."""
    if state.is_inflight:
        return frozenset()
    out: set[int] = set()
    for rid in state.isr:
        if rid == local_broker_id:
            continue
        f = followers.get(rid)
        if f is None or not f.is_caught_up(leader_end_offset, now_ms, max_lag_ms):
            out.add(rid)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class IsrProposer:
    """The leader proposing an ISR change: its id and epochs, and what it knows of the
    followers (their broker epochs go into the proposal, KIP-903)."""

    leader_id: int
    leader_epoch: int
    partition_epoch: int
    followers: Mapping[int, FollowerState]
    leader_broker_epoch: int = -1

    def propose(self, state: CommittedPartitionState, isr: Iterable[int]) -> IsrProposal:
        members = tuple(sorted(isr))
        epochs = tuple(self._broker_epoch(r, self.followers.get(r)) for r in members)
        return IsrProposal(
            self.leader_id,
            self.leader_epoch,
            members,
            epochs,
            self.partition_epoch,
            state.leader_recovery_state,
        )

    def _broker_epoch(self, replica: int, f: FollowerState | None) -> int:
        if replica == self.leader_id:
            return self.leader_broker_epoch
        return -1 if f is None or f.broker_epoch is None else f.broker_epoch


def prepare_expand(
    state: CommittedPartitionState, new_replica: int, leader: IsrProposer
) -> PendingExpandIsr:
    p = leader.propose(state, state.isr | {new_replica})
    return PendingExpandIsr(state.isr, new_replica, p, state, state.leader_recovery_state)


def prepare_shrink(
    state: CommittedPartitionState, out_of_sync: frozenset[int], leader: IsrProposer
) -> PendingShrinkIsr:
    p = leader.propose(state, state.isr - out_of_sync)
    return PendingShrinkIsr(state.isr, out_of_sync, p, state, state.leader_recovery_state)


# --- high watermark ---------------------------------------------------------------------------
def high_watermark_candidate(
    leader_end_offset: int,
    followers: Mapping[int, FollowerState],
    maximal_isr: frozenset[int],
    *,
    leader_id: int,
    now_ms: int,
    max_lag_ms: int,
    eligible: Callable[[int], bool],
) -> int:
    """Kafka's maybeIncrementLeaderHW: the least LEO over the leader, the maximal ISR and any
    eligible replica caught up within the lag time (it is about to join). A member whose LEO
    is unknown (-1, it has not fetched from this leader yet) holds the HW where it is: the
    candidate is then -1, which never moves the (monotonic) HW.

    So does an ISR member that is not among the replicas (no follower of this leader): a
    reassignment's removed replica between the LeaderAndIsr giving the target replicas and
    the one shrinking the ISR, which a controller lost in between leaves until the next one
    takes over. Kafka's leader ignores such a member; here it counts as unknown, as it still
    counts toward `min.insync.replicas` (stricter than Kafka)."""
    for rid in maximal_isr:
        if rid != leader_id and rid not in followers:
            return -1
    hw = leader_end_offset
    for rid, f in followers.items():
        if f.log_end_offset >= hw:
            continue
        if rid in maximal_isr or (
            f.is_caught_up(leader_end_offset, now_ms, max_lag_ms) and eligible(rid)
        ):
            hw = f.log_end_offset
    return hw


# --- AlterPartition answers -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CommittedLeaderAndIsr:
    """The controller's answer for one partition: what is now stored."""

    leader_id: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    leader_recovery_state: int = 0


class AlterOutcome:
    """What `apply_alter_partition_result` decided."""

    IGNORED = "ignored"  # not the current proposal any more (superseded), or stale
    COMMITTED = "committed"
    REVERTED = "reverted"
    KEPT_PENDING = "kept-pending"  # wait for the controller's LeaderAndIsr
    RETRY = "retry"  # send the same proposal again


RETRIABLE_STAY_PENDING = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.invalid_update_version,
    }
)
REVERT_ERRORS = frozenset({ErrorCode.operation_not_attempted, ErrorCode.ineligible_replica})


def apply_alter_partition_result(
    current: PartitionState,
    proposed: PendingIsrState,
    result: CommittedLeaderAndIsr | ErrorCode,
    *,
    leader_epoch: int,
    partition_epoch: int,
) -> tuple[str, PartitionState, int]:
    """Kafka's handleAlterPartitionUpdate / handleAlterPartitionError. Returns (outcome, new
    state, new partition epoch).

    * Only the answer to the proposal still pending counts: a LeaderAndIsr that arrived
      meanwhile replaced the state and the answer is ignored.
    * Success commits the controller's ISR (unless it names another leader epoch or an older
      partition epoch).
    * INELIGIBLE_REPLICA / OPERATION_NOT_ATTEMPTED: the controller refused; revert to the last
      committed state.
    * FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_OR_PARTITION: the controller's
      state moved on without us; stay pending (no new proposal) until its LeaderAndIsr arrives.
    * Anything else: retry the same proposal.
    """
    if current is not proposed:
        return AlterOutcome.IGNORED, current, partition_epoch
    if isinstance(result, CommittedLeaderAndIsr):
        if result.leader_epoch != leader_epoch or result.partition_epoch < partition_epoch:
            return AlterOutcome.IGNORED, current, partition_epoch
        return (
            AlterOutcome.COMMITTED,
            CommittedPartitionState(frozenset(result.isr), result.leader_recovery_state),
            result.partition_epoch,
        )
    if result in REVERT_ERRORS:
        back = proposed.last_committed or CommittedPartitionState(
            proposed.isr, proposed.leader_recovery_state
        )
        return AlterOutcome.REVERTED, back, partition_epoch
    if result in RETRIABLE_STAY_PENDING:
        return AlterOutcome.KEPT_PENDING, current, partition_epoch
    return AlterOutcome.RETRY, current, partition_epoch
