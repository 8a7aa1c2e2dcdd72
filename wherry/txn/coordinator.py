"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager).

One `TransactionCoordinator` per broker holds the transactional ids of the
`__transaction_state` partitions this broker leads. It is I/O-free: storage and the marker
channel are injected (`storage.py`), time is passed in, answers go through callbacks.

* Requests: `init_producer_id`, `add_partitions` (AddPartitionsToTxn and AddOffsetsToTxn),
  `verify_partitions` (AddPartitionsToTxn v4+ verify-only), `end_transaction_result` (EndTxn;
  v5's answer carries the producer id and epoch, older versions answer its error), `describe`,
  `list_transactions`, each with Kafka's errors for every wrong state.
* EndTxn: PrepareCommit/PrepareAbort is written, the client answered, the markers handed to
  the channel; when they are all written the channel calls `markers_written` and
  CompleteCommit/CompleteAbort is written (retried while COORDINATOR_NOT_AVAILABLE).
* Transactions v2 (KIP-890, `client_transaction_version` 2): a partition leader adds the
  partitions of a client's Produce v12+ / TxnOffsetCommit v5+ (`add_partitions` with version
  2); EndTxn v5 bumps the epoch at every end (its answer carries the new epoch, or a new
  producer id at epoch 0 once the epoch is exhausted) and only a retry is accepted after it.
* Partitions are loaded from their log when this broker becomes their leader (answers are
  COORDINATOR_LOAD_IN_PROGRESS meanwhile); transactions found in PrepareCommit/PrepareAbort
  resume their markers, which is how a transaction completes after a coordinator failover.
* `advance_clock` (the broker's ticker, wall clock) aborts transactions open longer than their
  timeout (with an epoch bump, fencing the producer) every
  `transaction.abort.timed.out.transaction.cleanup.interval.ms`, and removes ids idle past
  `transactional.id.expiration.ms` (a tombstone) every
  `transaction.remove.expired.transaction.cleanup.interval.ms`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.linear_regex import InvalidPattern, compile_linear
from wherry.common.partition_loads import begin_load
from wherry.common.topic_partition import TopicPartition
from wherry.txn.loader import read_partition
from wherry.txn.metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTxnTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
    is_epoch_exhausted,
    supports_epoch_bump,
)
from wherry.txn.records import TransactionLogValue, encode_key, encode_value, partition_for
from wherry.txn.storage import MarkerChannel, PendingMarkers, TxnStorage
from wherry.txn.waits import TxnWaits, Waiter

log = logging.getLogger(__name__)

__all__ = ["EndResult", "InitResult", "TransactionCoordinator", "TxnCoordinatorConfig"]

E = ErrorCode
S = TxnState
RETRY_BACKOFF_MS = 100

InitResult = tuple[ErrorCode, int, int]  # (error, producer id, producer epoch)
EndResult = InitResult  # EndTxn v5 answers the producer id and epoch to go on with
Respond = Callable[[ErrorCode], None]


