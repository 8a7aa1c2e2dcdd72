"""One transactional id's state (Kafka's TransactionMetadata / TxnTransitMetadata).

A change is prepared first (`prepare_*` returns the target `TxnTransit` and sets
`pending_state`, so no other change can start), written to `__transaction_state`, and applied
by `complete_transition` once the write is acknowledged (or dropped by `abort_transition`
when it fails). The state table is Kafka's `validPreviousStates`:

* Empty: no transaction (new id, or after an epoch bump); Ongoing: partitions were added;
* PrepareCommit / PrepareAbort: EndTxn written, markers being sent;
* CompleteCommit / CompleteAbort: every marker written;
* Dead: the id expired (tombstone written); PrepareEpochFence: only ever pending, while an
  Ongoing transaction of a fenced producer is aborted with a bumped epoch.

Transactions v2 (`client_transaction_version` 2, KIP-890): every commit or abort bumps the
epoch -- PrepareCommit/PrepareAbort carry epoch + 1, so the markers do too and a zombie of the
old epoch is fenced on every partition --; when the epoch is exhausted the end also moves to
`next_producer_id`, which the Complete* record makes current at epoch 0 (the old id stays as
`last_producer_id`, so a retried EndTxn is recognised).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from wherry.common.state_enum import StateEnum
from wherry.common.topic_partition import TopicPartition

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "IllegalTxnTransition",
    "TransactionMetadata",
    "TxnState",
    "TxnTransit",
    "is_epoch_exhausted",
    "supports_epoch_bump",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 0x7FFF


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: epoch >= Short.MaxValue - 1 is exhausted."""
    return epoch >= MAX_EPOCH - 1


def supports_epoch_bump(transaction_version: int) -> bool:
    """Transactions v2: the epoch is bumped at every commit and abort."""
    return transaction_version >= 2


