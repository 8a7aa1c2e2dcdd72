"""A partition leader's questions to the transaction coordinator before it appends a
transactional batch (Kafka's AddPartitionsToTxnManager, KIP-890).

* Transactions v2 (Produce v12+, TxnOffsetCommit v5+): the client sends no
  AddPartitionsToTxn / AddOffsetsToTxn; the leader adds the partition to the transaction
  itself (AddPartitionsToTxn v5 from broker to coordinator, `verify_only` false).
* Older clients: with `transaction.partition.verification.enable` the leader asks whether the
  partition is in the ongoing transaction (`verify_only`), so a batch of a transaction that was
  already aborted (a late retry) cannot open a transaction no marker will ever close.

Only a producer's first batch of a transaction on a partition is checked (`needs_check`: no
ongoing transaction of that producer and epoch there yet). The coordinator is called in
process when this broker leads the transactional id's `__transaction_state` partition, else
over an `outbound.RequestClient` on a connection `connect_to` opens (the broker's inter-broker
listener; the simulation's network). A marker written on a partition while a check was in
flight voids the check (`VerificationGuards`, Kafka's verification guard): the append then
fails with INVALID_TXN_STATE rather than reopen an ended transaction.

The answers are Kafka's: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE
becomes INVALID_TXN_STATE for a client too old to know it, a lost connection is
NETWORK_EXCEPTION; `produce_error` then turns the retriable ones into NOT_ENOUGH_REPLICAS, which
every producer retries without refreshing its metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.coordinator.txn_markers import BrokerClients, ConnectTo
from wherry.outbound.client import RequestError
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.node import ReplicaNode
from wherry.runtime.parking import answer_of
from wherry.txn.coordinator import TransactionCoordinator
from wherry.txn.records import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

__all__ = ["TxnPartitionVerifier", "VerificationGuards", "needs_check", "produce_error"]

E = ErrorCode
ADD_PARTITIONS_TO_TXN_KEY = 24
BROKER_VERSION = 5  # v4+ are the brokers' versions; v5 knows TRANSACTION_ABORTABLE
TRANSACTION_VERSION_2 = 2

_RETRIABLE = frozenset(
    {
        E.concurrent_transactions,
        E.network_exception,
        E.coordinator_load_in_progress,
        E.coordinator_not_available,
        E.not_coordinator,
    }
)


def produce_error(error: ErrorCode) -> ErrorCode:
    """A failed check as a Produce answer (Kafka's ReplicaManager): the retriable errors as
    NOT_ENOUGH_REPLICAS, which older clients retry too."""
    return E.not_enough_replicas if error in _RETRIABLE else error


def needs_check(node: ReplicaNode, tp: TopicPartition, producer_id: int, epoch: int) -> bool:
    """Whether a transactional batch of (`producer_id`, `epoch`) on `tp` must be checked:
    the producer has no ongoing transaction of that epoch there (Kafka's
    hasOngoingTransaction). A partition this broker does not lead is left to the append,
    which refuses it."""
    partition = node.replica_manager.get_partition(tp)
    if partition is None or not partition.is_leader:
        return False
    entry = partition.log.producer_state.last_entry(producer_id)
    return not (
        entry is not None
        and entry.producer_epoch == epoch
        and entry.current_txn_first_offset >= 0
    )


class VerificationGuards:
    """Checks in flight per (partition, producer id); a marker written there voids them."""

    def __init__(self) -> None:
        self._guards: dict[tuple[TopicPartition, int], object] = {}

    def begin(self, tp: TopicPartition, producer_id: int) -> object:
        token = object()
        self._guards[(tp, producer_id)] = token
        return token

    def holds(self, tp: TopicPartition, producer_id: int, token: object) -> bool:
        return self._guards.get((tp, producer_id)) is token

    def end(self, tp: TopicPartition, producer_id: int, token: object) -> None:
        if self._guards.get((tp, producer_id)) is token:
            del self._guards[(tp, producer_id)]

    def marker_written(self, tp: TopicPartition, producer_id: int) -> None:
        self._guards.pop((tp, producer_id), None)


class TxnPartitionVerifier:
    """Adds or verifies a transaction's partitions at its coordinator, here or remote."""

    def __init__(
        self,
        broker_id: int,
        cache: MetadataCache,
        coordinator: TransactionCoordinator,
        connect_to: ConnectTo,
        now_ms: Callable[[], int],
    ) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.coordinator = coordinator
        self._now_ms = now_ms
        self._clients = BrokerClients(connect_to, f"broker-{broker_id}-txn-verification")
        self.guards = VerificationGuards()
        self.requests_sent = 0
        self._prefix = f"[AddPartitionsToTxnSenderThread-{broker_id}]"

    def close(self) -> None:
        self._clients.close()

    def forget(self) -> None:
        self._clients.forget()

    async def check_append(
        self,
        node: ReplicaNode,
        transactional_id: str,
        producers: Mapping[tuple[int, int], Iterable[TopicPartition]],
        *,
        add: bool,
        abortable_known: bool,
        sequences: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Before an append of transactional batches to `node`'s partitions, by (producer
        id, epoch): the partitions that must not be appended to, with the client's error.
        Only partitions where the producer has no ongoing transaction of that epoch are
        asked about; one where a marker of the producer was written meanwhile gets
        INVALID_TXN_STATE. `sequences`: each partition's first batch sequence, which the
        log keeps while it is asked (`ProducerStateManager.start_verification`), so that a
        later batch cannot be written ahead of this one if this one is refused. Nothing may
        be awaited between this and the append."""
        failed: dict[TopicPartition, ErrorCode] = {}
        for (pid, epoch), tps in producers.items():
            todo = [tp for tp in tps if needs_check(node, tp, pid, epoch)]
            if not todo:
                continue
            if sequences:
                self._start_verification(node, pid, epoch, todo, sequences)
            errors, voided = await self._guarded_check(
                transactional_id, pid, epoch, todo, add=add, abortable_known=abortable_known
            )
            if add and voided:
                # A transactions v2 add waits at the coordinator while the previous
                # transaction ends, and that end's markers land here meanwhile: ask again
                # (now answered at once, about the transaction after them). A late batch of
                # an ended transaction is refused then, its epoch being the old one.
                again, voided = await self._guarded_check(
                    transactional_id, pid, epoch, sorted(voided), add=add,
                    abortable_known=abortable_known,
                )
                errors.update(again)
            for tp, err in errors.items():
                if tp in voided:
                    err = E.invalid_txn_state  # its transaction ended meanwhile
                if err != E.none:
                    failed[tp] = err
        return failed

    def _start_verification(
        self,
        node: ReplicaNode,
        pid: int,
        epoch: int,
        todo: Iterable[TopicPartition],
        sequences: Mapping[TopicPartition, int],
    ) -> None:
        now = self._now_ms()
        for tp in todo:
            seq = sequences.get(tp)
            partition = node.replica_manager.get_partition(tp)
            if seq is not None and seq >= 0 and partition is not None:
                partition.log.producer_state.start_verification(pid, epoch, seq, now)

    async def _guarded_check(
        self,
        transactional_id: str,
        pid: int,
        epoch: int,
        todo: list[TopicPartition],
        *,
        add: bool,
        abortable_known: bool,
    ) -> tuple[dict[TopicPartition, ErrorCode], set[TopicPartition]]:
        """`check` of `todo`: each partition's error, and those answered NONE where a marker
        of the producer was written while they were asked (void)."""
        guards = self.guards
        tokens = {tp: guards.begin(tp, pid) for tp in todo}
        try:
            errors = await self.check(
                transactional_id, pid, epoch, todo, add=add, abortable_known=abortable_known
            )
        finally:
            held = {tp for tp, token in tokens.items() if guards.holds(tp, pid, token)}
            for tp, token in tokens.items():
                guards.end(tp, pid, token)
        out = {tp: errors.get(tp, E.none) for tp in todo}
        return out, {tp for tp, err in out.items() if err == E.none and tp not in held}

    async def check(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        add: bool,
        abortable_known: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's error as the client should see it (NONE when it is in the
        transaction, now or already). `add`: transactions v2, add it; else verify only.
        `abortable_known`: the client's request version knows TRANSACTION_ABORTABLE."""
        tps = sorted(set(partitions))
        if not tps:
            return {}
        raw = await self._ask(transactional_id, producer_id, producer_epoch, tps, add)
        out: dict[TopicPartition, ErrorCode] = {}
        for tp in tps:
            err = raw.get(tp, E.none)
            if err == E.producer_fenced:
                err = E.invalid_producer_epoch  # what producers expect of a fenced append
            elif err == E.transaction_abortable and not abortable_known:
                err = E.invalid_txn_state
            elif err == E.cluster_authorization_failed:
                err = E.invalid_txn_state  # not the client's to see
            out[tp] = err
        return out

    async def _ask(
        self, tid: str, pid: int, epoch: int, tps: list[TopicPartition], add: bool
    ) -> Mapping[TopicPartition, ErrorCode]:
        state = self.cache.partition(
            TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(tid)
        )
        leader = -1 if state is None else state.leader
        if leader < 0:
            return {tp: E.coordinator_not_available for tp in tps}
        if leader == self.broker_id:
            return await self._ask_here(tid, pid, epoch, tps, add)
        return await self._ask_remote(leader, tid, pid, epoch, tps, add)

    async def _ask_here(
        self, tid: str, pid: int, epoch: int, tps: list[TopicPartition], add: bool
    ) -> Mapping[TopicPartition, ErrorCode]:
        coordinator = self.coordinator
        if not add:
            verified = coordinator.verify_partitions(tid, pid, epoch, tps)
            return {tp: verified for tp in tps} if isinstance(verified, ErrorCode) else verified

        def start(respond: Callable[[ErrorCode], None]) -> None:
            coordinator.add_partitions(
                tid, pid, epoch, tps, self._now_ms(), respond, TRANSACTION_VERSION_2
            )

        err = await answer_of(start)
        return {tp: err for tp in tps}

    async def _ask_remote(
        self, broker_id: int, tid: str, pid: int, epoch: int, tps: list[TopicPartition], add: bool
    ) -> Mapping[TopicPartition, ErrorCode]:
        ep = self.cache.endpoint(broker_id)
        if ep is None:
            return {tp: E.coordinator_not_available for tp in tps}
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "transactions": [
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": not add,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                }
            ]
        }
        self.requests_sent += 1
        try:
            resp = await self._clients.get(broker_id, ep.host, ep.port).call(
                ADD_PARTITIONS_TO_TXN_KEY, BROKER_VERSION, body
            )
        except RequestError as e:
            log.warning("%s AddPartitionsToTxn to broker %d failed: %s", self._prefix, broker_id, e)
            return {tp: E.network_exception for tp in tps}
        if resp.error_code != E.none:
            log.error(
                "%s AddPartitionsToTxn to broker %d returned %s",
                self._prefix,
                broker_id,
                ErrorCode(resp.error_code).name,
            )
            return {tp: ErrorCode(resp.error_code) for tp in tps}
        out: dict[TopicPartition, ErrorCode] = {}
        for result in resp.results_by_transaction:
            for topic in result.topic_results:
                for part in topic.results_by_partition:
                    tp = TopicPartition(topic.name, int(part.partition_index))
                    out[tp] = ErrorCode(part.partition_error_code)
        return out