@dataclass(frozen=True, slots=True)
class TxnCoordinatorConfig:
    """Kafka's transaction coordinator settings (names and defaults in `server/config.py`)."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_state_log_num_partitions: int = 50
    # How long an AddPartitionsToTxn / AddOffsetsToTxn waits for the transaction's change in
    # progress (the previous end's markers and Complete* record) before CONCURRENT_TRANSACTIONS
    # (Kafka's default add.partitions.to.txn.retry.backoff.max.ms); 0 answers at once.
    concurrent_transactions_wait_ms: int = 100
    # The cluster's `transaction.version` feature level: 1+ writes the flexible records.
    transaction_version: int = 0


def _append_error(error: ErrorCode) -> ErrorCode:
    """What a failed `__transaction_state` append means to the client (Kafka's mapping)."""
    if error in (
        E.unknown_topic_or_partition,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
        E.request_timed_out,
    ):
        return E.coordinator_not_available
    if error in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if error in (E.message_too_large, E.record_list_too_large):
        return E.unknown_server_error
    return error


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: TxnCoordinatorConfig,
        storage: TxnStorage,
        markers: MarkerChannel,
        *,
        now_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.storage = storage
        self.markers = markers
        self.partition_count = config.transaction_state_log_num_partitions
        self._owned: dict[int, int] = {}  # partition -> coordinator epoch (its leader epoch)
        self._loading: dict[int, int] = {}
        self._txns: dict[int, dict[str, TransactionMetadata]] = {}
        self._next_abort_check = now_ms + config.abort_timed_out_transaction_cleanup_interval_ms
        self._next_expiry_check = now_ms + config.remove_expired_transaction_cleanup_interval_ms
        # Complete* writes that failed retriably: (due time, pending markers).
        self._completion_retries: list[tuple[int, PendingMarkers]] = []
        # Adds waiting for a transactional id's change in progress to end.
        self.waits = TxnWaits()
        self._prefix = f"[TransactionCoordinator id={broker_id}]"

    # --- placement and loading ------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partition_count)

    def is_partition_loading(self, partition: int) -> bool:
        return partition in self._loading

    def owned_partitions(self) -> set[int]:
        return set(self._owned)

    def begin_loading(self, partition: int, epoch: int) -> bool:
        """This broker leads `partition` from leader epoch `epoch`; False if already done."""
        return begin_load(self._owned, self._loading, partition, epoch, self.unload_partition)

    def load_partition(
        self, partition: int, chunks: Iterable[bytes], *, now_ms: int, epoch: int
    ) -> bool:
        """Replay the partition's log; False if leadership moved on meanwhile."""
        if self._loading.get(partition) != epoch:
            return False
        values = read_partition(chunks)
        txns: dict[str, TransactionMetadata] = {}
        for tid, v in values.items():
            txns[tid] = _from_value(tid, v)
        del self._loading[partition]
        self._owned[partition] = epoch
        self._txns[partition] = txns
        log.info(
            "%s loaded %d transactional ids of partition %d (coordinator epoch %d)",
            self._prefix,
            len(txns),
            partition,
            epoch,
        )
        for txn in txns.values():
            if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                txn.prepare_complete(now_ms)
                self._send_markers(partition, epoch, txn)
        return True

    def unload_partition(self, partition: int) -> None:
        self._loading.pop(partition, None)
        if self._owned.pop(partition, None) is not None:
            self._txns.pop(partition, None)
            self.markers.remove_partition(partition)
            self._completion_retries = [
                r for r in self._completion_retries if r[1].txn_partition != partition
            ]
            log.info("%s unloaded partition %d", self._prefix, partition)
        self.waits.fail(lambda tid: self.partition_for(tid) == partition, E.not_coordinator)

    def shutdown(self) -> None:
        for p in list(self._owned) + list(self._loading):
            self.unload_partition(p)

    def _lookup(self, tid: str) -> tuple[ErrorCode, int, int, TransactionMetadata | None]:
        """(error, partition, coordinator epoch, metadata or None)."""
        p = self.partition_for(tid)
        if p in self._loading:
            return E.coordinator_load_in_progress, p, -1, None
        epoch = self._owned.get(p)
        if epoch is None:
            return E.not_coordinator, p, -1, None
        return E.none, p, epoch, self._txns[p].get(tid)

    def _producer_txn(
        self, tid: str, producer_id: int
    ) -> tuple[ErrorCode, int, int, TransactionMetadata | None]:
        """`_lookup` of a transaction that `producer_id` holds: INVALID_REQUEST without an
        id, INVALID_PRODUCER_ID_MAPPING when none or another producer's."""
        if not tid:
            return E.invalid_request, -1, -1, None
        err, partition, epoch, txn = self._lookup(tid)
        if err == E.none and (txn is None or txn.producer_id != producer_id):
            return E.invalid_producer_id_mapping, partition, epoch, None
        return err, partition, epoch, txn

    def transaction(self, tid: str) -> TransactionMetadata | None:
        err, _, _, txn = self._lookup(tid)
        return txn if err == E.none else None

    # --- writing state --------------------------------------------------------------------
    def _write(
        self,
        partition: int,
        epoch: int,
        txn: TransactionMetadata,
        transit: TxnTransit,
        respond: Respond,
        *,
        retry_on: Callable[[ErrorCode], bool] = lambda e: False,
    ) -> None:
        value = (
            None
            if transit.state is S.DEAD
            else encode_value(
                TransactionLogValue(
                    transit.producer_id,
                    transit.producer_epoch,
                    transit.timeout_ms,
                    transit.state.id,
                    transit.partitions,
                    transit.last_update_timestamp_ms,
                    transit.start_timestamp_ms,
                    transit.last_producer_id,
                    transit.next_producer_id,
                    transit.client_transaction_version,
                ),
                # Kafka: flexible from transaction.version 1 on; also whenever a client used
                # v2, whose fields a v0 record would lose.
                1 if max(self.config.transaction_version, transit.client_transaction_version)
                else 0,
            )
        )

        def done(error: ErrorCode, _offset: int) -> None:
            err = _append_error(error)
            if err == E.none and (
                self._owned.get(partition) != epoch
                or self._txns[partition].get(txn.transactional_id) is not txn
            ):
                err = E.not_coordinator  # the partition moved while the write was in flight
            if err == E.none:
                if transit.state is S.DEAD:
                    txn.complete_transition(transit)
                    del self._txns[partition][txn.transactional_id]
                else:
                    txn.complete_transition(transit)
            elif not retry_on(err):
                txn.abort_transition()
            respond(err)
            self.waits.changed(txn.transactional_id, transit.last_update_timestamp_ms)

        self.storage.append(partition, [(encode_key(txn.transactional_id), value)], done)

    # --- InitProducerId -------------------------------------------------------------------
    def needs_producer_id(self, tid: str) -> bool:
        """Whether InitProducerId for `tid` may need a new producer id (new id, or epoch
        exhausted): the broker claims one first (its allocation is asynchronous)."""
        txn = self.transaction(tid)
        return txn is None or txn.is_producer_epoch_exhausted

    def init_producer_id(
        self,
        tid: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        new_producer_id: int | None,
        now_ms: int,
        respond: Callable[[InitResult], None],
    ) -> None:
        """InitProducerId with a transactional id; `expected` is KIP-360's (producer id,
        epoch) or None; `new_producer_id` an id claimed for the case one is needed."""

        def fail(err: ErrorCode) -> None:
            respond((err, -1, -1))

        if not tid:
            return fail(E.invalid_request)
        if timeout_ms <= 0 or timeout_ms > self.config.transaction_max_timeout_ms:
            return fail(E.invalid_transaction_timeout)
        err, partition, epoch, txn = self._lookup(tid)
        if err != E.none:
            return fail(err)
        if txn is None:
            if new_producer_id is None:
                return fail(E.concurrent_transactions)
            txn = TransactionMetadata(
                tid, new_producer_id, timeout_ms=timeout_ms, last_update_timestamp_ms=now_ms
            )
            self._txns[partition][tid] = txn
            new_producer_id = None
        if txn.pending_transition_in_progress:
            return fail(E.concurrent_transactions)
        if expected is not None and not _valid_producer_id(txn, expected):
            return fail(E.producer_fenced)
        state = txn.state
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return fail(E.concurrent_transactions)
        if state is S.ONGOING:
            # Fence the producer of the previous epoch: abort its transaction with a bumped
            # epoch; the client retries on CONCURRENT_TRANSACTIONS.
            transit = txn.prepare_fence_producer_epoch()

            def after_abort(e: ErrorCode) -> None:
                fail(e if e != E.none else E.concurrent_transactions)

            self._abort_as_coordinator(tid, transit, now_ms, after_abort)
            return None
        if state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return fail(E.concurrent_transactions)  # Dead: being removed
        new_transit: TxnTransit | None
        if txn.is_producer_epoch_exhausted and (
            expected is None or expected[1] == txn.producer_epoch
        ):
            if new_producer_id is None:
                return fail(E.concurrent_transactions)
            new_transit = txn.prepare_producer_id_rotation(
                new_producer_id, timeout_ms, now_ms, expected is not None
            )
        else:
            new_transit = txn.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now_ms
            )
            if new_transit is None:
                return fail(E.producer_fenced)
        t = new_transit

        def written(e: ErrorCode) -> None:
            respond((e, t.producer_id, t.producer_epoch) if e == E.none else (e, -1, -1))

        self._write(partition, epoch, txn, t, written)
        return None

    # --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------
    def add_partitions(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        respond: Respond,
        transaction_version: int = 0,
    ) -> None:
        """AddPartitionsToTxn / AddOffsetsToTxn (Kafka's handleAddPartitionsToTransaction): the
        partitions join the transaction (written), which is Ongoing from then on.
        `transaction_version` 2: a partition leader adds them for a transactions-v2 client's
        Produce or TxnOffsetCommit (AddPartitionsToTxn v5 without verify-only).

        While the transaction changes (the previous end's markers and Complete* record, or
        another write) the add waits for that change to end, up to
        `concurrent_transactions_wait_ms`, and is then decided; Kafka answers
        CONCURRENT_TRANSACTIONS at once, and the client retries after a backoff (20 ms in
        librdkafka and the Java producer) that would otherwise be every back-to-back
        transaction's cost."""
        deadline = now_ms + self.config.concurrent_transactions_wait_ms
        self._add(
            tid, producer_id, producer_epoch, frozenset(partitions), now_ms, respond,
            transaction_version, deadline,
        )

    def _add(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        added: frozenset[TopicPartition],
        now_ms: int,
        respond: Respond,
        transaction_version: int,
        deadline_ms: int,
    ) -> None:
        err, partition, epoch, txn = self._producer_txn(tid, producer_id)
        if err != E.none or txn is None:
            return respond(err)
        if txn.producer_epoch != producer_epoch:
            return respond(E.producer_fenced)
        if txn.pending_transition_in_progress or txn.state in (
            S.PREPARE_COMMIT,
            S.PREPARE_ABORT,
        ):
            if now_ms >= deadline_ms:
                return respond(E.concurrent_transactions)

            def again(now: int) -> None:
                self._add(
                    tid, producer_id, producer_epoch, added, max(now, now_ms), respond,
                    transaction_version, deadline_ms,
                )

            return self.waits.add(tid, Waiter(deadline_ms, again, respond))
        if txn.state is S.DEAD:
            return respond(E.invalid_producer_id_mapping)
        if txn.state is S.ONGOING and added <= txn.partitions:
            return respond(E.none)
        transit = txn.prepare_add_partitions(added, now_ms, transaction_version)
        self._write(partition, epoch, txn, transit, respond)
        return None

    def verify_partitions(
        self, tid: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode | dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ verify-only (a partition leader asks before it appends an
        older client's transactional batch): one error for the transaction, or one per
        partition (TRANSACTION_ABORTABLE when not in the transaction; Kafka's
        handleVerifyPartitionsInTransaction -- a pending change is not checked, the append
        checks the epoch again)."""
        if not tid:
            return E.invalid_request
        err, _, _, txn = self._lookup(tid)
        if err != E.none:
            return err
        if txn is None or txn.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if txn.producer_epoch != producer_epoch:
            return E.producer_fenced
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.concurrent_transactions
        return {
            tp: E.none if tp in txn.partitions else E.transaction_abortable for tp in partitions
        }

    # --- EndTxn ---------------------------------------------------------------------------
    def needs_producer_id_for_end(self, tid: str, transaction_version: int) -> bool:
        """Whether EndTxn may move `tid` to a new producer id (transactions v2 with an
        exhausted epoch): the broker claims one first (its allocation is asynchronous)."""
        if not supports_epoch_bump(transaction_version):
            return False
        txn = self.transaction(tid)
        return txn is not None and txn.state is S.ONGOING and txn.is_producer_epoch_exhausted

    def end_transaction_result(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        respond: Callable[[EndResult], None],
        *,
        transaction_version: int = 0,
        new_producer_id: int | None = None,
    ) -> None:
        """EndTxn answered with (error, producer id, producer epoch); `transaction_version` 2
        for EndTxn v5 (the epoch is bumped; the answer is the id and epoch to go on with),
        `new_producer_id` an id claimed for an exhausted epoch (`needs_producer_id_for_end`)."""
        self._end(
            tid, producer_id, producer_epoch, commit, True, now_ms, respond,
            transaction_version, new_producer_id,
        )

    def _abort_as_coordinator(
        self, tid: str, fence: TxnTransit, now_ms: int, respond: Respond
    ) -> None:
        """An abort the coordinator starts itself (fencing, a timeout), with its prepared
        fence, at the transaction version the client used: a v1 client's transaction ends
        as v1 ends it (its late EndTxn is PRODUCER_FENCED as before), a v2 client's with the
        abort's one epoch bump. (Kafka 4.0 uses the cluster's level here.)"""
        txn = self.transaction(tid)
        version = 0 if txn is None else txn.client_transaction_version
        self._end(
            tid, fence.producer_id, fence.producer_epoch, False, False, now_ms,
            lambda r: respond(r[0]), version, None,
        )

    def _end(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool,
        now_ms: int,
        respond: Callable[[EndResult], None],
        transaction_version: int,
        new_producer_id: int | None,
    ) -> None:
        """EndTxn from the client, or an abort the coordinator starts itself (Kafka's
        endTransaction): PrepareCommit/PrepareAbort written, then the markers."""

        def fail(error: ErrorCode) -> None:
            respond((error, -1, -1))

        if not tid:
            return fail(E.invalid_request)
        err, partition, epoch, txn = self._lookup(tid)
        if err != E.none or txn is None:
            return fail(err if err != E.none else E.invalid_producer_id_mapping)
        epoch_error = _end_epoch_error(txn, producer_id, producer_epoch, from_client)
        if epoch_error is not None:
            return fail(epoch_error)
        if txn.pending_transition_in_progress and txn.pending_state is not S.PREPARE_EPOCH_FENCE:
            return fail(E.concurrent_transactions)
        state = txn.state
        if state is S.ONGOING:
            prepared = _prepare_end(
                txn, commit, producer_epoch, transaction_version, new_producer_id, now_ms
            )
            if isinstance(prepared, ErrorCode):
                return fail(prepared)
            transit, is_fence = prepared
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if commit != (state is S.COMPLETE_COMMIT):
                return fail(E.invalid_txn_state)
            return respond((E.none, txn.producer_id, txn.producer_epoch))  # a retry
        elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            same = commit == (state is S.PREPARE_COMMIT)
            return fail(E.concurrent_transactions if same else E.invalid_txn_state)
        else:  # Empty (nothing to end), Dead
            if txn.pending_state is S.PREPARE_EPOCH_FENCE:
                txn.pending_state = None
            return fail(E.invalid_txn_state)

        def written(e: ErrorCode) -> None:
            if e != E.none:
                if is_fence:
                    txn.has_failed_epoch_fence = True
                return fail(e)
            current = self.transaction(tid)
            if (
                current is not txn
                or txn.producer_id != producer_id
                or txn.producer_epoch != transit.producer_epoch
                or txn.state is not transit.state
                or txn.pending_transition_in_progress
            ):
                return fail(E.not_coordinator)
            if transit.next_producer_id != NO_PRODUCER_ID:
                respond((E.none, transit.next_producer_id, 0))
            else:
                respond((E.none, txn.producer_id, txn.producer_epoch))
            txn.prepare_complete(now_ms)
            self._send_markers(partition, epoch, txn)
            return None

        self._write(partition, epoch, txn, transit, written)
        return None

    def _send_markers(self, partition: int, epoch: int, txn: TransactionMetadata) -> None:
        """`txn` is PrepareCommit/PrepareAbort with Complete* pending: write its markers."""
        self.markers.add_markers(
            PendingMarkers(
                txn.transactional_id,
                partition,
                epoch,
                txn.producer_id,
                txn.producer_epoch,
                txn.state is S.PREPARE_COMMIT,
                frozenset(txn.partitions),
            )
        )

    def is_current(self, pending: PendingMarkers) -> bool:
        """Whether markers are still this coordinator's to send (the partition not moved)."""
        if self._owned.get(pending.txn_partition) != pending.coordinator_epoch:
            return False
        txn = self._txns[pending.txn_partition].get(pending.transactional_id)
        return (
            txn is not None
            and txn.producer_id == pending.producer_id
            and txn.producer_epoch == pending.producer_epoch
            and txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        )

    def marker_written(self, pending: PendingMarkers, tp: TopicPartition) -> None:
        """One partition's marker is written (or its partition is gone)."""
        if self.is_current(pending):
            txn = self._txns[pending.txn_partition][pending.transactional_id]
            txn.partitions.discard(tp)

    def markers_written(self, pending: PendingMarkers, now_ms: int) -> None:
        """Every marker is written: write CompleteCommit/CompleteAbort."""
        if not self.is_current(pending):
            log.info(
                "%s not completing %s: its coordinator moved or it changed",
                self._prefix,
                pending.transactional_id,
            )
            return
        txn = self._txns[pending.txn_partition][pending.transactional_id]
        complete = txn.complete_transit(now_ms)
        if txn.pending_state is not complete.state:
            return

        def written(e: ErrorCode) -> None:
            if e == E.coordinator_not_available:
                self._completion_retries.append((now_ms + RETRY_BACKOFF_MS, pending))
            elif e != E.none:
                log.warning(
                    "%s writing %s of %s failed: %s",
                    self._prefix,
                    complete.state,
                    pending.transactional_id,
                    e.name,
                )

        self._write(
            pending.txn_partition,
            pending.coordinator_epoch,
            txn,
            complete,
            written,
            retry_on=lambda e: e == E.coordinator_not_available,
        )

    # --- DescribeTransactions / ListTransactions ------------------------------------------
    def describe(self, tid: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        err, _, _, txn = self._lookup(tid)
        if err != E.none:
            return err, None
        if txn is None or txn.state is S.DEAD:
            return E.transactional_id_not_found, None
        return E.none, txn

    def list_transactions(
        self,
        states: Iterable[str],
        producer_ids: Iterable[int],
        *,
        now_ms: int,
        duration_ms: int = -1,
        pattern: str | None = None,
    ) -> tuple[ErrorCode, list[str], list[TransactionMetadata]]:
        """(error, unknown state filters, matching transactions)."""
        if self._loading:
            return E.coordinator_load_in_progress, [], []
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in states:
            s = TxnState.parse(name)
            if s is None:
                unknown.append(name)
            else:
                wanted.add(s)
        pids = set(producer_ids)
        states_given = bool(wanted or unknown)
        try:
            regex = compile_linear(pattern) if pattern else None
        except InvalidPattern:
            return E.invalid_regular_expression, [], []
        out: list[TransactionMetadata] = []
        for txns in self._txns.values():
            for txn in txns.values():
                if txn.state is S.DEAD:
                    continue
                if states_given and txn.state not in wanted:
                    continue
                if pids and txn.producer_id not in pids:
                    continue
                if duration_ms >= 0 and (
                    txn.start_timestamp_ms < 0 or now_ms - txn.start_timestamp_ms < duration_ms
                ):
                    continue
                if regex is not None and not regex.fullmatch(txn.transactional_id):
                    continue
                out.append(txn)
        return E.none, unknown, sorted(out, key=lambda t: t.transactional_id)

    # --- timers (the broker's ticker, wall clock) -----------------------------------------
    def advance_clock(self, now_ms: int) -> None:
        if now_ms >= self._next_abort_check:
            self._next_abort_check = (
                now_ms + self.config.abort_timed_out_transaction_cleanup_interval_ms
            )
            self.abort_timed_out_transactions(now_ms)
        if now_ms >= self._next_expiry_check:
            self._next_expiry_check = (
                now_ms + self.config.remove_expired_transaction_cleanup_interval_ms
            )
            self.remove_expired_transactional_ids(now_ms)
        self.waits.expire(now_ms, E.concurrent_transactions)
        due = [r for r in self._completion_retries if r[0] <= now_ms]
        if due:
            self._completion_retries = [r for r in self._completion_retries if r[0] > now_ms]
            for _, pending in due:
                self.markers_written(pending, now_ms)

    def next_expiration_ms(self) -> int | None:
        times = [self._next_abort_check, self._next_expiry_check]
        times += [r[0] for r in self._completion_retries]
        earliest = self.waits.earliest_deadline_ms()
        if earliest is not None:
            times.append(earliest)
        return min(times)

    def abort_timed_out_transactions(self, now_ms: int) -> int:
        """Abort (bumping the epoch, which fences the producer) every Ongoing transaction
        open longer than its timeout; returns how many aborts started."""
        started = 0
        for txns in list(self._txns.values()):
            for txn in list(txns.values()):
                if (
                    txn.state is not S.ONGOING
                    or txn.pending_transition_in_progress
                    or txn.start_timestamp_ms + txn.timeout_ms >= now_ms
                ):
                    continue
                try:
                    transit = txn.prepare_fence_producer_epoch()
                except IllegalTxnTransition:
                    continue
                log.info(
                    "%s aborting timed-out transaction of %s (producer id %d, epoch %d)",
                    self._prefix,
                    txn.transactional_id,
                    txn.producer_id,
                    txn.producer_epoch,
                )
                tid = txn.transactional_id

                def done(e: ErrorCode, tid: str = tid) -> None:
                    if e != E.none:
                        log.info("%s aborting %s failed: %s", self._prefix, tid, e.name)

                self._abort_as_coordinator(tid, transit, now_ms, done)
                started += 1
        return started

    def remove_expired_transactional_ids(self, now_ms: int) -> int:
        """Write tombstones for ids without a transaction, idle past the expiration."""
        removed = 0
        limit = now_ms - self.config.transactional_id_expiration_ms
        for partition, txns in list(self._txns.items()):
            epoch = self._owned[partition]
            for txn in list(txns.values()):
                if (
                    txn.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                    or txn.pending_transition_in_progress
                    or txn.last_update_timestamp_ms > limit
                ):
                    continue
                tid = txn.transactional_id

                def done(e: ErrorCode, tid: str = tid) -> None:
                    if e == E.none:
                        log.info("%s removed expired transactional id %s", self._prefix, tid)

                self._write(partition, epoch, txn, txn.prepare_dead(), done)
                removed += 1
        return removed


def _end_epoch_error(
    txn: TransactionMetadata, producer_id: int, producer_epoch: int, from_client: bool
) -> ErrorCode | None:
    """EndTxn's producer id and epoch checks (Kafka's endTransaction). Transactions v1: the
    client's epoch is the current one. v2: each end bumped the epoch, so in Prepare*/Complete*
    only a retry (epoch + 1 stored, or a retry of an end that moved to a new producer id) is
    valid, otherwise the epoch is the current one."""
    v2 = (
        supports_epoch_bump(txn.client_transaction_version)
        and txn.pending_state is not S.PREPARE_EPOCH_FENCE
    )
    retry_on_overflow = (
        v2
        and txn.last_producer_id == producer_id
        and producer_epoch == MAX_EPOCH - 1
        and txn.producer_epoch == 0
    )
    if v2:
        retry_on_bump = txn.producer_epoch == producer_epoch + 1
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid = retry_on_bump
        elif txn.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow
        else:
            valid = producer_epoch == txn.producer_epoch
    else:
        valid = (
            not from_client or producer_epoch == txn.producer_epoch
        ) and producer_epoch >= txn.producer_epoch
    if txn.producer_id != producer_id and not retry_on_overflow:
        return E.invalid_producer_id_mapping
    return None if valid else E.producer_fenced


def _prepare_end(
    txn: TransactionMetadata,
    commit: bool,
    producer_epoch: int,
    transaction_version: int,
    new_producer_id: int | None,
    now_ms: int,
) -> tuple[TxnTransit, bool] | ErrorCode:
    """PrepareCommit/PrepareAbort of an Ongoing transaction: (the transit, whether it ends
    a fence), or the error. A fence (the coordinator aborting a fenced or timed-out producer's
    transaction) carries the fence's epoch; with transactions v2 that is the abort's own
    bump, never a second one."""
    target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    v2 = supports_epoch_bump(transaction_version)
    fence = not commit and txn.pending_state is S.PREPARE_EPOCH_FENCE
    if txn.pending_state is not None and not fence:
        return E.concurrent_transactions
    next_pid = NO_PRODUCER_ID
    if v2 and not fence and txn.is_producer_epoch_exhausted:
        if new_producer_id is None:
            return E.concurrent_transactions  # the broker claims one and the client retries
        next_pid = new_producer_id
    is_fence = False
    if fence:
        txn.pending_state = None
        if not v2:
            is_fence = True
            txn.producer_epoch = producer_epoch
            txn.last_producer_epoch = NO_PRODUCER_EPOCH
    transit = txn.prepare_abort_or_commit(
        target, now_ms, transaction_version, next_pid, fence=fence
    )
    return transit, is_fence


def _valid_producer_id(txn: TransactionMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: a given producer id/epoch is acceptable when the id is new (no epoch yet), it
    is the current id, or it is the previous id with an exhausted epoch (a retried rotation)."""
    pid, epoch = expected
    return (
        txn.producer_epoch == -1
        or pid == txn.producer_id
        or (pid == txn.last_producer_id and is_epoch_exhausted(epoch))
    )


def _from_value(tid: str, v: TransactionLogValue) -> TransactionMetadata:
    return TransactionMetadata(
        tid,
        v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout_ms=v.timeout_ms,
        state=TxnState.from_id(v.state_id),
        partitions=v.partitions,
        start_timestamp_ms=v.start_timestamp_ms,
        last_update_timestamp_ms=v.last_update_timestamp_ms,
        last_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id,
        client_transaction_version=v.client_transaction_version,
    )