class TxnState(StateEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        """The byte stored in TransactionLogValue.transactionStatus."""
        return _IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for s, i in _IDS.items():
            if i == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def parse(cls, name: str) -> TxnState | None:
        for s in cls:
            if s.value == name:
                return s
        return None


_IDS = {s: i for i, s in enumerate(TxnState)}

S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTxnTransition(RuntimeError):
    """A transition Kafka's table does not allow (a bug, never a client's error)."""


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The target of a prepared change (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_timestamp_ms: int
    last_update_timestamp_ms: int
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


class TransactionMetadata:
    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        *,
        last_producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
        timeout_ms: int,
        state: TxnState = TxnState.EMPTY,
        partitions: Iterable[TopicPartition] = (),
        start_timestamp_ms: int = -1,
        last_update_timestamp_ms: int,
        next_producer_id: int = NO_PRODUCER_ID,
        client_transaction_version: int = 0,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions: set[TopicPartition] = set(partitions)
        self.start_timestamp_ms = start_timestamp_ms
        self.last_update_timestamp_ms = last_update_timestamp_ms
        # Transactions v2: the id an exhausted epoch moves to once the markers are written,
        # and the transaction version the client used at the last change.
        self.next_producer_id = next_producer_id
        self.client_transaction_version = client_transaction_version
        self.pending_state: TxnState | None = None
        # A fence whose write failed keeps its bumped epoch next time (Kafka's
        # hasFailedEpochFence): the bumped epoch was never handed to anyone.
        self.has_failed_epoch_fence = False

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, pid={self.producer_id}, "
            f"epoch={self.producer_epoch}, state={self.state}, pending={self.pending_state}, "
            f"partitions={sorted(self.partitions)}, tv={self.client_transaction_version})"
        )

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # --- preparing changes ----------------------------------------------------------------
    def _prepare(
        self,
        state: TxnState,
        now_ms: int,
        *,
        producer_id: int | None = None,
        epoch: int | None = None,
        last_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        start_ms: int | None = None,
        next_producer_id: int = NO_PRODUCER_ID,
        transaction_version: int = 0,
    ) -> TxnTransit:
        """The transit to `state` (Kafka's prepareTransitionTo); what is not given stays,
        except the next producer id and the client's transaction version (none, 0)."""
        if self.pending_state is not None:
            raise IllegalTxnTransition(
                f"{self.transactional_id}: preparing {state} while {self.pending_state} is pending"
            )
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTxnTransition(f"{self.transactional_id}: {self.state} -> {state}")
        self.pending_state = state
        return TxnTransit(
            self.producer_id if producer_id is None else producer_id,
            self.producer_id,
            self.producer_epoch if epoch is None else epoch,
            self.last_producer_epoch if last_epoch is None else last_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            state,
            frozenset(self.partitions if partitions is None else partitions),
            self.start_timestamp_ms if start_ms is None else start_ms,
            now_ms,
            next_producer_id,
            transaction_version,
        )

    def prepare_no_transit(self) -> TxnTransit:
        """The current state as a transit (a no-op write's target, Kafka's prepareNoTransit)."""
        return TxnTransit(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.start_timestamp_ms,
            self.last_update_timestamp_ms,
            self.next_producer_id,
            self.client_transaction_version,
        )

    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """Abort an Ongoing transaction with a bumped epoch (zombie fencing, timeouts)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTxnTransition(f"{self.transactional_id}: epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            TxnState.PREPARE_EPOCH_FENCE,
            self.last_update_timestamp_ms,
            epoch=epoch,
            last_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_increment_producer_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | None:
        """InitProducerId's epoch bump; None when the producer is fenced (KIP-360 rules)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTxnTransition(f"{self.transactional_id}: epoch exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # The producer goes on after an abortable error and nobody else initialized.
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: the current epoch again.
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(
            TxnState.EMPTY,
            now_ms,
            epoch=epoch,
            last_epoch=last,
            timeout_ms=timeout_ms,
            partitions=(),
            start_ms=-1,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """An exhausted epoch: a new producer id at epoch 0."""
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(
            TxnState.EMPTY,
            now_ms,
            producer_id=new_producer_id,
            epoch=0,
            last_epoch=last,
            timeout_ms=timeout_ms,
            partitions=(),
            start_ms=-1,
        )

    def prepare_add_partitions(
        self, added: Iterable[TopicPartition], now_ms: int, transaction_version: int = 0
    ) -> TxnTransit:
        starting = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        return self._prepare(
            TxnState.ONGOING,
            now_ms,
            partitions=self.partitions | set(added),
            start_ms=now_ms if starting else self.start_timestamp_ms,
            transaction_version=transaction_version,
        )

    def prepare_abort_or_commit(
        self,
        state: TxnState,
        now_ms: int,
        transaction_version: int = 0,
        next_producer_id: int = NO_PRODUCER_ID,
        *,
        fence: bool = False,
    ) -> TxnTransit:
        """PrepareCommit / PrepareAbort. Transactions v2 bump the epoch (the old one becomes
        the last epoch, or none for a `fence`: a fenced producer may not come back with it);
        `next_producer_id` is the id an exhausted epoch moves to."""
        if not supports_epoch_bump(transaction_version):
            return self._prepare(state, now_ms, transaction_version=transaction_version)
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTxnTransition(f"{self.transactional_id}: epoch {self.producer_epoch}")
        return self._prepare(
            state,
            now_ms,
            epoch=self.producer_epoch + 1,
            last_epoch=NO_PRODUCER_EPOCH if fence else self.producer_epoch,
            next_producer_id=next_producer_id,
            transaction_version=transaction_version,
        )

    def complete_transit(self, now_ms: int) -> TxnTransit:
        """The CompleteCommit / CompleteAbort that follows this PrepareCommit / PrepareAbort
        once its markers are written: no partitions; transactions v2 with an exhausted epoch
        move to the next producer id at epoch 0."""
        state = (
            TxnState.COMPLETE_COMMIT
            if self.state is TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        v2 = supports_epoch_bump(self.client_transaction_version)
        rotate = v2 and self.next_producer_id != NO_PRODUCER_ID
        return TxnTransit(
            self.next_producer_id if rotate else self.producer_id,
            self.producer_id,
            0 if rotate else self.producer_epoch,
            self.producer_epoch if v2 else self.last_producer_epoch,
            self.timeout_ms,
            state,
            frozenset(),
            self.start_timestamp_ms,
            now_ms,
            NO_PRODUCER_ID,
            self.client_transaction_version,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        transit = self.complete_transit(now_ms)
        self._prepare(transit.state, now_ms)  # the table's check; sets the pending state
        return transit

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(TxnState.DEAD, self.last_update_timestamp_ms, partitions=())

    # --- applying them --------------------------------------------------------------------
    def complete_transition(self, t: TxnTransit) -> None:
        """Apply a prepared change once its record is written."""
        if self.pending_state is not t.state:
            raise IllegalTxnTransition(
                f"{self.transactional_id}: completing {t.state}, pending {self.pending_state}"
            )
        self.producer_id = t.producer_id
        # Kafka's previousProducerId moves only with a new epoch or id of the client's.
        if t.state is TxnState.EMPTY or (
            t.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
            and supports_epoch_bump(t.client_transaction_version)
        ):
            self.last_producer_id = t.last_producer_id
        self.next_producer_id = t.next_producer_id
        self.client_transaction_version = t.client_transaction_version
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_timestamp_ms = t.start_timestamp_ms
        self.last_update_timestamp_ms = t.last_update_timestamp_ms
        self.pending_state = None
        self.has_failed_epoch_fence = False

    def abort_transition(self) -> None:
        """A prepared change whose write failed: nothing changed."""
        self.pending_state = None
